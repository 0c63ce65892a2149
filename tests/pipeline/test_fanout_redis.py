"""Fan-out against the real thing: redis-server (or rabbitmq-server, its state in Redis), PostgreSQL and
`evaljobs worker` processes."""
from __future__ import annotations

import threading

import pytest

from evaljobs.pipeline import events
from evaljobs import store
from evaljobs.api import Session
from helpers import WorkerProcess, numbered_catalog, wait_until

pytestmark = [pytest.mark.redis]


def catalog(n: int, name: str = "wide"):
    return numbered_catalog(n, name)


#: A provider per test (the ``sim`` fixture in tests/conftest.py), which worker processes reach through
#: EVALJOBS_SIM_URL.
SIM_OPTIONS = dict(latency=0.15)
SIM_PER_TEST = True


class CompleteCounter:
    """Counts `complete` events published by any process, through Redis pub/sub (the state Redis beside
    RabbitMQ)."""

    def __init__(self, run_id: str):
        self.subscription = events.Subscription(run_id)
        self.completes = 0
        self.results = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            event = self.subscription.get(0.2)
            if event and event.get("type") == "complete":
                self.completes += 1
            elif event and event.get("type") == "result":
                self.results += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.subscription.close()


def run_with_workers(broker_url, db_url, tmp_path, *, pairs_catalog, models, kill_after=None):
    session = Session(db=db_url, broker=broker_url)
    try:
        session.binding()  # binds events to Redis before we subscribe
        run = store.create_run(pairs_catalog, models, strategy="fanout")
        counter = CompleteCounter(run.id)
        log = tmp_path / "worker.log"
        first = WorkerProcess(broker_url, db_url, threads=4, log=log).start()
        second = None
        try:
            session.binding().actors.start_run.send(run.id)
            if kill_after is not None:
                assert wait_until(lambda: store.get_run(run.id).persisted >= kill_after, 60)
                first.kill()
                second = WorkerProcess(broker_url, db_url, threads=4, log=log).start()
            info = session.wait(run.id, timeout=120, poll=1.0)
        finally:
            first.terminate(15)
            if second:
                second.terminate(15)
        wait_until(lambda: counter.completes >= 1, 5)
        counter.close()
        return info, counter, log
    finally:
        session.close()


@pytest.mark.postgres
def test_forty_pairs_on_redis_and_postgres_with_worker_processes(broker_url, pg_url, sim, tmp_path):
    info, counter, log = run_with_workers(broker_url, pg_url, tmp_path, pairs_catalog=catalog(20),
                                          models=["sim/a", "sim/b"])
    assert info.status == "complete", log.read_text()[-3000:]
    assert info.persisted == 40 and len(store.list_results(info.id)) == 40
    assert info.report["summary"]["results"] == 40
    assert counter.completes == 1
    assert counter.results == 40  # live events reached this process through Redis


@pytest.mark.postgres
def test_kill_9_mid_run_still_gives_exactly_every_pair_and_one_report(broker_url, pg_url, sim, tmp_path):
    info, counter, log = run_with_workers(broker_url, pg_url, tmp_path, pairs_catalog=catalog(20, "killed"),
                                          models=["sim/a", "sim/b"], kill_after=8)
    assert info.status == "complete", log.read_text()[-3000:]
    results = store.list_results(info.id)
    assert len(results) == 40
    assert len({(r.scenario_key, r.model) for r in results}) == 40
    assert counter.completes == 1
    assert info.report["summary"]["results"] == 40


def lose_every_message(broker_url: str, request) -> None:
    """Every queued message gone: Redis flushed, or RabbitMQ's queues purged."""
    if broker_url.startswith("amqp"):
        from evaljobs.config import DEFAULT_QUEUE

        request.getfixturevalue("rabbitmq_server").purge_queues(DEFAULT_QUEUE)
        return
    import redis as redis_lib

    redis_lib.Redis.from_url(broker_url).flushall()


def test_redis_flushed_mid_run_is_recovered(broker_url, sqlite_url, sim, tmp_path, request):
    from evaljobs.pipeline.recovery import recover

    session = Session(db=sqlite_url, broker=broker_url)
    try:
        run = store.create_run(catalog(12, "flushed"), ["sim/a"], strategy="fanout")
        session.binding().actors.start_run.send(run.id)
        # No worker yet: start_run sits in the broker. Lose it: every message is gone.
        lose_every_message(broker_url, request)
        binding = session.binding()
        assert recover(binding, None)  # re-enqueued the lost pairs
        assert recover(binding, run.id) == []  # a healthy run: nothing to do
        with WorkerProcess(broker_url, sqlite_url, threads=4, log=tmp_path / "w.log"):
            info = session.wait(run.id, timeout=60, poll=0.5)
        assert info.status == "complete" and info.persisted == 12
    finally:
        session.close()


def test_worker_periodic_recovery_finishes_a_flushed_run(redis_url, sqlite_url, sim, tmp_path):
    import redis as redis_lib

    session = Session(db=sqlite_url, broker=redis_url)
    try:
        run = store.create_run(catalog(6, "periodic"), ["sim/a"], strategy="fanout")
        session.binding().actors.start_run.send(run.id)
        redis_lib.Redis.from_url(redis_url).flushall()  # the start message is gone
        with WorkerProcess(redis_url, sqlite_url, threads=2, log=tmp_path / "w.log",
                           env={"EVALJOBS_RECOVER_EVERY": "0.5"}):
            info = session.wait(run.id, timeout=60, poll=0.5)
        assert info.status == "complete" and info.persisted == 6
    finally:
        session.close()
