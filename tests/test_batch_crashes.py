"""Batch runs survive kill -9 without paying twice: real redis-server, `evaljobs worker` processes,
SQLite and PostgreSQL.

Each test kills every worker process (SIGKILL to its process group) at one moment of a batch's
life, starts a new worker, runs recovery, and checks at the simulated provider — not in our own
bookkeeping — that each request was submitted exactly once, and that the run has every pair once
and one report:

(a) before a batch is created (the pairs' requests are parked, the collector waits),
(b) between the provider's create and the commit of the batch id (the provider holds its answer),
(c) while the batch is open and polled.

Every moment is reached by a condition the test reads (the database, the provider's counters),
never by a sleep.
"""
from __future__ import annotations

import pytest
from helpers import WorkerProcess, numbered_catalog, wait_until

from evaljobs import store
from evaljobs.api import Session
from evaljobs.store import batches as stored

pytestmark = [pytest.mark.redis]

PAIRS = 6
#: The run's requests go as one batch, the moment the last is parked (never a second, smaller one).
ONE_BATCH = {"EVALJOBS_BATCH_SIZE": str(PAIRS), "EVALJOBS_BATCH_WAIT": "3600"}


def _worker(redis_url, db_url, tmp_path, **env) -> WorkerProcess:
    """A worker process (not started) that looks at open batches every 0.1 s."""
    settings = {"EVALJOBS_BATCH_POLL": "0.1", "EVALJOBS_BATCH_WAIT": "0.1", **env}
    return WorkerProcess(redis_url, db_url, threads=2, log=tmp_path / "worker.log", env=settings)


def _finish(session, run_id, sim, redis_url, db_url, tmp_path):
    """A new worker and `recover`; then the run's report and the provider's counts."""
    with _worker(redis_url, db_url, tmp_path):
        session.recover(run_id, wait=False)
        info = session.wait(run_id, timeout=120, poll=0.5)
    submitted = sim.stats()["batches"]["submitted"]
    return info, submitted


@pytest.fixture(autouse=True)
def _no_worker_left(monkeypatch):
    """Every worker process a test starts is killed at its end, whatever the test's outcome."""
    started: list[WorkerProcess] = []
    original = WorkerProcess.start

    def start(self):
        started.append(self)
        return original(self)

    monkeypatch.setattr(WorkerProcess, "start", start)
    yield
    for worker in started:
        worker.kill()


@pytest.fixture
def started(simulated_provider, redis_url, db_url, tmp_path, monkeypatch):
    def start(wire="openai", **sim_options):
        sim = simulated_provider(**sim_options)
        model = "sim/a"
        if wire == "anthropic":  # the simulated provider's Message Batches, through a providers file
            path = tmp_path / "providers.yaml"
            path.write_text(f"providers:\n  ant:\n    api: anthropic\n    base_url: {sim.url}\n"
                            f"    prices: {{'*': [3.0, 15.0]}}\n", encoding="utf-8")
            monkeypatch.setenv("EVALJOBS_PROVIDERS", str(path))  # this process and the workers it starts
            model = "ant/claude"
        session = Session(db=db_url, broker=redis_url)
        info = session.submit(numbered_catalog(PAIRS, "crashy"), [model], batch=True)
        return sim, session, info
    return start


def _assert_once(info, submitted, log):
    assert info.status == "complete", log.read_text()[-3000:]
    assert info.persisted == PAIRS and len({r.scenario_key for r in store.list_results(info.id)}) == PAIRS
    assert info.report["summary"]["results"] == PAIRS
    batch = info.report["summary"]["batch"]  # every pair at the batch price: half the listed one
    assert batch["pairs"] == PAIRS and batch["cost"] == pytest.approx(batch["interactive_cost"] / 2)
    assert len(submitted) == PAIRS and set(submitted.values()) == {1}, submitted


def test_a_kill_before_the_batch_is_created(started, redis_url, db_url, tmp_path):
    sim, session, info = started()
    try:
        # The collector waits an hour for more requests: the batch is not created before the kill.
        worker = _worker(redis_url, db_url, tmp_path, EVALJOBS_BATCH_WAIT="3600").start()
        assert wait_until(lambda: stored.request_count(info.id) == PAIRS, 60), (tmp_path / "worker.log").read_text()[-3000:]
        worker.kill()
        assert sim.stats()["batches"]["batches_created"] == 0
        info, submitted = _finish(session, info.id, sim, redis_url, db_url, tmp_path)
    finally:
        session.close()
    _assert_once(info, submitted, tmp_path / "worker.log")


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_kill_between_the_create_and_the_commit_of_its_id(started, redis_url, db_url, tmp_path, wire):
    """OpenAI's batch carries its key in its metadata; Anthropic's Message Batch is told by its results."""
    sim, session, info = started(wire)
    sim.batches.hold_creates = True  # the batch is created; the worker never hears its id
    try:
        worker = _worker(redis_url, db_url, tmp_path, **ONE_BATCH).start()
        assert wait_until(lambda: sim.stats()["batches"]["batches_created"] == 1, 60), \
            (tmp_path / "worker.log").read_text()[-3000:]
        worker.kill()
        sim.batches.hold_creates = False
        rows = stored.run_batches(info.id)
        assert [(b.state, b.provider_batch_id) for b in rows] == [(stored.SUBMITTING, None)]
        info, submitted = _finish(session, info.id, sim, redis_url, db_url, tmp_path)
    finally:
        sim.batches.hold_creates = False
        session.close()
    _assert_once(info, submitted, tmp_path / "worker.log")
    assert sim.stats()["batches"]["batches_created"] == 1  # found at the provider, not submitted again


def test_a_kill_while_the_batch_is_polled(started, redis_url, db_url, tmp_path):
    sim, session, info = started(batch_delay=3600)  # open until the test ends it
    try:
        worker = _worker(redis_url, db_url, tmp_path, **ONE_BATCH).start()
        assert wait_until(lambda: any(b.state == stored.OPEN for b in stored.run_batches(info.id)), 60), \
            (tmp_path / "worker.log").read_text()[-3000:]
        worker.kill()
        sim.batches.end_batches()
        info, submitted = _finish(session, info.id, sim, redis_url, db_url, tmp_path)
    finally:
        session.close()
    _assert_once(info, submitted, tmp_path / "worker.log")
    assert sim.stats()["batches"]["batches_created"] == 1
