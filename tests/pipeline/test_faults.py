"""Fault injection against the real parts: redis-server, PostgreSQL, SQLite and `evaljobs worker` processes.

Every test injects one fault into a live run and ends with the same check
(:func:`helpers.fleet.assert_every_pair_once`): every expected pair exactly once, exactly
one report (one ``complete`` event, seen through Redis pub/sub), nothing
silently dropped. Each also prints one ``RELIABILITY`` line with what it
observed; RELIABILITY.md tabulates them (``pytest tests/pipeline/test_faults.py -s | grep RELIABILITY``).

Workers SIGKILLed once a second are ``test_worker_kills.py``: a module of its own, so that its two
runs (Redis, RabbitMQ) and these go to different xdist workers at once (BENCHMARKS.md, "The suite's wall
clock, session 13"), with their soak variant (``--soak``). The fleet, the
events counter and the end-of-test checks live in ``tests/helpers/fleet.py``.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from evaljobs.pipeline import actors
from evaljobs_middleware import crashes
from evaljobs import store
from evaljobs.config import Settings
from evaljobs.errors import ConfigurationError
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.replay import Replay
from helpers import (
    FAST,
    Events,
    Fleet,
    RedisServer,
    WorkerProcess,
    assert_all_passed,
    assert_every_pair_once,
    evaljobs_cli,
    fleet_run,
    graceful_stop,
    numbered_catalog,
    observe,
    redis_queue_state,
    wait_until,
)

pytestmark = [pytest.mark.redis]


#: A provider per test (the ``sim`` fixture in tests/conftest.py), which worker processes reach through
#: EVALJOBS_SIM_URL.
SIM_OPTIONS = dict(latency=0.2, jitter=0.05)
SIM_PER_TEST = True


# -- graceful shutdown ----------------------------------------------------------------------------------


@pytest.mark.parametrize("group", [False, True], ids=["main-process", "process-group"])
def test_sigterm_mid_run_finishes_what_it_started_and_loses_nothing(redis_url, sqlite_url, tmp_path,
                                                                    simulated_provider, group):
    catalog, models = numbered_catalog(60, "sigterm"), ["sim/a"]
    log = tmp_path / "stopped.log"
    # Slow calls, so that a second after SIGTERM (Dramatiq checks its stop flag once a second) the
    # worker is still in the middle of the run, with calls in flight.
    simulated_provider(latency=0.5)
    with Session(db=sqlite_url, broker=redis_url) as session:
        session.binding()
        run = store.create_run(catalog, models, strategy="fanout")
        seen = Events(redis_url, run.id)
        first = WorkerProcess(redis_url, sqlite_url, threads=8, env=FAST, log=log).start()
        second = WorkerProcess(redis_url, sqlite_url, threads=8, env=FAST, log=tmp_path / "second.log")
        try:
            session.binding().actors.start_run.send(run.id)
            assert wait_until(lambda: store.get_run(run.id).persisted >= 8, 90), log.read_text()[-2000:]
            code = graceful_stop(first, 30, group=group)
            at_stop = store.get_run(run.id).persisted
            text = log.read_text(errors="replace")
            assert code == 0, text[-3000:]
            assert "Worker has been shut down" in text and "Killing worker process" not in text, text[-3000:]
            # Graceful: what it had started is finished and acked, what it had only fetched is handed
            # back to Redis; nothing is left waiting for a heartbeat to time out.
            assert redis_queue_state(redis_url)["unacked"] == 0
            assert at_stop < len(catalog.scenarios), "the worker finished the run before it was stopped"
            second.start()
            info = session.wait(run.id, timeout=90, poll=0.5)
        finally:
            first.kill()
            graceful_stop(second, 20)
        observed = assert_every_pair_once(run.id, catalog, models, seen, log=text)
        seen.close()
    assert info.status == "complete"
    observe(f"sigterm-{'group' if group else 'main'}", persisted_at_stop=at_stop, **observed)


# -- Redis restarted mid-run ----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["restart", "crash"])
def test_redis_restarted_mid_run_completes_after_evaljobs_recover(sqlite_url, sim, tmp_path, how):
    """``restart``: SIGTERM (Redis writes its append-only file) and start; ``crash``: SIGKILL and start,
    losing what was written since the last fsync (up to a second of enqueues and acks)."""
    catalog, models = numbered_catalog(40, f"redis-{how}"), ["sim/a", "sim/b"]
    with RedisServer(appendonly=True) as redis_server:  # persistence on: queues survive a clean restart
        url = redis_server.url
        fleet = Fleet(url, sqlite_url, tmp_path / "logs", count=2, threads=4)
        recovered: list[str] = []
        with fleet_run(fleet, catalog, models, db=sqlite_url, broker=url) as run:
            assert wait_until(lambda: store.get_run(run.id).persisted >= 16, 90), fleet.log_text()
            if how == "crash":
                redis_server.kill()
            else:
                redis_server.stop()
            at_restart = store.get_run(run.id).persisted
            time.sleep(2.0)  # workers finish provider calls, then fail to ack, enqueue and publish
            redis_server.start()
            # The runbook after a Redis incident: `evaljobs recover` re-sends what the queues lost
            # (an enqueue, a retry or a finalize attempted while Redis was down) and leaves alone
            # the pairs still queued. Run again if the run still stalls.
            deadline = time.monotonic() + 120
            while True:
                out = evaljobs_cli("recover", "--db", sqlite_url, "--broker", url)
                assert out.returncode == 0, out.stderr
                recovered += [line for line in out.stdout.splitlines() if line != "nothing to recover"]
                if wait_until(lambda: store.get_run(run.id).report is not None, 10):
                    break
                assert time.monotonic() < deadline, fleet.log_text()
    assert_all_passed(run.id)
    observe(f"redis-{how}", persisted_at_restart=at_restart, recover_actions=len(recovered),
            subscriber_reconnects=run.seen.reconnects, **run.observed)


# -- PostgreSQL restarted mid-run -----------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_restarted_mid_run_workers_reconnect_and_retry_persistence(
    redis_url, postgres_server, pg_url, sim, tmp_path
):
    catalog, models = numbered_catalog(50, "pg-restart"), ["sim/a", "sim/b"]
    fleet = Fleet(redis_url, pg_url, tmp_path / "logs", count=2, threads=4)
    with fleet_run(fleet, catalog, models, db=pg_url, broker=redis_url) as run:
        assert wait_until(lambda: store.get_run(run.id).persisted >= 20, 90), fleet.log_text()
        postgres_server.stop()  # fast shutdown: every connection is cut, in-flight transactions roll back
        at_stop = time.monotonic()
        time.sleep(3.0)         # longer than a message's retries: workers must wait for it, not give up
        postgres_server.start()
        down = time.monotonic() - at_stop
        info = run.session.wait(run.id, timeout=120, poll=0.5)
    log = fleet.log_text()
    results = assert_all_passed(run.id)
    assert info.status == "complete"
    assert run.seen.results == len(results)  # one `result` event per inserted row: nothing recorded twice
    # Persistence was retried in place: no message failed, so no pair went back to the provider.
    assert "Failed to process message" not in log, log[-3000:]
    assert sim.stats()["requests"] == len(results)
    observe("postgres-restart", seconds_down=f"{down:.1f}", provider_calls=sim.stats()["requests"],
            **run.observed)


# -- SQLite under contention ----------------------------------------------------------------------------


def test_sqlite_many_writer_threads_and_two_worker_processes_never_locked(redis_url, sqlite_url, tmp_path,
                                                                           simulated_provider):
    catalog, models = numbered_catalog(60, "contended"), ["sim/a", "sim/b"]
    simulated_provider(latency=0.005)  # fast provider: the database is the bottleneck
    fleet = Fleet(redis_url, sqlite_url, tmp_path / "logs", count=2, threads=8)
    errors: list[BaseException] = []
    writes = [0]
    with fleet_run(fleet, catalog, models, db=sqlite_url, broker=redis_url) as run:
        # A second run written by 16 threads of this process while the workers write the first.
        other = store.create_run(numbered_catalog(400, "hammer"), ["sim/x"], strategy="fanout")

        def hammer(offset: int) -> None:
            from evaljobs.evaluation.result import Result

            try:
                for i in range(offset, 400, 16):
                    store.record_result(other.id, Result(f"s{i:04d}", "sim/x", "passed", score=1.0))
                    store.progress(run.id)
                    store.is_recorded(run.id, "s0000", "sim/a")
                    writes[0] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=hammer, args=(n,)) for n in range(16)]
        assert wait_until(lambda: store.get_run(run.id).persisted >= 1, 90), fleet.log_text()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        info = run.session.wait(run.id, timeout=120, poll=0.5)
    assert not errors, errors[:3]
    assert store.get_run(other.id).persisted == 400 and writes[0] == 400
    results = assert_all_passed(run.id)
    assert not [r.error for r in results if r.error and "locked" in r.error.lower()]
    logs = "".join(path.read_text(errors="replace") for path in (tmp_path / "logs").glob("*.log"))
    assert "database is locked" not in logs
    assert info.status == "complete"
    observe(
        "sqlite-contention", writer_threads=16, worker_processes=2, foreign_writes=writes[0], **run.observed
    )


# -- a poison message -----------------------------------------------------------------------------------


def crashing_adapter(scenario, model):
    """A host adapter whose 'poison' scenario kills the worker process evaluating it, every time."""
    if scenario.key == "poison":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
    return Replay(answer=f"answer {scenario.key}")


def test_poison_pair_that_kills_its_worker_is_errored_after_a_bounded_number_of_crashes(
        broker_url, sqlite_url, tmp_path):
    """On Redis and on RabbitMQ (which redelivers a dead worker's messages at once: only the crash
    count, in the state Redis, stops the poison pair)."""
    lines = ["name: poisoned", "scenarios:", "  - {key: poison, prompt: 'kill the worker'}"]
    lines += [f"  - {{key: ok{i:02d}, prompt: 'fine {i}', expect: {{contains: ['answer ok{i:02d}']}}}}"
              for i in range(12)]
    catalog, models = loads_catalog("\n".join(lines) + "\n", source="poisoned.yaml"), ["sim/a"]
    fleet = Fleet(broker_url, sqlite_url, tmp_path / "logs", count=1, threads=4)
    with fleet_run(fleet, catalog, models, db=sqlite_url, broker=broker_url,
                   options={"adapter": "test_faults:crashing_adapter"}) as run:
        deadline = time.monotonic() + 150
        while store.get_run(run.id).report is None and time.monotonic() < deadline:
            fleet.revive()  # what supervisord's autorestart does
            time.sleep(0.2)
    results = {r.scenario_key: r for r in store.list_results(run.id)}
    poisoned = results.pop("poison")
    assert poisoned.status == "errored"
    assert poisoned.error.startswith(f"crashed its worker {crashes.DEFAULT_MAX_CRASHES} times"), (
        poisoned.error
    )
    # Bounded: exactly max_crashes() worker processes died, then the pair was recorded without running.
    assert fleet.restarts == crashes.DEFAULT_MAX_CRASHES
    # The pairs that shared a crash with it got their last chance alone, and passed.
    assert all(r.status == "passed" for r in results.values()), {k: r.error for k, r in results.items()
                                                                  if r.status != "passed"}
    assert store.get_run(run.id).status == "partial"
    observe("poison-message", crashed_workers=fleet.restarts, **run.observed)


# -- the mechanisms behind the fixes, in isolation -------------------------------------------------------


def test_crash_counts_are_starts_without_an_end(redis_url, monkeypatch):
    import redis as redis_lib

    client = redis_lib.Redis.from_url(redis_url)
    try:
        key = actors.crash_key("r_1")
        a, b = '["a","m"]', '["b","m"]'
        assert crashes.begin_attempt(client, key, a) == 0
        crashes.end_attempt(client, key, a)           # returned or raised: not a crash
        assert crashes.crashes(client, key, a) == 0
        assert crashes.begin_attempt(client, key, a) == 0  # ...then the process died
        assert crashes.begin_attempt(client, key, a) == 1  # the next delivery sees it
        assert crashes.crashes(client, key, b) == 0        # per pair
        assert 0 < client.ttl(key) <= crashes.DEFAULT_TTL
        crashes.forget(client, key)
        assert crashes.crashes(client, key, a) == 0
    finally:
        client.close()
    monkeypatch.setenv("EVALJOBS_MAX_CRASHES", "5")
    assert actors.max_crashes(Settings.from_env()) == 5
    for bad in ("0", "many"):
        monkeypatch.setenv("EVALJOBS_MAX_CRASHES", bad)
        with pytest.raises(ConfigurationError, match="EVALJOBS_MAX_CRASHES"):
            actors.max_crashes(Settings.from_env())


def test_a_last_chance_evaluation_runs_alone_in_its_process():
    solo = crashes.Solo()
    events_seen: list[str] = []
    shared_running = threading.Event()
    release_shared = threading.Event()

    def ordinary() -> None:
        with solo.shared():
            events_seen.append("shared start")
            shared_running.set()
            release_shared.wait(5)
            events_seen.append("shared end")

    def suspect() -> None:
        with solo.alone():
            events_seen.append("alone")

    first = threading.Thread(target=ordinary)
    first.start()
    assert shared_running.wait(5)
    lone = threading.Thread(target=suspect)
    lone.start()
    assert wait_until(lambda: solo._waiting == 1, 30, 0.001)  # the suspect waits (not: 0.1 s have passed)
    late = threading.Thread(target=ordinary)  # arrives while the suspect waits: held back
    late.start()
    time.sleep(0.1)  # the late thread's chance to jump the queue (a wrong lock would take it)
    assert events_seen == ["shared start"]
    release_shared.set()
    for thread in (first, lone, late):
        thread.join(5)
    assert events_seen == ["shared start", "shared end", "alone", "shared start", "shared end"]


def test_a_repeated_sigterm_within_the_window_is_the_same_stop_request():
    from evaljobs.workers import graceful

    calls: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        assert graceful.tolerate_group_sigterm(window=0.5)
        assert not graceful.tolerate_group_sigterm(window=0.5)  # installed once
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # the forwarded copy of the group signal
        time.sleep(0.05)
        assert calls == [signal.SIGTERM]
        time.sleep(0.6)
        os.kill(os.getpid(), signal.SIGTERM)  # a deliberate second request still goes through
        time.sleep(0.05)
        assert calls == [signal.SIGTERM, signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_store_calls_retry_through_a_lost_connection_but_not_other_errors(sqlite_url, monkeypatch):
    import peewee

    store.connect(sqlite_url, reconnect_seconds=2.0)
    failures = [peewee.OperationalError("database is locked")] * 2

    @store.reconnecting
    def flaky() -> str:
        with store.connection():
            if failures:
                raise failures.pop()
        return "done"

    assert flaky() == "done" and not failures

    calls = []

    @store.reconnecting
    def broken() -> None:
        calls.append(1)
        with store.connection():
            raise peewee.OperationalError("no such table: nowhere")

    with pytest.raises(peewee.OperationalError, match="no such table"):
        broken()  # not an outage: at once, as it was
    assert len(calls) == 1  # not retried (counted, not timed)

    @store.reconnecting
    def locked_forever() -> None:
        with store.connection():
            raise peewee.OperationalError("database is locked")

    with pytest.raises(
        store.DatabaseUnavailable,
        match=r"lost database sqlite:.* for 2 s \(locked_forever\): "
        r"database is locked",
    ):
        locked_forever()


def test_a_database_never_reached_fails_at_once(tmp_path):
    started = time.monotonic()
    with pytest.raises(store.DatabaseUnavailable, match="cannot reach database"):
        store.connect(f"postgresql://postgres@127.0.0.1:{_closed_port()}/nowhere")
    assert time.monotonic() - started < 5


def _closed_port() -> int:
    from helpers import free_port

    return free_port()
