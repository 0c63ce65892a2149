"""Fault injection against the real parts: redis-server, PostgreSQL, SQLite and `evaljobs worker` processes.

Every test injects one fault into a live run and ends with the same check
(:func:`assert_every_pair_once`): every expected pair exactly once, exactly
one report (one ``complete`` event, seen through Redis pub/sub), nothing
silently dropped. Each also prints one ``RELIABILITY`` line with what it
observed; RELIABILITY.md tabulates them (``pytest tests/test_faults.py -s | grep RELIABILITY``).

The long soak variants are marked ``slow`` and run with ``--soak``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from evaljobs.pipeline import actors, events
from evaljobs_middleware import crashes
from evaljobs import store
from evaljobs.config import Settings
from evaljobs.errors import ConfigurationError
from evaljobs.api import Session
from evaljobs.catalog import Catalog, loads_catalog
from evaljobs.providers.simulated import SimulatedProvider
from evaljobs.evaluation.replay import Replay
from servers import RedisServer
from workers import ROOT, WorkerProcess, wait_until

pytestmark = [pytest.mark.redis]

#: Worker settings for every fault test: short backoffs so retries do not dominate the run time.
FAST = {"EVALJOBS_MIN_BACKOFF": "0.05", "EVALJOBS_MAX_BACKOFF": "0.3"}


# -- helpers shared by the fault suites (test_provider_faults and test_secrets import them) ---------------


def numbered_catalog(n: int, name: str, prompt: str = "[sim: say answer {i}]",
                     expect: str = "answer {i}") -> Catalog:
    lines = [f"name: {name}", "scenarios:"]
    for i in range(n):
        lines += [f"  - key: s{i:04d}", f"    prompt: {prompt.format(i=i)!r}",
                  f"    expect: {{contains: [{expect.format(i=i)!r}]}}"]
    return loads_catalog("\n".join(lines) + "\n", source=f"{name}.yaml")


@pytest.fixture
def sim(monkeypatch):
    """The simulated provider every worker started by the test talks to (through EVALJOBS_SIM_URL)."""
    with SimulatedProvider(latency=0.2, jitter=0.05) as provider:
        monkeypatch.setenv("EVALJOBS_SIM_URL", provider.url)
        yield provider


class Events:
    """Counts the run's events published by any process, straight off Redis pub/sub.

    Subscribes before returning and resubscribes after a connection loss (the Redis
    restart test), so a `complete` published after the outage is still counted.
    """

    def __init__(self, redis_url: str, run_id: str):
        self.url = redis_url
        self.channel = events.channel(run_id)
        self.completes = 0
        self.results = 0
        self.reconnects = 0
        self.raw: list[bytes] = []
        self._subscribed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        assert self._subscribed.wait(10), f"could not subscribe to {self.channel} on {redis_url}"

    def _loop(self) -> None:
        import redis as redis_lib

        while not self._stop.is_set():
            client = redis_lib.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)
            try:
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self.channel)
                self._subscribed.set()
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.2)
                    if message and message.get("type") == "message":
                        self._count(message["data"])
            except (redis_lib.RedisError, OSError):
                self.reconnects += 1
                time.sleep(0.2)
            finally:
                client.close()

    def _count(self, data: bytes) -> None:
        self.raw.append(data)
        kind = json.loads(data).get("type")
        if kind == "complete":
            self.completes += 1
        elif kind == "result":
            self.results += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(3)


class Fleet:
    """Worker processes supervised by the test: started, SIGKILLed, stopped gracefully, restarted.

    Each process logs to its own file in ``logs`` so the test can tell a booted worker
    (it logged "ready for action") from one still importing.
    """

    def __init__(self, broker_url: str, db_url: str, logs: Path, *, count: int = 1, threads: int = 4,
                 env: dict[str, str] | None = None, verbose: bool = False):
        logs.mkdir(parents=True, exist_ok=True)
        self.logs = logs
        self._spawned = 0

        def make() -> WorkerProcess:
            self._spawned += 1
            return WorkerProcess(broker_url, db_url, threads=threads, env={**FAST, **(env or {})},
                                 log=logs / f"worker-{self._spawned:03d}.log", verbose=verbose)

        self.make = make
        self.workers = [make() for _ in range(count)]
        self.kills = 0
        self.restarts = 0

    def start(self) -> "Fleet":
        for worker in self.workers:
            worker.start()
        return self

    @staticmethod
    def ready(worker: WorkerProcess) -> bool:
        try:
            return "ready for action" in worker.log.read_text(errors="replace")
        except OSError:
            return False

    @staticmethod
    def provider_calls(worker: WorkerProcess) -> int:
        """Provider calls the worker has made: with ``verbose``, each is a DEBUG line of its own."""
        try:
            return worker.log.read_text(errors="replace").count("provider call: POST")
        except OSError:
            return 0

    def kill_one_that_worked(self, calls: int) -> bool:
        """SIGKILL the oldest worker that has made at least ``calls`` provider calls (so it is mid-run,
        with messages in flight), and start a replacement. False when none has yet: killing a worker
        that is still booting (seconds, on a loaded machine) would test nothing."""
        for index, worker in enumerate(self.workers):
            if self.provider_calls(worker) >= calls:
                self.kill(index)
                self.restart(index)
                return True
        return False

    def kill(self, index: int) -> None:
        self.workers[index].kill()
        self.kills += 1

    def restart(self, index: int) -> None:
        # The replacement goes to the back, so "oldest first" stays true.
        self.workers.pop(index)
        self.workers.append(self.make().start())
        self.restarts += 1

    def revive(self) -> int:
        """Restart every worker whose process exited (what supervisord's autorestart does)."""
        dead = [w for w in self.workers if w.proc is not None and w.proc.poll() is not None]
        for worker in dead:
            self.restart(self.workers.index(worker))
        return len(dead)

    def stop(self) -> None:
        for worker in self.workers:
            graceful_stop(worker, 20)

    def log_text(self) -> str:
        return "".join(path.read_text(errors="replace")[-2000:] for path in sorted(self.logs.glob("*.log")))


def graceful_stop(worker: WorkerProcess, timeout: float, *, group: bool = False) -> int | None:
    """SIGTERM, as an operator or a supervisor sends it; SIGKILL if it has not exited after ``timeout``.

    ``group=False`` signals the main process only (``kill PID``, ``docker stop``), which forwards
    it once to its worker processes; ``group=True`` signals the whole process group at once
    (systemd's default ``KillMode=control-group``, supervisord's ``stopasgroup``).
    """
    if worker.proc is None or worker.proc.poll() is not None:
        return worker.proc.returncode if worker.proc else None
    if group:
        os.killpg(worker.proc.pid, signal.SIGTERM)
    else:
        worker.proc.send_signal(signal.SIGTERM)
    try:
        return worker.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        return None


def expected_pairs(catalog: Catalog, models: list[str]) -> set[tuple[str, str]]:
    return {(key, model) for key in catalog.keys for model in models}


def assert_every_pair_once(run_id: str, catalog: Catalog, models: list[str], seen: Events, *,
                           log: str = "") -> dict:
    """The end of every fault test: each expected pair exactly once, one report, one `complete`."""
    info = store.get_run(run_id)
    assert info.report is not None, (f"run {run_id} is {info.status} with {info.persisted}/{info.expected}\n"
                                     f"{log[-3000:]}")
    results = store.list_results(run_id)
    pairs = [(r.scenario_key, r.model) for r in results]
    expected = expected_pairs(catalog, models)
    duplicated = len(pairs) - len(set(pairs))
    assert duplicated == 0
    assert set(pairs) == expected, (f"missing {sorted(expected - set(pairs))[:5]}, "
                                    f"unexpected {sorted(set(pairs) - expected)[:5]}")
    assert info.persisted == len(expected) == info.expected
    assert info.report["summary"]["results"] == len(expected)
    assert wait_until(lambda: seen.completes >= 1, 10), "no `complete` event reached this process"
    time.sleep(0.5)  # a second `complete` would arrive within this
    assert seen.completes == 1
    return {"expected": len(expected), "persisted": len(pairs), "duplicated": duplicated,
            "reports": 1 if info.report else 0, "complete_events": seen.completes,
            "statuses": _tally(results)}


@dataclass
class FleetRun:
    """The run :func:`fleet_run` started: what the test's fault injection and final checks need."""

    id: str
    session: Session
    seen: Events
    #: What :func:`assert_every_pair_once` observed; filled in when the ``with`` block ends cleanly.
    observed: dict = field(default_factory=dict)


@contextmanager
def fleet_run(fleet: Fleet, catalog: Catalog, models: list[str], *, db: str, broker: str,
              options: dict | None = None) -> Iterator[FleetRun]:
    """A fanout run evaluated by ``fleet``; the ``with`` body injects the fault and waits.

    Before the body: the run is created, its events subscribed to, the fleet and the run started.
    After it: the fleet is stopped gracefully (always) and, if the body raised nothing, the run is
    checked with :func:`assert_every_pair_once` — the end of every fault test.
    """
    with Session(db=db, broker=broker) as session:
        session.binding()  # binds events to Redis before we subscribe
        run = store.create_run(catalog, models, strategy="fanout", options=options)
        handle = FleetRun(run.id, session, Events(broker, run.id))
        try:
            fleet.start()
            session.binding().actors.start_run.send(run.id)
            yield handle
        finally:
            fleet.stop()
        handle.observed = assert_every_pair_once(run.id, catalog, models, handle.seen, log=fleet.log_text())
        handle.seen.close()


def assert_all_passed(run_id: str) -> list:
    """The run's results, each of which passed: the fault was survived, not just recorded."""
    results = store.list_results(run_id)
    assert all(r.status == "passed" for r in results), [r.error for r in results if r.status != "passed"][:3]
    return results


def _tally(results) -> str:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    return "/".join(f"{k}={v}" for k, v in sorted(counts.items()))


def observe(fault: str, **numbers) -> None:
    """One line per fault test for RELIABILITY.md (shown with ``pytest -s``)."""
    print("RELIABILITY " + fault + " " + " ".join(f"{k}={v}" for k, v in numbers.items()))


def redis_queue_state(redis_url: str) -> dict[str, int]:
    """Messages fetched but not acked (by any worker) and dead letters (the test may scan: it owns this Redis)."""
    import redis as redis_lib

    client = redis_lib.Redis.from_url(redis_url)
    try:
        unacked = sum(client.scard(k) for k in client.scan_iter("dramatiq:__acks__.*"))
        dead = sum(client.zcard(k) for k in client.scan_iter("dramatiq:*.XQ"))
        return {"unacked": unacked, "dead_letters": dead}
    finally:
        client.close()


def evaljobs_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real command line, in a subprocess (as an operator would run it)."""
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "evaljobs", *args], env=full_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


# -- worker processes SIGKILLed repeatedly ---------------------------------------------------------------


@pytest.fixture
def short_leases(tmp_path, monkeypatch) -> Path:
    """A providers file giving the simulated provider 5-second governor leases.

    A SIGKILLed worker never releases its governor permits; they come back when their lease
    runs out (60 s by default). With a kill a second that would park most of the budget on
    dead workers for a minute; production sets ``lease_seconds`` to taste the same way.
    """
    path = tmp_path / "providers.yaml"
    path.write_text("providers:\n  sim:\n    governor: {lease_seconds: 5}\n")
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(path))
    return path


@pytest.mark.postgres
@pytest.mark.parametrize("scenarios, seconds", [(100, 150), pytest.param(1000, 1200, marks=pytest.mark.slow)],
                         ids=["200-pairs", "soak-2000-pairs"])
def test_workers_sigkilled_every_second_lose_and_double_nothing(redis_url, pg_url, sim, short_leases, tmp_path,
                                                                 scenarios, seconds):
    catalog, models = numbered_catalog(scenarios, "killed"), ["sim/a", "sim/b"]
    # Deliberate kills also count against the pairs in flight (see evaljobs.poison): far above what a
    # pair meets here, so the test shows that killed work is redone, never given up on.
    # verbose: each provider call is a log line, which is how the test tells a worker at work.
    fleet = Fleet(redis_url, pg_url, tmp_path / "logs", count=2, threads=4, env={"EVALJOBS_MAX_CRASHES": "25"},
                  verbose=True)
    with fleet_run(fleet, catalog, models, db=pg_url, broker=redis_url) as run:
        started = last_kill = time.monotonic()
        while store.get_run(run.id).report is None and time.monotonic() - started < seconds:
            time.sleep(0.2)
            # At most one kill a second, each of a worker in the middle of its work.
            if time.monotonic() - last_kill >= 1.0 and fleet.kill_one_that_worked(calls=10):
                last_kill = time.monotonic()
        elapsed = time.monotonic() - started
    assert_all_passed(run.id)
    assert fleet.kills >= 3, "the run finished before the workers were killed: nothing was tested"
    observe("sigkill-workers", kills=fleet.kills, seconds=f"{elapsed:.0f}", **run.observed)


# -- graceful shutdown ----------------------------------------------------------------------------------


@pytest.mark.parametrize("group", [False, True], ids=["main-process", "process-group"])
def test_sigterm_mid_run_finishes_what_it_started_and_loses_nothing(redis_url, sqlite_url, tmp_path, monkeypatch,
                                                                    group):
    catalog, models = numbered_catalog(60, "sigterm"), ["sim/a"]
    log = tmp_path / "stopped.log"
    # Slow calls, so that a second after SIGTERM (Dramatiq checks its stop flag once a second) the
    # worker is still in the middle of the run, with calls in flight.
    with SimulatedProvider(latency=0.5) as slow_sim, Session(db=sqlite_url, broker=redis_url) as session:
        monkeypatch.setenv("EVALJOBS_SIM_URL", slow_sim.url)
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
def test_postgres_restarted_mid_run_workers_reconnect_and_retry_persistence(redis_url, postgres_server, pg_url,
                                                                            sim, tmp_path):
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
                                                                           monkeypatch):
    catalog, models = numbered_catalog(60, "contended"), ["sim/a", "sim/b"]
    with SimulatedProvider(latency=0.005) as fast_sim:  # fast provider: the database is the bottleneck
        monkeypatch.setenv("EVALJOBS_SIM_URL", fast_sim.url)
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
    observe("sqlite-contention", writer_threads=16, worker_processes=2, foreign_writes=writes[0], **run.observed)


# -- a poison message -----------------------------------------------------------------------------------


def crashing_adapter(scenario, model):
    """A host adapter whose 'poison' scenario kills the worker process evaluating it, every time."""
    if scenario.key == "poison":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
    return Replay(answer=f"answer {scenario.key}")


def test_poison_pair_that_kills_its_worker_is_errored_after_a_bounded_number_of_crashes(redis_url, sqlite_url,
                                                                                         tmp_path):
    lines = ["name: poisoned", "scenarios:", "  - {key: poison, prompt: 'kill the worker'}"]
    lines += [f"  - {{key: ok{i:02d}, prompt: 'fine {i}', expect: {{contains: ['answer ok{i:02d}']}}}}"
              for i in range(12)]
    catalog, models = loads_catalog("\n".join(lines) + "\n", source="poisoned.yaml"), ["sim/a"]
    fleet = Fleet(redis_url, sqlite_url, tmp_path / "logs", count=1, threads=4)
    with fleet_run(fleet, catalog, models, db=sqlite_url, broker=redis_url,
                   options={"adapter": "test_faults:crashing_adapter"}) as run:
        deadline = time.monotonic() + 150
        while store.get_run(run.id).report is None and time.monotonic() < deadline:
            fleet.revive()  # what supervisord's autorestart does
            time.sleep(0.2)
    results = {r.scenario_key: r for r in store.list_results(run.id)}
    poisoned = results.pop("poison")
    assert poisoned.status == "errored"
    assert poisoned.error.startswith(f"crashed its worker {crashes.DEFAULT_MAX_CRASHES} times"), poisoned.error
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
    time.sleep(0.1)
    late = threading.Thread(target=ordinary)  # arrives while the suspect waits: held back
    late.start()
    time.sleep(0.1)
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

    @store._reconnecting
    def flaky() -> str:
        with store._connection():
            if failures:
                raise failures.pop()
        return "done"

    assert flaky() == "done" and not failures

    @store._reconnecting
    def broken() -> None:
        with store._connection():
            raise peewee.OperationalError("no such table: nowhere")

    started = time.monotonic()
    with pytest.raises(peewee.OperationalError, match="no such table"):
        broken()  # not an outage: at once, as it was
    assert time.monotonic() - started < 1.0

    @store._reconnecting
    def locked_forever() -> None:
        with store._connection():
            raise peewee.OperationalError("database is locked")

    with pytest.raises(store.DatabaseUnavailable, match=r"lost database sqlite:.* for 2 s \(locked_forever\): "
                                                         r"database is locked"):
        locked_forever()


def test_a_database_never_reached_fails_at_once(tmp_path):
    started = time.monotonic()
    with pytest.raises(store.DatabaseUnavailable, match="cannot reach database"):
        store.connect(f"postgresql://postgres@127.0.0.1:{_closed_port()}/nowhere")
    assert time.monotonic() - started < 5


def _closed_port() -> int:
    from servers import free_port

    return free_port()
