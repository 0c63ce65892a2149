"""The per-pair Redis round trips at zero latency (issue 20): the governor rides on the worker's others.

A pair's permit acquire goes in the crash counter's round trip (its first), its release in the result
event's publish (its last): crash begin + acquire + release + publish were four round trips a pair,
now two. Counted at the server side of the wire: a TCP proxy in front of a real redis-server that
counts request/reply turns per connection and names the commands each turn carried.

The deferral of releases must never hold a slot the thread does not use: a deferred release is sent
before the thread's next acquire and, at the latest, by the lease renewer; an unused prefetched permit
is given back. Those are tested on the governor itself.
"""
from __future__ import annotations

import asyncio
import collections
import threading

import dramatiq
import pytest
import redis

from evaljobs import store
from evaljobs_middleware import crashes
from evaljobs.pipeline import broker
from evaljobs.governor import BudgetConfig, Governor, deferred
from helpers import numbered_catalog, wait_until

pytestmark = [pytest.mark.redis]

BUDGET = "sim:round-trips"


class TurnCounter:
    """A loopback TCP proxy to Redis counting request/reply turns, each named by the commands it carried."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.turns: collections.Counter[str] = collections.Counter()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self.port = 0
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    def start(self) -> "TurnCounter":
        self._thread.start()
        assert self._ready.wait(10), "the counting proxy did not start"
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)

    async def _main(self) -> None:
        self._loop, self._stopped = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stopped.wait()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        request = bytearray()

        async def up() -> None:
            while data := await client_r.read(65536):
                request.extend(data)
                server_w.write(data)
                await server_w.drain()
            server_w.close()

        async def down() -> None:
            while data := await server_r.read(65536):
                if request:  # the first reply bytes after a request: one round trip
                    self.turns[_name_turn(bytes(request))] += 1
                    request.clear()
                client_w.write(data)
                await client_w.drain()
            client_w.close()

        try:
            await asyncio.gather(up(), down(), return_exceptions=True)
        except asyncio.CancelledError:  # the proxy stops with connections open (the pool's idle ones)
            pass

def _run_on_two_threads(binding, run_id: str) -> None:
    """Start the run, let one two-thread worker finish it, then stop the worker and close the broker."""
    worker = dramatiq.Worker(binding.broker, worker_threads=2, worker_timeout=50)
    worker.start()
    try:
        binding.actors.start_run.send(run_id)
        assert wait_until(lambda: store.get_run(run_id).status == "complete", 120), store.get_run(run_id)
    finally:
        worker.stop()
        binding.broker.close()



def _commands(data: bytes) -> list[list[bytes]]:
    """The RESP arrays a client sent."""
    out, i = [], 0
    while i < len(data) and data[i:i + 1] == b"*":
        end = data.index(b"\r\n", i)
        count, i, args = int(data[i + 1:end]), end + 2, []
        for _ in range(count):
            end = data.index(b"\r\n", i)
            length, i = int(data[i + 1:end]), end + 2
            args.append(data[i:i + length])
            i += length + 2
        out.append(args)
    return out


def _name_turn(data: bytes) -> str:
    names = []
    for args in _commands(data):
        verb, rest = args[0].upper().decode(), b" ".join(args[1:])
        if verb in ("EVAL", "EVALSHA") and b"evaljobs:gov" in rest:
            names.append("acquire" if b"wait:bulk" in rest else "release" if b":tok" in rest
                         else "governor")
        elif verb in ("EVAL", "EVALSHA") and b"evaljobs:crashes:" in rest:
            names.append("crash-begin" if b"return n - 1" in rest or crashes._BEGIN_SHA.encode() in rest
                         else "crash-end")
        elif verb in ("EVAL", "EVALSHA"):
            names.append("dramatiq")
        else:
            names.append(verb.lower())
    return "+".join(dict.fromkeys(names)) or "?"


@pytest.fixture
def counted_redis(redis_url):
    port = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs["port"]
    proxy = TurnCounter(port).start()
    yield proxy, f"redis://127.0.0.1:{proxy.port}/{redis_url.rsplit('/', 1)[-1]}"
    proxy.stop()


def test_a_pair_costs_two_governor_crash_and_event_round_trips_not_four(counted_redis, redis_url,
                                                                       simulated_provider, sqlite_url,
                                                                       monkeypatch):
    """One pair a message, zero latency, the governor on Redis: every acquire rides on the crash counter's
    begin and every release on the result's publish; no round trip carries a governor command alone."""
    proxy, url = counted_redis
    simulated_provider(latency=0)
    # The renewer's 50 ms backstop would send a release on its own where a loaded machine takes longer
    # than that to commit the result; here only the publish may carry it.
    monkeypatch.setattr(deferred, "DEFER_MAX", 120.0)
    # The scripts are loaded, as after a worker's first call (on a fresh Redis the first prefetch of each
    # thread meets NOSCRIPT, loads the script and asks again: one more round trip, once).
    warm = Governor(redis_url)
    warm.acquire("sim:warm-up").release()
    # And the budget is past its scout (a cold budget's first call goes alone, issue 39: a thread asking
    # meanwhile is denied once, one more lone acquire, once per budget).
    warm.acquire("sim:fast").release()
    warm.close()
    redis.Redis.from_url(redis_url).script_load(crashes._BEGIN)  # and the crash counter's
    store.connect(sqlite_url)
    binding = broker.configure(url)
    n = 24
    run = store.create_run(numbered_catalog(n, "trips"), ["sim/fast"], strategy="fanout")
    _run_on_two_threads(binding, run.id)
    turns = proxy.turns
    carrying = {name: count for name, count in turns.items()
                if any(part in name.split("+") for part in ("acquire", "release", "crash-begin", "publish"))}
    # (the one lone publish: the run's ``complete`` event)
    assert carrying == {"crash-begin+acquire": n, "publish+release": n, "publish": 1}, (carrying, dict(turns))
    assert len(store.list_results(run.id)) == n


@pytest.fixture
def governor(redis_url):
    made = Governor(redis_url)
    made.configure(BUDGET, BudgetConfig(ceiling=1))
    yield made
    made.close()


def _in_flight(governor: Governor) -> int:
    return next((row["in_flight"] for row in governor.stats() if row["budget"] == BUDGET), 0)


def test_a_deferred_release_is_sent_before_the_threads_next_acquire(governor):
    """At a limit of 1, a judge call after the pair's own call on the same deployment gets the slot at
    once: the pair's deferred release goes out first."""
    governor.deferred.start()
    try:
        permit = governor.acquire(BUDGET)
        permit.release()
        assert _in_flight(governor) == 1, "deferred: not sent yet"
        second = governor.acquire(BUDGET, max_wait=0)
        assert _in_flight(governor) == 1
        second.release()
    finally:
        governor.deferred.stop()
    assert _in_flight(governor) == 0


def test_a_deferred_release_nothing_carries_is_sent_by_the_renewer(governor):
    governor.deferred.start()
    try:
        governor.acquire(BUDGET).release()
        # Another thread waits for the slot without this one doing anything more.
        assert wait_until(lambda: _in_flight(governor) == 0, 10), "the renewer did not send the release"
        box: list = []
        thread = threading.Thread(target=lambda: box.append(governor.acquire(BUDGET, max_wait=0)))
        thread.start()
        thread.join(10)
        assert box and box[0].lease_id
        box[0].release()
    finally:
        governor.deferred.stop()


def test_a_prefetched_permit_serves_the_first_acquire_and_an_unused_one_is_given_back(governor, redis_url):
    raw = redis.Redis.from_url(redis_url)  # another client, bytes replies: the crash counter's
    prefetch = governor.prefetch(BUDGET)
    assert prefetch is not None
    governor.prefetched(prefetch, raw.execute_command(*prefetch.command))
    assert _in_flight(governor) == 1
    permit = governor.acquire(BUDGET, max_wait=0)
    assert permit.lease_id == prefetch.lease_id, "the acquire used the prefetched permit"
    permit.release()
    assert _in_flight(governor) == 0

    unused = governor.prefetch(BUDGET)
    governor.prefetched(unused, raw.execute_command(*unused.command))
    assert _in_flight(governor) == 1
    governor.drop_prefetch()
    assert _in_flight(governor) == 0


def test_a_prefetch_denied_at_the_limit_keeps_its_place_and_waits(governor, redis_url):
    raw = redis.Redis.from_url(redis_url)
    holder = governor.acquire(BUDGET)
    box: list = []

    def pair() -> None:
        prefetch = governor.prefetch(BUDGET)
        governor.prefetched(prefetch, raw.execute_command(*prefetch.command))
        box.append(prefetch)
        box.append(governor.acquire(BUDGET, max_wait=30))

    thread = threading.Thread(target=pair)
    thread.start()
    assert wait_until(lambda: box, 10)
    assert box[0].answer is not None and not box[0].answer.granted
    holder.release()
    thread.join(30)
    assert len(box) == 2 and box[1].lease_id == box[0].lease_id
    box[1].release()
    row = next(row for row in governor.stats() if row["budget"] == BUDGET)
    assert (row["in_flight"], row["waiting"]) == (0, 0), row


def test_a_prefetch_after_a_script_flush_loads_the_script_and_the_acquire_asks_again(governor, redis_url):
    raw = redis.Redis.from_url(redis_url)
    raw.script_flush()
    prefetch = governor.prefetch(BUDGET)
    pipe = raw.pipeline(transaction=False)
    pipe.execute_command(*prefetch.command)
    reply = pipe.execute(raise_on_error=False)[0]
    assert isinstance(reply, redis.exceptions.NoScriptError)
    governor.prefetched(prefetch, reply)
    assert _in_flight(governor) == 0 and governor.backend == "redis"
    again = governor.prefetch(BUDGET)
    governor.prefetched(again, raw.execute_command(*again.command))  # loaded: answered this time
    permit = governor.acquire(BUDGET, max_wait=0)
    assert permit.lease_id == again.lease_id
    permit.release()
    assert _in_flight(governor) == 0


def test_without_the_governor_a_pairs_result_event_rides_on_its_ack(
    counted_redis, simulated_provider, sqlite_url, monkeypatch
):
    """Governor off, one pair a message: the result event goes in the ack's round trip (Dramatiq's ack script
    +
    PUBLISH), so a pair costs the crash counter's begin and its ack, no round trip of its own for the event.
    The run's last result goes out on its own before its finalize is sent, and every event reaches a
    subscriber on Redis."""
    proxy, url = counted_redis
    monkeypatch.setenv("EVALJOBS_GOVERNOR", "off")
    redis.Redis.from_url(url).script_load(crashes._BEGIN)  # as after a worker's first message
    simulated_provider(latency=0)
    store.connect(sqlite_url)
    binding = broker.configure(url)
    n = 24
    run = store.create_run(numbered_catalog(n, "acks"), ["sim/fast"], strategy="fanout")
    listener = redis.Redis.from_url(url).pubsub(ignore_subscribe_messages=True)
    listener.subscribe(f"evaljobs:run:{run.id}")
    _run_on_two_threads(binding, run.id)
    seen: list[bytes] = []

    def complete_seen() -> bool:
        message = listener.get_message(timeout=0.1)  # None also for the subscription's confirmation
        if message is not None:
            seen.append(message["data"])
        return bool(seen) and b'"type":"complete"' in seen[-1]

    assert wait_until(complete_seen, 30), seen
    listener.close()
    assert sum(b'"type":"result"' in data for data in seen) == n and b'"type":"complete"' in seen[-1]
    carrying = {name: count for name, count in proxy.turns.items() if "publish" in name or "crash" in name}
    # n - 1 acks carry their pair's event; the last result and ``complete`` are published on their own.
    assert carrying == {"crash-begin": n, "dramatiq+publish": n - 1, "publish": 2}, (
        carrying,
        dict(proxy.turns),
    )
