"""Several pairs a message and group commits (issue 20, the zero-latency path).

``EVALJOBS_PAIRS_PER_MESSAGE`` > 1 makes a fan-out run send ``evaluate_pairs`` batches, whose results
go to the store in one transaction (``store.record_results``). The invariants stay per pair: each
pair its own row, its own uniqueness check and its own barrier count; a redelivered batch evaluates
only its missing pairs; exactly one call completes the run.
"""
from __future__ import annotations

import threading

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.pipeline import actors
from helpers import numbered_catalog


def _result(key: str, model: str = "sim/fast") -> Result:
    return Result(scenario_key=key, model=model, status="passed", score=1.0, output=f"answer {key}")


def test_a_group_commit_inserts_and_counts_each_pair_once(db_url):
    store.connect(db_url)
    run = store.create_run(numbered_catalog(5, "group"), ["sim/fast"], strategy="fanout")
    first = store.record_results(
        run.id, [_result("s0000"), _result("s0001"), _result("s0001"), _result("s0002")]
    )
    assert [r.inserted for r in first] == [True, True, False, True]  # the duplicate within the group: no row
    assert [r.persisted for r in first if r.inserted] == [1, 2, 3] and not any(r.completed for r in first)
    assert first[2].persisted == 3  # what the run has after the group
    again = store.record_results(run.id, [_result("s0000"), _result("s0003")])  # one stored before
    assert [(r.inserted, r.persisted, r.completed) for r in again] == [(False, 4, False), (True, 4, False)]
    last = store.record_results(run.id, [_result("s0004"), _result("s0004")])
    assert [(r.inserted, r.completed) for r in last] == [(True, True), (False, False)]
    info = store.get_run(run.id)
    assert info.persisted == info.expected == 5
    assert sorted(r.scenario_key for r in store.list_results(run.id)) == [f"s{i:04d}" for i in range(5)]
    asked = [("s0001", "sim/fast", 0), ("s0004", "sim/fast", 0), ("s0001", "sim/other", 0),
             ("s0009", "sim/fast", 0)]
    assert store.recorded_among(run.id, asked) == {("s0001", "sim/fast", 0), ("s0004", "sim/fast", 0)}
    assert store.recorded_among("r_none", asked) == set() and store.recorded_among(run.id, []) == set()


def test_a_group_with_an_unexpected_pair_writes_nothing(db_url):
    store.connect(db_url)
    run = store.create_run(numbered_catalog(3, "strict"), ["sim/fast"], strategy="fanout")
    with pytest.raises(store.UnexpectedPair):
        store.record_results(run.id, [_result("s0000"), _result("nope")])
    assert store.get_run(run.id).persisted == 0 and store.list_results(run.id) == []


def test_the_barrier_completes_exactly_once_under_concurrent_overlapping_groups(db_url):
    """8 threads commit overlapping groups (every pair is in 4 of them): each pair one row, the count
    exact, and exactly one Recorded over all the calls says the run completed."""
    store.connect(db_url)
    n = 40
    run = store.create_run(numbered_catalog(n, "race"), ["sim/fast"], strategy="fanout")
    keys = [f"s{i:04d}" for i in range(n)]
    groups = [[_result(keys[(start + j) % n]) for j in range(10)] for start in range(0, n * 4, 10)]
    outcomes: list[store.Recorded] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def commit(mine):
        barrier.wait()
        for group in mine:
            recorded = store.record_results(run.id, group)
            with lock:
                outcomes.extend(recorded)

    threads = [threading.Thread(target=commit, args=(groups[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(outcomes) == n * 4
    assert sum(r.inserted for r in outcomes) == n
    assert sum(r.completed for r in outcomes) == 1
    assert sorted(r.persisted for r in outcomes if r.inserted) == list(range(1, n + 1))
    info = store.get_run(run.id)
    assert info.persisted == info.expected == n and len(store.list_results(run.id)) == n


def test_a_redelivered_batch_evaluates_only_its_missing_pairs(tmp_path, simulated_provider):
    sim = simulated_provider(latency=0)
    with Session(db=f"sqlite:///{tmp_path}/r.db", broker="memory", width=1) as session:
        session.binding()  # the actors, declared on the session's broker
        run = store.create_run(numbered_catalog(4, "redeliver"), ["sim/fast"], strategy="fanout",
                               options={"pairs_per_message": 4})
        store.record_result(run.id, _result("s0001"))  # recorded by an earlier delivery
        batch = [[f"s{i:04d}", "sim/fast"] for i in range(4)]
        before = sim.stats()["completed"]
        assert actors.evaluate_pairs(run.id, batch) is True
        assert sim.stats()["completed"] - before == 3  # s0001 was not evaluated again
        assert actors.evaluate_pairs(run.id, batch) is True  # delivered once more: nothing to do
        assert sim.stats()["completed"] - before == 3
        info = session.wait(run.id, timeout=60)  # the last pair sent finalize_run
        assert info.status == "complete" and info.persisted == 4
        by_key = {r.scenario_key: r for r in session.results(run.id)}
        assert by_key["s0001"].output == "answer s0001"  # the earlier row stands


def test_a_fanout_run_in_batches_keeps_every_pair_and_retries_a_failing_one_on_its_own(
        tmp_path, simulated_provider, monkeypatch):
    monkeypatch.setenv("EVALJOBS_PAIRS_PER_MESSAGE", "5")
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.05")
    simulated_provider(latency=0)
    # One pair fails its first call (a 500): it leaves its batch as a message of its own and passes.
    catalog = loads_catalog(
        "name: batches\nscenarios:\n"
        + "".join(
            f"  - key: s{i:04d}\n    prompt: '{'[sim: fail-first 1 500] ' if i == 7 else ''}[sim: say answer "
            f"{i}]'\n    expect: {{contains: ['answer {i}']}}\n"
            for i in range(12)
        ),
        source="batches.yaml",
    )
    with Session(db=f"sqlite:///{tmp_path}/b.db", broker="memory", width=2) as session:
        info = session.submit(catalog, ["sim/fast", "sim/smart"], strategy="fanout")
        assert info.options.get("pairs_per_message") == 5
        info = session.wait(info.id, timeout=120)
        results = session.results(info.id)
    assert info.status == "complete" and info.persisted == info.expected == 24
    assert info.report["summary"]["passed"] == 24
    assert len({(r.scenario_key, r.model) for r in results}) == 24
    retried = {r.model: r.attempts for r in results if r.scenario_key == "s0007"}
    assert retried == {"sim/fast": 2, "sim/smart": 2}


def test_a_batch_that_crashed_its_workers_goes_on_pair_by_pair(tmp_path, simulated_provider):
    """The crash counter's give-up for a batch: not every pair of it is the poison one, so each missing
    pair is sent as a message of its own (with a crash count of its own) instead of being recorded errored."""
    simulated_provider(latency=0)
    with Session(db=f"sqlite:///{tmp_path}/c.db", broker="memory", width=1) as session:
        binding = session.binding()
        run = store.create_run(numbered_catalog(3, "crashy"), ["sim/fast"], strategy="fanout")
        store.record_result(run.id, _result("s0000"))
        message = binding.actors.evaluate_pairs.message(run.id, [[f"s{i:04d}", "sim/fast"] for i in range(3)])
        assert actors.crash_counted(message)[1].startswith('["batch",')
        sent = []
        broker = binding.broker
        original = broker.enqueue
        broker.enqueue = lambda m, *, delay=None: sent.append(m) or m
        try:
            actors.give_up(broker, message, 3)
        finally:
            broker.enqueue = original
    assert [(m.actor_name, m.args[1]) for m in sent] == [("evaluate_scenario", "s0001"),
                                                        ("evaluate_scenario", "s0002")]
    assert store.get_run(run.id).persisted == 1  # nothing recorded errored


def test_batches_carry_epochs_each_its_own_row(tmp_path, simulated_provider, monkeypatch):
    monkeypatch.setenv("EVALJOBS_PAIRS_PER_MESSAGE", "4")
    simulated_provider(latency=0)
    with Session(db=f"sqlite:///{tmp_path}/e.db", broker="memory", width=2) as session:
        info = session.submit(numbered_catalog(5, "epochs"), ["sim/fast"], strategy="fanout", epochs=3)
        info = session.wait(info.id, timeout=120)
        results = session.results(info.id)
    assert info.status == "complete" and info.persisted == info.expected == 15
    assert sorted((r.scenario_key, r.epoch) for r in results) == [
        (f"s{i:04d}", e) for i in range(5) for e in range(3)
    ]
