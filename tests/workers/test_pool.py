"""Elastic worker pools: growth with the backlog, retirement when idle, nothing lost on retirement.

Synthetic load runs on the StubBroker with evaljobs' middleware and a sleeping
actor (concurrency measured inside the actor); the retire-loses-nothing test
runs a real evaluation on Redis while members are retired under it.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import dramatiq
import pytest
import redis as redis_lib

from evaljobs.pipeline import broker as evaljobs_broker
from evaljobs.pipeline import events
from evaljobs import store
from evaljobs.workers.pool import IDLE_POLL, PUBLISH_IDLE, STATE_KEY, Pool, read_pools, validate
from evaljobs.testing import ManualClock
from helpers import ROOT, plugin_broker, wait_until

NAP = 0.05


class Load:
    """A sleeping actor that records how many copies of it run at once, and which payloads ran.

    ``gate``: when the test closes it (``hold()``), every copy waits at its start until the test
    opens it again (``release()``), so "N copies run at once" is a condition the test brings about,
    not a race between sleeping jobs that a busy machine may never let overlap.
    """

    def __init__(self, broker: dramatiq.Broker, nap: float = NAP):
        self.nap = nap
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.done: collections.Counter = collections.Counter()
        self.actor = dramatiq.Actor(self._run, broker=broker, actor_name="nap", queue_name="agents",
                                    priority=0, options={"max_retries": 0})

    def _run(self, n: int) -> None:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        assert self.gate.wait(60), "the test never released the gate"
        time.sleep(self.nap)  # the work itself (a provider call's worth): a real thread really busy
        with self.lock:
            self.running -= 1
            self.done[n] += 1

    def send(self, count: int) -> None:
        for n in range(count):
            self.actor.send(n)

    def hold(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def wait_running(self, count: int) -> None:
        """Wait until ``count`` copies are held at the gate together (the pool must bring them about)."""
        assert wait_until(lambda: self.running == count, 30, 0.005), f"{self.running} running, not {count}"


@pytest.fixture
def memory(request):
    """The evaljobs.testing plugin's StubBroker and database, with no worker: the pool brings its own."""
    return plugin_broker(request, worker=False)


def join(binding, timeout: float = 10.0) -> None:
    """Wait for the queue to drain (a lost message would keep it from ever draining: fail, don't hang)."""
    binding.broker.join(binding.queue, fail_fast=False, timeout=int(timeout * 1000))


def worker_middleware_count(broker) -> int:
    return sum(1 for m in broker.middleware if type(m).__name__ == "_WorkerMiddleware")


# -- arguments -------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, fault", [
    ((0, 4, 1.0, "bulk"), "--min"),
    ((-1, 4, 1.0, "bulk"), "--min"),
    ((3, 2, 1.0, "bulk"), "--max"),
    ((1, 4, -0.5, "bulk"), "--idle-seconds"),
    ((1, 4, float("nan"), "bulk"), "--idle-seconds"),
    ((1, 4, 1.0, "fast"), "--lane"),
    ((1.5, 4, 1.0, "bulk"), "--min"),
])
def test_invalid_arguments_raise_one_line_value_errors(args, fault):
    with pytest.raises(ValueError) as caught:
        Pool(*args)  # validated before any broker is touched
    message = str(caught.value)
    assert fault in message and "\n" not in message
    validate(1, 1, 0, "interactive")  # the smallest valid pool


@pytest.mark.parametrize("argv, fault", [
    (["--min", "0"], "--min"),
    (["--min", "4", "--max", "2"], "--max"),
    (["--idle-seconds", "-1"], "--idle-seconds"),
    (["--lane", "urgent"], "--lane"),
    (["--min", "two"], "--min"),
    (["--broker", "memory"], "redis://"),
])
def test_cli_gives_one_line_error_and_exit_2(cli, argv, fault):
    broker = [] if "--broker" in argv else ["--broker", "redis://x:1/0"]
    result = cli("pool", *argv, *broker)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fault in lines[0], result.output


# -- synthetic load on the in-process broker --------------------------------------------------------

def test_eighteen_messages_reach_six_members_running_at_once(memory):
    """Six held messages run at once on six members (how much faster that is: scripts/bench_pool)."""
    load = Load(memory.broker)
    pool = Pool(min=1, max=6, idle_seconds=30, broker=memory.broker).start()
    try:
        assert pool.size == 1
        load.hold()
        load.send(18)
        load.wait_running(6)
        load.release()
        join(memory)
        state = pool.state()
    finally:
        load.release()
        pool.stop()
    assert load.peak == 6 and state["peak_members"] == 6 and state["peak_running"] == 6
    assert sum(load.done.values()) == 18 and state["started"] == 18
    assert worker_middleware_count(memory.broker) == 0  # every member's hooks left the broker


class TickingPool(Pool):
    """A pool that counts its controller's finished ticks (so a test can wait for one to pass)."""

    ticks = 0

    def _tick(self) -> None:
        super()._tick()
        self.ticks += 1

    def wait_for_a_tick(self) -> None:
        """Wait until a whole tick has run after this call (it read the clock as it is now)."""
        seen = self.ticks
        assert wait_until(lambda: self.ticks >= seen + 2, 5, 0.005), "the pool's controller stopped ticking"


def test_pool_grows_to_max_under_load_and_shrinks_back_to_exactly_min(memory):
    """Idle time is measured on the pool's clock: members retire once idle for ``idle_seconds``,
    not a moment before, and never below ``min`` however long the pool stays idle."""
    clock = ManualClock()
    load = Load(memory.broker)
    pool = TickingPool(min=2, max=5, idle_seconds=30, broker=memory.broker, poll=0.01, clock=clock).start()
    try:
        assert pool.size == 2
        load.hold()
        load.send(20)
        load.wait_running(5)
        load.release()
        join(memory)
        assert wait_until(lambda: pool.state()["running"] == 0, 2, 0.005)
        clock.advance(29.9)  # the last message ended at the clock's start: idle 29.9 s of 30
        pool.wait_for_a_tick()
        assert pool.size == 5 and pool.state()["retired"] == 0
        clock.advance(0.1)
        assert wait_until(lambda: pool.size == 2 and pool.state()["retiring"] == 0, 3, 0.01)
        clock.advance(365 * 86400.0)  # idle for a year: never below min
        pool.wait_for_a_tick()
        state = pool.state()
    finally:
        pool.stop()
    assert state["members"] == 2 and state["busy"] == 0 and state["peak_members"] == 5
    assert load.peak == 5 and state["retired"] == 3
    assert sum(load.done.values()) == 20


def test_pool_grows_again_when_a_second_burst_lands(memory):
    load = Load(memory.broker, nap=0.02)
    pool = Pool(min=1, max=4, idle_seconds=0, broker=memory.broker, poll=0.01).start()
    try:
        for _ in range(3):
            load.hold()
            load.send(12)
            # The pool has grown to max for this burst (the held messages keep the backlog). With
            # idle_seconds=0 a member retired as the burst lands may still run the one message its thread
            # had taken: it counts toward max until it has exited, so never more than 4 copies run at once.
            assert wait_until(lambda: at_max(pool), 30, 0.005), pool.state()
            load.release()
            join(memory)
            # idle_seconds=0: the next tick retires them; gone (not leaving) before the next burst lands
            assert wait_until(lambda: pool.size == 1 and pool.state()["retiring"] == 0, 30, 0.01)
        state = pool.state()
    finally:
        pool.stop()
    assert state["grown"] >= 1 + 3 * 3 and state["peak_members"] == 4 and load.peak <= 4
    assert sum(load.done.values()) == 36 and all(n == 3 for n in load.done.values())


def at_max(pool: Pool) -> bool:
    """The pool holds --max members, counting those still leaving (they may finish a message)."""
    state = pool.state()
    return state["members"] + state["retiring"] == pool.max


def test_an_unpooled_worker_never_runs_more_than_its_fixed_width(memory):
    load = Load(memory.broker, nap=0.02)
    worker = dramatiq.Worker(memory.broker, worker_threads=3, worker_timeout=20)
    worker.start()
    try:
        load.hold()
        load.send(30)
        load.wait_running(3)
        load.release()
        join(memory)
    finally:
        load.release()
        worker.stop()
    assert load.peak == 3  # saturated, and never wider however long the queue
    assert sum(load.done.values()) == 30


def test_retiring_busy_members_mid_load_loses_and_repeats_nothing(memory):
    """Five members are retired while each holds a message (held at the gate), then the load runs out."""
    load = Load(memory.broker, nap=0.01)
    pool = Pool(min=1, max=6, idle_seconds=30, broker=memory.broker, poll=0.01).start()
    retired = []
    try:
        load.hold()
        load.send(120)
        for _ in range(5):
            assert wait_until(lambda: any(m.in_message for m in list(pool._members)), 30, 0.005), \
                "no member ever took a message"
            member = next(m for m in list(pool._members) if m.in_message)
            pool._retire(member)  # busy: it is running a message held at the gate
            retired.append(member)
        load.release()
        join(memory)
    finally:
        load.release()
        pool.stop()
    assert len(retired) == 5 and len(set(map(id, retired))) == 5
    assert set(load.done) == set(range(120)) and set(load.done.values()) == {1}


def test_a_leaving_member_counts_toward_max_until_it_has_exited(memory):
    """``--idle-seconds 0``: a member chosen as idle may take a message before its stop lands, and it
    finishes that message while it leaves. Until it has exited it counts toward ``--max``: the pool
    starts no member in its place, so no more than ``--max`` messages run at once (it ran max + 1).
    The controller is driven by hand (its poll never comes), each step waiting on the gate's condition.
    """
    load = Load(memory.broker, nap=0.0)
    pool = Pool(min=1, max=2, idle_seconds=0, broker=memory.broker, poll=3600).start()
    try:
        load.hold()
        load.send(3)
        load.wait_running(1)  # the one member holds message 0; two wait in the queue
        pool._resize(pool._backlog(), pool.clock())
        load.wait_running(2)  # grown to --max: both members held at the gate
        leaving = pool._members[0]
        pool._retire(leaving)  # it leaves with the message it had taken (held: it cannot exit yet)
        pool._resize(pool._backlog(), pool.clock())  # one message waits, one member runs: room for one?
        during = pool.state()
        load.release()
        join(memory)
    finally:
        load.release()
        pool.stop()
    assert during["retiring"] == 1, during
    assert during["members"] + during["retiring"] <= 2, during  # it started a third member here
    assert load.peak <= 2 and set(load.done) == {0, 1, 2} and set(load.done.values()) == {1}


def test_state_counts_members_busy_and_started(memory):
    load = Load(memory.broker)
    pool = Pool(min=1, max=3, idle_seconds=30, lane="interactive", broker=memory.broker).start()
    try:
        load.hold()  # three messages held together: "running 3" is brought about, not raced for
        load.send(3)
        load.wait_running(3)
        busy = pool.state()
        load.release()
        join(memory)
    finally:
        load.release()
        pool.stop()
    assert busy["members"] == 3 and busy["lane"] == "interactive" and busy["min"] == 1 and busy["max"] == 3
    assert busy["queues"] == ["agents"] and busy["started"] == 3 and busy["running"] == 3


# -- Redis: a real run while members retire ------------------------------------------------------------

def wide_catalog(n: int):
    from evaljobs.catalog import loads_catalog

    lines = ["name: pooled", "scenarios:"]
    for i in range(n):
        lines += [f"  - key: s{i:03d}", f'    prompt: "[sim: say answer {i}]"',
                  f"    expect: {{contains: ['answer {i}']}}"]
    return loads_catalog("\n".join(lines) + "\n", source="pooled.yaml")


class RetiringPool(Pool):
    """Retires each of the first twelve members that start a message, while it runs it (busy by
    construction): the chaos comes from the messages themselves, however fast or slow the machine is."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.forced: list = []

    def _message_started(self) -> None:
        super()._message_started()
        with self._lock:
            member = self._member_for_thread() if len(self.forced) < 12 else None
            if member is None or member not in self._members:
                return
            self.forced.append(member)
        self._retire(member)


@pytest.mark.redis
def test_retiring_members_mid_run_on_redis_loses_no_pair(
    redis_url, sqlite_url, monkeypatch, simulated_provider
):
    from evaljobs.api import Session

    completes: list[str] = []
    original = events.publish_complete
    monkeypatch.setattr(events, "publish_complete",
                        lambda run_id, report: (completes.append(run_id), original(run_id, report)))
    client = redis_lib.Redis.from_url(redis_url)
    simulated_provider(latency=0.03)
    session = Session(db=sqlite_url, broker=redis_url)
    binding = session.binding()
    pool = RetiringPool(
        min=1, max=5, idle_seconds=0.02, broker=binding.broker, poll=0.02, pool_id="test:pool"
    )
    forced = pool.forced
    try:
        pool.start()
        run = store.create_run(wide_catalog(20), ["sim/a", "sim/b"], strategy="fanout")
        binding.actors.start_run.send(run.id)
        published = read_pools(client)
        info = session.wait(run.id, timeout=60, poll=0.5)
        # every message acked: nothing ready, held, delayed or dead-lettered in Redis
        assert wait_until(lambda: client.hlen("dramatiq:agents.msgs") == 0, 5)
        # Each forced retirement stops its member on a thread of its own and is counted when that
        # stop returns: the last may still be finishing when the run completes (seen under --stress).
        wait_until(lambda: pool.state()["retired"] >= len(forced), 30)
        state = pool.state()
    finally:
        pool.stop()
        session.close()
    assert info.status == "complete" and info.persisted == 40 == info.expected
    results = store.list_results(info.id)
    assert len(results) == 40 and len({(r.scenario_key, r.model) for r in results}) == 40
    assert info.report["summary"]["results"] == 40
    assert completes == [info.id]
    assert len(forced) == 12 and state["retired"] >= len(forced) and state["grown"] > len(forced)
    assert client.llen("dramatiq:agents") == 0 and client.zcard("dramatiq:agents.XQ") == 0
    assert client.hlen("dramatiq:agents.DQ.msgs") == 0
    assert [p["id"] for p in published] == ["test:pool"] and published[0]["lane"] == "bulk"
    assert client.hget(STATE_KEY, "test:pool") is None  # a stopped pool removes its record


@pytest.mark.redis
def test_pool_state_in_redis_is_refreshed_and_stale_records_are_dropped(redis_url, tmp_path):
    client = redis_lib.Redis.from_url(redis_url)
    store.connect(f"sqlite:///{tmp_path}/state.db")
    binding = evaljobs_broker.configure(redis_url)
    seconds, _ = client.time()
    client.hset(STATE_KEY, "dead:1", json.dumps({"id": "dead:1", "members": 4, "updated_at": seconds - 120}))
    client.hset(STATE_KEY, "garbage:2", "not json")
    clock = ManualClock()
    pool = Pool(min=2, max=3, idle_seconds=5, lane="interactive", broker=binding.broker,
                pool_id="host:42", clock=clock).start()
    try:
        pools = read_pools(client)
        assert [p["id"] for p in pools] == ["host:42"]
        record = pools[0]
        assert (record["members"], record["busy"], record["min"], record["max"], record["lane"],
                record["started"], record["queues"]) == (2, 0, 2, 3, "interactive", 0, ["agents"])
        assert client.hkeys(STATE_KEY) == [b"host:42"]  # the stale and unreadable records are gone
        first = record["updated_at"]
        # An unchanged record is rewritten every PUBLISH_IDLE s of the pool's clock (a changed one after
        # PUBLISH_EVERY); the controller at rest looks every IDLE_POLL s of real time.
        clock.advance(PUBLISH_IDLE)
        assert wait_until(lambda: read_pools(client)[0]["updated_at"] > first, IDLE_POLL + 10, 0.01)
        assert 0 < client.ttl(STATE_KEY) <= 60
    finally:
        pool.stop()
        binding.broker.close()
    assert read_pools(client) == []


def test_a_member_retired_before_its_threads_run_still_stops(memory, monkeypatch):
    """Dramatiq threads set running=True on entering run(): a stop() that lands first must not be lost."""
    from dramatiq import worker as dramatiq_worker

    for cls in (dramatiq_worker.ConsumerThread, dramatiq_worker.WorkerThread):
        original = cls.run

        def late_run(self, _original=original):
            time.sleep(0.1)  # a loaded machine: the thread is started but not yet in its loop
            _original(self)

        monkeypatch.setattr(cls, "run", late_run)
    pool = Pool(min=1, max=3, idle_seconds=30, broker=memory.broker, poll=10)
    pool.start()
    member = pool._grow()
    pool._retire(member)
    stopped = wait_until(lambda: pool.state()["retiring"] == 0, 5, 0.01)
    threads = list(member.worker.workers) + list(member.worker.consumers.values())
    if stopped:
        pool.stop()
    assert stopped and not any(t.is_alive() for t in threads)


@pytest.mark.redis
def test_pool_command_serves_until_sigterm_then_stops_cleanly(redis_url, sqlite_url, tmp_path):
    client = redis_lib.Redis.from_url(redis_url)
    log = tmp_path / "pool.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "evaljobs", "pool", "--min", "2", "--max", "4", "--idle-seconds", "1",
            "--lane", "interactive", "--broker", redis_url, "--db", sqlite_url]
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    try:
        assert wait_until(lambda: read_pools(client), 20), log.read_text()[-2000:]
        record = read_pools(client)[0]
        assert (record["members"], record["min"], record["max"], record["lane"]) == (2, 2, 4, "interactive")
        assert record["id"] == f"{socket.gethostname()}:{proc.pid}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert read_pools(client) == []
