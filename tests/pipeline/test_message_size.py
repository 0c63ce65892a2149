"""Pairs a fan-out message carries with ``EVALJOBS_PAIRS_PER_MESSAGE`` unset (pipeline.message_size).

One a message unless every model is known to be fast: its pairs took at most ``FAST_PAIR_MS`` (median) in its
newest complete run. A batched run keeps every invariant of one message a pair: each pair evaluated and
recorded once, one report, a failing pair retried on its own message (memory broker and Redis alike).
"""
from __future__ import annotations

from helpers import WorkerProcess, numbered_catalog

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.pipeline import barrier, message_size

#: Enough pairs for a batched run (AUTO_PAIRS × MIN_MESSAGES) and a few more.
BIG = message_size.AUTO_PAIRS * message_size.MIN_MESSAGES + 8


def _catalog(n: int, name: str, failing: int | None = None):
    """``n`` one-call scenarios; scenario ``failing`` answers 500 to its first call, then passes."""
    return loads_catalog(
        f"name: {name}\nscenarios:\n" + "".join(
            f"  - key: s{i:04d}\n    prompt: '{'[sim: fail-first 1 500] ' if i == failing else ''}"
            f"[sim: say answer {i}]'\n    expect: {{contains: ['answer {i}']}}\n" for i in range(n)),
        source=f"{name}.yaml")


def _history(model: str = "sim/fast", duration_ms: float = 2.0, n: int = 12) -> str:
    """A complete earlier run of ``model`` whose pairs each took ``duration_ms``: what the next run learns."""
    run = store.create_run(numbered_catalog(n, f"earlier-{model}"), [model], strategy="fanout")
    for i in range(n):
        store.record_result(run.id, Result(scenario_key=f"s{i:04d}", model=model, status="passed", score=1.0,
                                           output=f"answer {i}", duration_ms=duration_ms))
    assert barrier.finalize(run.id) is not None and store.get_run(run.id).status == "complete"
    return run.id


def test_a_first_run_knows_nothing_and_goes_one_a_message(db_url, monkeypatch):
    store.connect(db_url)
    assert store.pair_speed.recent_pair_durations("sim/fast") == []
    assert message_size.pairs_per_message(None, ["sim/fast"], BIG) == 1
    _history("sim/fast", duration_ms=3.0)
    assert store.pair_speed.recent_pair_durations("sim/fast") == [3.0] * 12
    assert message_size.pairs_per_message(None, ["sim/fast"], BIG) == message_size.AUTO_PAIRS
    # A model not in that run is not known; nor is a run too small to spread over the workers in batches.
    assert message_size.pairs_per_message(None, ["sim/fast", "sim/smart"], BIG) == 1
    assert message_size.pairs_per_message(None, ["sim/fast"], BIG - 16) == 1
    assert message_size.pairs_per_message(1, ["sim/fast"], BIG) == 1  # the user's choice wins


def test_the_newest_complete_run_decides(sqlite_url):
    store.connect(sqlite_url)
    _history("sim/fast", duration_ms=2.0)
    _history("sim/fast", duration_ms=message_size.FAST_PAIR_MS * 3)  # the provider got slow since
    assert message_size.pairs_per_message(None, ["sim/fast"], BIG) == 1
    _history("sim/fast", duration_ms=message_size.FAST_PAIR_MS)  # and fast again
    assert message_size.pairs_per_message(None, ["sim/fast"], BIG) == message_size.AUTO_PAIRS


def test_a_run_of_one_slow_pair_does_not_decide_alone(sqlite_url):
    """Runs of a pair or two (a benchmark's warm-up) are read together: one slow pair under a passing load is
    outvoted by the runs before it, until there are ``ENOUGH`` pairs."""
    store.connect(sqlite_url)
    for _ in range(3):
        _history("sim/fast", duration_ms=2.0, n=1)
    slow = message_size.FAST_PAIR_MS * 3
    _history("sim/fast", duration_ms=slow, n=1)
    assert store.pair_speed.recent_pair_durations("sim/fast") == [slow, 2.0, 2.0, 2.0]
    assert message_size.pairs_per_message(None, ["sim/fast"], BIG) == message_size.AUTO_PAIRS
    _history("sim/fast", duration_ms=slow, n=store.pair_speed.ENOUGH)
    assert message_size.pairs_per_message(None, ["sim/fast"], BIG) == 1  # enough pairs: the newest decides


def test_a_learned_fast_provider_runs_in_batches_each_pair_once_in_process(sqlite_url, simulated_provider,
                                                                          monkeypatch):
    monkeypatch.delenv("EVALJOBS_PAIRS_PER_MESSAGE", raising=False)
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.05")
    sim = simulated_provider(latency=0)
    with Session(db=sqlite_url, broker="memory", width=2) as session:
        _history()
        before = sim.stats()["completed"]
        info = session.submit(_catalog(BIG, "big", failing=7), ["sim/fast"], strategy="fanout")
        assert info.options.get("pairs_per_message") == message_size.AUTO_PAIRS
        info = session.wait(info.id, timeout=300)
        results = session.results(info.id)
    assert info.status == "complete" and info.persisted == info.expected == BIG and info.report is not None
    assert info.report["summary"]["passed"] == BIG
    assert len({r.scenario_key for r in results}) == len(results) == BIG
    assert {r.scenario_key: r.attempts for r in results if r.attempts != 1} == {"s0007": 2}  # retried alone
    assert sim.stats()["completed"] - before == BIG  # each pair answered once


def test_a_learned_fast_provider_runs_in_batches_each_pair_once_on_redis_workers(
        redis_url, sqlite_url, simulated_provider, monkeypatch, tmp_path):
    monkeypatch.delenv("EVALJOBS_PAIRS_PER_MESSAGE", raising=False)
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.05")
    sim = simulated_provider(latency=0)
    worker = WorkerProcess(redis_url, sqlite_url, threads=2, processes=2, log=tmp_path / "w.log").start()
    try:
        with Session(db=sqlite_url, broker=redis_url) as session:
            session.binding()
            _history()
            before = sim.stats()["completed"]
            info = session.submit(_catalog(BIG, "big", failing=11), ["sim/fast"], strategy="fanout")
            assert info.options.get("pairs_per_message") == message_size.AUTO_PAIRS
            info = session.wait(info.id, timeout=300, poll=0.5)
            results = store.list_results(info.id)
    finally:
        worker.terminate(15)
    assert info.status == "complete" and info.persisted == info.expected == BIG and info.report is not None
    assert info.report["summary"]["passed"] == BIG
    assert len({r.scenario_key for r in results}) == len(results) == BIG
    assert {r.scenario_key: r.attempts for r in results if r.attempts != 1} == {"s0011": 2}
    assert sim.stats()["completed"] - before == BIG
