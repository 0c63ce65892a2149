"""A fleet of real ``evaljobs worker`` processes running one run, and the checks every fault test ends with.

The fault suites (test_faults, test_provider_faults, test_secrets, test_bad_input, …)
start workers, inject one fault into a live run and end with the same check
(:func:`assert_every_pair_once`): every expected pair exactly once, exactly one
report, one ``complete`` event seen through Redis pub/sub.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import Catalog
from evaljobs.config import state_redis
from evaljobs.pipeline import events
from helpers.workers import WorkerProcess, wait_until

#: The type of :meth:`Events.drain`'s marker event (the tests' own; evaljobs publishes none such).
BARRIER = "test-barrier"
#: Worker settings for every fault test: short backoffs so retries do not dominate the run time.
FAST = {"EVALJOBS_MIN_BACKOFF": "0.05", "EVALJOBS_MAX_BACKOFF": "0.3"}


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
        self._barriers: set[str] = set()
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
        event = json.loads(data)
        kind = event.get("type")
        if kind == "complete":
            self.completes += 1
        elif kind == "result":
            self.results += 1
        elif kind == BARRIER:
            self._barriers.add(event.get("token"))

    def drain(self, timeout: float = 30.0) -> None:
        """Return once every event published before this call has been counted: a marker published now
        on the run's channel comes to this subscriber after them (Redis delivers a channel's messages in
        the order it ran the PUBLISH commands). Published again while the subscriber reconnects."""
        import uuid

        import redis as redis_lib

        token = uuid.uuid4().hex
        client = redis_lib.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=5)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    client.publish(self.channel, json.dumps({"type": BARRIER, "token": token}))
                except (redis_lib.RedisError, OSError):
                    pass
                if wait_until(lambda: token in self._barriers, 1.0, interval=0.01):
                    return
                assert time.monotonic() < deadline, f"the subscriber to {self.channel} got no marker"
        finally:
            client.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(3)



class Fleet:
    """Worker processes supervised by the test: started, SIGKILLed, stopped gracefully, restarted.

    Each process logs to its own file in ``logs`` so the test can tell a booted worker
    (it logged "ready for action") from one still importing.
    """

    def __init__(self, broker_url: str, db_url: str, logs: Path, *, count: int = 1, threads: int = 4,
                 env: dict[str, str] | None = None, verbose: bool = False, prefix: list[str] | None = None):
        logs.mkdir(parents=True, exist_ok=True)
        self.logs = logs
        self._spawned = 0

        def make() -> WorkerProcess:
            self._spawned += 1
            return WorkerProcess(broker_url, db_url, threads=threads, env={**FAST, **(env or {})},
                                 log=logs / f"worker-{self._spawned:03d}.log", verbose=verbose, prefix=prefix)

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



def expected_pairs(catalog: Catalog, models: list[str], epochs: int = 1) -> set[tuple[str, str, int]]:
    return {(key, model, epoch) for key in catalog.keys for model in models for epoch in range(epochs)}


def assert_every_pair_once(run_id: str, catalog: Catalog, models: list[str], seen: Events, *,
                           log: str = "") -> dict:
    """The end of every fault test: each expected pair (each epoch of it) exactly once, one report, one
    `complete`."""
    info = store.get_run(run_id)
    assert info.report is not None, (f"run {run_id} is {info.status} with {info.persisted}/{info.expected}\n"
                                     f"{log[-3000:]}")
    results = store.list_results(run_id)
    pairs = [r.ident for r in results]
    expected = expected_pairs(catalog, models, info.epochs)
    duplicated = len(pairs) - len(set(pairs))
    assert duplicated == 0
    assert set(pairs) == expected, (f"missing {sorted(expected - set(pairs))[:5]}, "
                                    f"unexpected {sorted(set(pairs) - expected)[:5]}")
    assert info.persisted == len(expected) == info.expected
    assert info.report["summary"]["results"] == len(expected)
    assert wait_until(lambda: seen.completes >= 1, 10), "no `complete` event reached this process"
    seen.drain()  # the workers have stopped: a second `complete` they published has been counted now
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
              options: dict | None = None, epochs: int = 1) -> Iterator[FleetRun]:
    """A fanout run evaluated by ``fleet``; the ``with`` body injects the fault and waits.

    Before the body: the run is created, its events subscribed to, the fleet and the run started.
    After it: the fleet is stopped gracefully (always) and, if the body raised nothing, the run is
    checked with :func:`assert_every_pair_once` — the end of every fault test.
    """
    with Session(db=db, broker=broker) as session:
        session.binding()  # binds events to Redis before we subscribe
        run = store.create_run(catalog, models, strategy="fanout", options=options, epochs=epochs)
        # the broker's Redis, or the state Redis beside RabbitMQ (EVALJOBS_REDIS_URL)
        handle = FleetRun(run.id, session, Events(state_redis(broker) or broker, run.id))
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
    """Messages fetched but not acked (by any worker) and dead letters (the test may scan: it owns this
    Redis)."""
    import redis as redis_lib

    client = redis_lib.Redis.from_url(redis_url)
    try:
        unacked = sum(client.scard(k) for k in client.scan_iter("dramatiq:__acks__.*"))
        dead = sum(client.zcard(k) for k in client.scan_iter("dramatiq:*.XQ"))
        return {"unacked": unacked, "dead_letters": dead}
    finally:
        client.close()
