"""Fan-out on the in-process broker: Dramatiq's StubBroker driven by a real Worker.

Each invariant about the barrier (docs/internals.md, "Invariants") is exercised here with real worker
threads, a real SQLite file and real HTTP to the simulated provider; the same
invariants are checked against Redis, PostgreSQL and worker processes in
test_fanout_redis.py.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from evaljobs.pipeline import barrier
from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.replay import Replay
from evaljobs.pipeline.crash_counting import crashed_result, give_up
from helpers import counted_completes, plugin_broker, wait_until

#: Three scenarios (a tool call among them), shared with tests/pipeline/test_batch_runs.py.
CATALOG = (Path(__file__).parents[1] / "data" / "fan.yaml").read_text(encoding="utf-8")
MODELS = ["sim/one", "sim/two"]


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.01)


@pytest.fixture
def env(sim, monkeypatch, request):
    """The plugin's StubBroker, worker and database (:mod:`evaljobs.testing`), with short retries.

    The retry settings come first: the actors take their retry options when they are declared.
    """
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    monkeypatch.setenv("EVALJOBS_MAX_RETRIES", "2")
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.01")
    monkeypatch.setenv("EVALJOBS_MAX_BACKOFF", "0.05")
    completes = counted_completes(monkeypatch)
    return plugin_broker(request), completes


def make_run(models=MODELS, strategy="fanout", options=None):
    catalog = loads_catalog(CATALOG, source="fan.yaml")
    return store.create_run(catalog, list(models), strategy=strategy, options=options)


def join(binding) -> None:
    binding.broker.join(binding.queue, fail_fast=False)
    binding.broker.join(binding.queue, fail_fast=False)


def test_run_completes_with_every_pair_and_one_report(env, caplog):
    binding, completes = env
    caplog.set_level("WARNING")
    run = make_run()
    binding.actors.start_run.send(run.id)
    join(binding)
    info = store.get_run(run.id)
    assert info.status == "complete" and info.persisted == 6 == info.expected
    results = store.list_results(run.id)
    assert len(results) == 6
    assert {(r.scenario_key, r.model, r.status) for r in results} >= {("a", "sim/one", "passed"),
                                                                       ("c", "sim/two", "failed")}
    b = next(r for r in results if r.scenario_key == "b")
    assert b.tool_calls[0]["name"] == "lookup" and b.status == "passed"
    assert completes == [run.id]
    assert info.report["summary"]["results"] == 6
    assert "returned a value" not in caplog.text  # Dramatiq's warning for an actor's return value


def test_redelivered_message_is_a_no_op(env):
    binding, completes = env
    run = make_run()
    catalog = store.load_snapshot(run.digest)
    store.mark_running(run.id)
    for key in catalog.keys:
        for model in MODELS:
            message = binding.actors.evaluate_scenario.message(run.id, key, model)
            binding.broker.enqueue(message)
            binding.broker.enqueue(message)  # the same message delivered twice
    join(binding)
    info = store.get_run(run.id)
    assert info.persisted == 6 and len(store.list_results(run.id)) == 6
    assert completes == [run.id]


def test_duplicate_start_run_enqueues_nothing_for_persisted_pairs(env, sim):
    binding, completes = env
    run = make_run()
    binding.actors.start_run.send(run.id)
    join(binding)
    before = sim.stats()["requests"]
    binding.actors.start_run.send(run.id)
    join(binding)
    assert sim.stats()["requests"] == before  # no pair evaluated again
    assert store.get_run(run.id).persisted == 6 and completes == [run.id]


def test_finalize_sent_twice_makes_one_report(env):
    binding, completes = env
    run = make_run()
    binding.actors.start_run.send(run.id)
    join(binding)
    report = store.get_run(run.id).report
    binding.actors.finalize_run.send(run.id)
    binding.actors.finalize_run.send(run.id)
    join(binding)
    assert store.get_run(run.id).report == report
    assert completes == [run.id]


def _recorded_without_a_finalize(run) -> list[tuple[str, str]]:
    """Every pair of ``run`` recorded the way the workers do it, but no finalize sent: the worker that
    recorded the last pair was killed between its commit and its send."""
    pairs = [(key, model) for key in store.load_snapshot(run.digest).keys for model in MODELS]
    store.mark_running(run.id)
    for key, model in pairs:
        store.record_result(run.id, crashed_result(key, model, 1))
    info = store.get_run(run.id)
    assert (info.status, info.persisted, info.report) == ("running", 6, None)
    return pairs


@pytest.mark.parametrize("shape", ["evaluate_scenario", "evaluate_pairs", "evaluate_model"])
def test_a_redelivered_message_finalizes_a_run_whose_last_recorder_died_before_sending(env, shape):
    binding, completes = env
    run = make_run(strategy="per-model" if shape == "evaluate_model" else "fanout")
    pairs = _recorded_without_a_finalize(run)
    key, model = pairs[-1]
    # The killed worker's message comes back (it was never acknowledged) and finds its pair recorded.
    if shape == "evaluate_scenario":
        binding.actors.evaluate_scenario.send(run.id, key, model)
    elif shape == "evaluate_pairs":
        binding.actors.evaluate_pairs.send(run.id, [[key, model, 0], [pairs[0][0], pairs[0][1], 0]])
    else:
        binding.actors.evaluate_model.send(run.id, model)
    join(binding)
    info = store.get_run(run.id)
    assert info.status == "failed" and info.report["summary"]["results"] == 6  # every row errored
    assert completes == [run.id]
    binding.actors.evaluate_scenario.send(run.id, key, model)  # once finalized: nothing more
    join(binding)
    assert completes == [run.id]


def test_a_pair_given_up_after_crashes_finalizes_a_full_run(env):
    binding, completes = env
    run = make_run()
    key, model = _recorded_without_a_finalize(run)[-1]
    give_up(binding.broker, binding.actors.evaluate_scenario.message(run.id, key, model), 3)
    join(binding)
    assert store.get_run(run.id).report is not None and completes == [run.id]


def always_raises_on_c(scenario, model):
    if scenario.key == "c":
        raise RuntimeError("adapter exploded")
    return Replay(answer="alpha found 7", tool_calls=[])


def test_pair_that_always_raises_is_errored_and_run_completes(env):
    binding, completes = env
    run = make_run(options={"adapter": "test_fanout:always_raises_on_c"})
    binding.actors.start_run.send(run.id)
    join(binding)
    info = store.get_run(run.id)
    assert info.persisted == 6 and info.status == "partial"
    errored = [r for r in store.list_results(run.id) if r.status == "errored"]
    assert {r.scenario_key for r in errored} == {"c"} and len(errored) == 2
    assert "adapter exploded" in errored[0].error
    assert completes == [run.id]


def test_transient_fault_is_retried_then_errored_when_retries_run_out(env, sim):
    binding, _ = env
    text = CATALOG + """
  - key: flaky
    prompt: "[sim: fail-first 1 500] [sim: say recovered]"
    expect: {contains: [recovered]}
  - key: broken
    prompt: "[sim: status 503 down]"
"""
    catalog = loads_catalog(text, source="fan.yaml")
    run = store.create_run(catalog, ["sim/one"], strategy="fanout")
    binding.actors.start_run.send(run.id)
    join(binding)
    results = {r.scenario_key: r for r in store.list_results(run.id)}
    assert results["flaky"].status == "passed" and results["flaky"].attempts == 2
    assert results["broken"].status == "errored" and "503" in results["broken"].error
    assert results["broken"].attempts == 3  # 1 + EVALJOBS_MAX_RETRIES=2
    assert store.get_run(run.id).report is not None


def test_rate_limit_is_retried_after_retry_after_without_using_retries(env, sim):
    binding, _ = env
    text = """
name: rl
scenarios:
  - key: limited
    prompt: "[sim: fail-first 1 429] [sim: say finally]"
    expect: {contains: [finally]}
"""
    run = store.create_run(loads_catalog(text, source="rl.yaml"), ["sim/one"], strategy="fanout")
    started = time.monotonic()
    binding.actors.start_run.send(run.id)
    join(binding)
    elapsed = time.monotonic() - started
    result = store.list_results(run.id)[0]
    assert result.status == "passed"
    assert result.attempts == 1  # a rate limit is not a retry
    # Real time on purpose: the pair waits in the broker's delay queue (or, for a short Retry-After,
    # on its worker thread), both on the real clock; no clock is injected there.
    assert elapsed >= 1.0  # the simulated provider says Retry-After: 1


def test_unknown_run_and_pair_outside_the_run_are_dead_lettered(env):
    binding, _ = env
    run = make_run()
    binding.actors.evaluate_scenario.send("r_doesnotexist", "a", "sim/one")
    binding.actors.evaluate_scenario.send(run.id, "zzz", "sim/one")
    binding.actors.evaluate_scenario.send(run.id, "a", "sim/other")
    join(binding)
    # StubBroker's nack marks the task done *before* appending to dead_letters: wait for the third.
    assert wait_until(lambda: len(binding.broker.dead_letters) >= 3, 5, 0.01)
    assert len(binding.broker.dead_letters) == 3
    assert store.list_results(run.id) == []


def test_per_model_strategy_shares_the_barrier(env):
    binding, completes = env
    run = make_run(strategy="per-model")
    binding.actors.start_run.send(run.id)
    join(binding)
    info = store.get_run(run.id)
    assert info.persisted == 6 and info.report is not None and completes == [run.id]


def test_inline_strategies_share_the_barrier(tmp_path, sim, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    from evaljobs.api import Session

    with Session(db=f"sqlite:///{tmp_path}/inline.db", width=4) as session:
        for strategy in ("sequential", "threads"):
            info = session.submit(loads_catalog(CATALOG, source="fan.yaml"), MODELS, strategy=strategy)
            assert info.status == "complete" and info.persisted == 6 and info.report is not None


def test_barrier_record_twice_counts_once(tmp_path):
    from evaljobs.evaluation.result import Result

    store.connect(f"sqlite:///{tmp_path}/b.db")
    run = make_run(models=["sim/one"])
    calls: list[str] = []
    for key in ("a", "b", "c", "a"):
        barrier.record(run.id, Result(key, "sim/one", "passed", score=1.0), on_complete=calls.append)
    assert calls == [run.id] and store.get_run(run.id).persisted == 3


def test_per_pair_time_limit_ends_a_stuck_pair_as_errored(env):
    # A 2 s limit, not 0.5 s: the quick pair must finish within it on a loaded 2-core machine too. The stuck
    # pair sleeps far longer than any run could take, so "ended before the provider answered" is a bound
    # of the test's own making, not a race.
    binding, completes = env
    text = """
name: slow
scenarios:
  - key: stuck
    prompt: "[sim: sleep 60] [sim: say late]"
  - key: quick
    prompt: "[sim: say fine]"
"""
    # The governor's budget for sim/one past its cold-start scout first (one call goes alone until it
    # answers): otherwise the stuck pair may be the scout and the quick one waits behind it.
    warm = store.create_run(loads_catalog('{"name": "warm", "scenarios": [{"key": "w", "prompt": "hi"}]}',
                                          source="warm.yaml"), ["sim/one"], strategy="fanout")
    binding.actors.start_run.send(warm.id)
    join(binding)
    completes.clear()
    run = store.create_run(loads_catalog(text, source="slow.yaml"), ["sim/one"], strategy="fanout",
                           options={"time_limit": 2.0})
    started = time.monotonic()
    binding.actors.start_run.send(run.id)
    join(binding)
    results = {r.scenario_key: r for r in store.list_results(run.id)}
    assert results["stuck"].status == "errored"
    assert results["stuck"].error.startswith("timed out after 2 s")
    assert results["stuck"].attempts == 1  # a time-out is final, not retried
    assert results["quick"].status == "passed", results["quick"].error
    assert time.monotonic() - started < 60  # the run did not wait for the stuck answer
    assert completes == [run.id]
