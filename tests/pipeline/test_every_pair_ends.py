"""Every pair ends (docs/internals.md, invariant 13; issue 29, item 1).

A provider answering 200 with ``usage.prompt_tokens`` of 10^30 (SQLite) or 3,000,000,000 (PostgreSQL
``integer`` columns) made the result's insert raise; Dramatiq retried the message and dropped it,
and the run stayed ``running`` for ever. Now:

* a usage figure out of range is refused as a provider error (the pair errors with the cause);
* token columns are 64-bit on both databases (an older PostgreSQL database is widened on connect);
* any pair message Dramatiq retries out is recorded ``errored`` by ``pair_abandoned`` (the actors'
  ``on_retry_exhausted``), whatever kept failing — shown with an adapter whose answers the
  database refuses, on the memory broker (SQLite and PostgreSQL) and on a Redis worker process.
"""
from __future__ import annotations

import pytest
from helpers import WorkerProcess

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.replay import Replay

CATALOG = """\
name: usage
scenarios:
  - key: absurd
    prompt: "[sim: usage 1000000000000000000000000000000] [sim: say fine]"
    expect: {contains: [fine]}
  - key: big
    prompt: "[sim: usage 3000000000] [sim: say fine]"
    expect: {contains: [fine]}
  - key: ordinary
    prompt: "[sim: say fine]"
    expect: {contains: [fine]}
"""


def unstorable_adapter(scenario, model):
    """A host adapter whose 'unstorable' answer no database column can hold (so every insert fails)."""
    tokens = 10**30 if scenario.key == "unstorable" else 7
    return Replay(answer=f"answer {scenario.key}", input_tokens=tokens, output_tokens=1)


def unstorable_catalog():
    text = ("name: unstorable\nscenarios:\n  - {key: unstorable, prompt: p}\n"
            "  - {key: fine, prompt: p, expect: {contains: ['answer fine']}}\n")
    return loads_catalog(text, source="unstorable.yaml")


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setenv("EVALJOBS_MAX_RETRIES", "1")
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.05")
    monkeypatch.setenv("EVALJOBS_MAX_BACKOFF", "0.1")
    return {"EVALJOBS_MAX_RETRIES": "1", "EVALJOBS_MIN_BACKOFF": "0.05", "EVALJOBS_MAX_BACKOFF": "0.1"}


@pytest.mark.parametrize("strategy", ["fanout", "sequential"])
def test_usage_out_of_range_is_a_provider_error_and_3e9_tokens_are_stored(
    strategy, db_url, simulated_provider
):
    simulated_provider(latency=0)
    with Session(db=db_url, broker="memory", width=2) as session:
        run = session.submit(loads_catalog(CATALOG, source="usage.yaml"), ["sim/a"], strategy=strategy)
        info = session.wait(run.id, timeout=60, poll=0.2)
        results = {r.scenario_key: r for r in session.results(run.id)}
    assert info.status == "partial" and info.persisted == 3, info
    absurd = results["absurd"]
    assert absurd.status == "errored" and absurd.error.startswith(
        "the provider reported 1e+30 tokens for one answer (more than 1e+12)"), absurd.error
    assert results["big"].status == "passed" and results["big"].input_tokens == 3_000_000_000
    assert results["ordinary"].status == "passed"


def test_usage_out_of_range_on_a_redis_worker_with_postgresql(
    redis_url, pg_url, simulated_provider, tmp_path
):
    simulated_provider(latency=0)  # exported to the worker's environment (EVALJOBS_SIM_URL)
    session = Session(db=pg_url, broker=redis_url)
    try:
        session.binding()
        run = store.create_run(loads_catalog(CATALOG, source="usage.yaml"), ["sim/a"], strategy="fanout")
        worker = WorkerProcess(redis_url, pg_url, threads=2, log=tmp_path / "w.log").start()
        try:
            session.binding().actors.start_run.send(run.id)
            info = session.wait(run.id, timeout=120, poll=0.5)
        finally:
            worker.terminate(15)
        results = {r.scenario_key: r for r in store.list_results(run.id)}
    finally:
        session.close()
    assert info.status == "partial" and info.persisted == 3, info
    assert results["absurd"].status == "errored" and "1e+30 tokens" in results["absurd"].error
    assert results["big"].status == "passed" and results["big"].input_tokens == 3_000_000_000


def test_an_older_postgresql_database_gets_64_bit_token_columns(pg_url):
    db = store.connect(pg_url)
    store.upgrade()  # what connect did (created the tables), reported once
    columns = ("duration_ms", "input_tokens", "output_tokens")
    for column in columns:  # as a database from before the change
        db.execute_sql(f'ALTER TABLE "result" ALTER COLUMN "{column}" TYPE INTEGER')
    assert store.upgrade() == [f"result.{column} is BIGINT" for column in columns]
    kinds = {c.name: c.data_type for c in db.get_columns("result")}
    assert [kinds[c] for c in columns] == ["bigint"] * 3
    assert store.upgrade() == []  # done once


def test_a_message_dramatiq_retries_out_records_its_pair_errored(db_url, quick_retries):
    with Session(db=db_url, broker="memory", width=2) as session:
        run = session.submit(
            unstorable_catalog(), ["sim/a"], adapter="test_every_pair_ends:unstorable_adapter"
        )
        info = session.wait(run.id, timeout=60, poll=0.2)
        results = {r.scenario_key: r for r in session.results(run.id)}
    assert info.status == "partial" and info.persisted == 2, info
    lost = results["unstorable"]
    assert lost.status == "errored" and lost.attempts == 2, lost
    assert lost.error.startswith("Dramatiq gave up on the pair's message after 2 deliveries: "), lost.error
    assert "Error" in lost.error and "\n" not in lost.error, lost.error
    assert results["fine"].status == "passed"


def test_a_batch_dramatiq_retries_out_records_its_missing_pairs_errored(
    sqlite_url, quick_retries, monkeypatch
):
    monkeypatch.setenv("EVALJOBS_PAIRS_PER_MESSAGE", "2")
    with Session(db=sqlite_url, broker="memory", width=1) as session:
        run = session.submit(
            unstorable_catalog(), ["sim/a"], adapter="test_every_pair_ends:unstorable_adapter"
        )
        info = session.wait(run.id, timeout=60, poll=0.2)
        results = {r.scenario_key: r for r in session.results(run.id)}
    assert info.persisted == 2 and info.report is not None, info
    # The group commit failed as a whole, so both pairs of the batch end with the cause.
    assert all(r.status == "errored" and r.error.startswith("Dramatiq gave up") for r in results.values()), (
        results
    )


def test_a_message_retried_out_on_a_redis_worker_records_its_pair_errored(
    redis_url, sqlite_url, quick_retries, tmp_path
):
    session = Session(db=sqlite_url, broker=redis_url)
    try:
        session.binding()
        run = store.create_run(unstorable_catalog(), ["sim/a"], strategy="fanout",
                               options={"adapter": "test_every_pair_ends:unstorable_adapter"})
        worker = WorkerProcess(
            redis_url, sqlite_url, threads=2, env=quick_retries, log=tmp_path / "w.log"
        ).start()
        try:
            session.binding().actors.start_run.send(run.id)
            info = session.wait(run.id, timeout=120, poll=0.5)
        finally:
            worker.terminate(15)
        results = {r.scenario_key: r for r in store.list_results(run.id)}
    finally:
        session.close()
    assert info.status == "partial" and info.persisted == 2, info
    assert results["unstorable"].error.startswith(
        "Dramatiq gave up on the pair's message after 2 deliveries: "
    )
    assert results["fine"].status == "passed"
