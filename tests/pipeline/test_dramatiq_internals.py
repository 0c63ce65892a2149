"""Pins the Dramatiq internals evaljobs.pipeline.dramatiq_internals depends on, against the installed
Dramatiq.

If one of these fails after a Dramatiq upgrade, the pipelined enqueue or the wakeable consumer
no longer matches Dramatiq: fix dramatiq_internals.py (or drop the speed-up), do not relax the test.
"""
from __future__ import annotations

import inspect
import threading
from contextlib import contextmanager

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.middleware import Middleware

from evaljobs.pipeline import dramatiq_internals as internals
from evaljobs.pipeline.broker import make_broker

QUEUE = "pinned"


class _Seen(Middleware):
    def __init__(self):
        self.before, self.after = [], []

    def before_enqueue(self, broker, message, delay):
        self.before.append((message.options.get("redis_message_id"), delay))

    def after_enqueue(self, broker, message, delay):
        self.after.append((message.options.get("redis_message_id"), delay))


def _take(consumer, count: int, *, tries: int, ack: bool = True) -> list:
    """Up to ``count`` messages from ``consumer`` within ``tries`` polls (each ended by the consumer's
    own timeout), acked as they come unless ``ack`` is False."""
    got = []
    for _ in range(tries):
        proxy = next(consumer)
        if proxy is not None:
            got.append(proxy)
            if ack:
                consumer.ack(proxy)
        if len(got) == count:
            break
    return got


def _noop(queue: str, number: int) -> dramatiq.Message:
    return dramatiq.Message(queue_name=queue, actor_name="noop", args=(number,), kwargs={}, options={})


@contextmanager
def _queued(redis_url: str, queue: str, count: int):
    """A broker with ``count`` messages queued on ``queue`` (args 0, 1, …), a raw client, its ack set."""
    import redis as redis_lib

    broker = make_broker(redis_url)
    client = redis_lib.Redis.from_url(redis_url)
    try:
        for number in range(count):
            broker.enqueue(_noop(queue, number))
        yield broker, client, f"dramatiq:__acks__.{broker.broker_id}.{queue}"
    finally:
        client.close()
        broker.close()


def _recording_dispatch(broker, calls):
    original = broker.scripts["dispatch"]

    def dispatch(keys=None, args=None, client=None):
        calls.append((list(keys), list(args)))
        return original(keys=keys, args=args, client=client)

    broker.scripts = {**broker.scripts, "dispatch": dispatch}


def _normalised(call):
    keys, args = call
    command, _timestamp, queue, broker_id, heartbeat, ttl, maintenance, unpack, redis_id, encoded = args
    message = dramatiq.Message.decode(encoded)
    assert message.options["redis_message_id"] == redis_id  # the id in the script args is the message's
    fields = {k: v for k, v in message.asdict().items() if k not in ("message_id", "message_timestamp")}
    fields["options"] = {k: v for k, v in fields["options"].items() if k != "redis_message_id"}
    return keys, [command, queue, broker_id, heartbeat, ttl, type(maintenance), unpack, fields]


@pytest.mark.redis
def test_the_pipelined_enqueue_sends_what_dramatiqs_own_enqueue_sends(redis_url):
    plain = RedisBroker(url=redis_url)  # Dramatiq's own class: the reference behaviour
    ours = RedisBroker(url=redis_url)
    try:
        assert internals.pipelinable(ours)
        assert set(internals.PIPELINE_ATTRIBUTES) <= set(dir(ours))
        seen_plain, seen_ours = _Seen(), _Seen()
        plain.add_middleware(seen_plain)
        ours.add_middleware(seen_ours)
        ours.broker_id = plain.broker_id  # one process's two brokers: the same id in the args
        reference, pipelined = [], []
        _recording_dispatch(plain, reference)
        _recording_dispatch(ours, pipelined)
        message = dramatiq.Message(queue_name=QUEUE, actor_name="noop", args=("run-1", "s", "m"), kwargs={},
                                   options={"context": {"v": {"k": 1}}})

        plain.enqueue(message)
        internals.enqueue_pipelined(ours, [message])

        assert len(reference) == len(pipelined) == 1
        assert _normalised(pipelined[0]) == _normalised(reference[0])
        assert seen_ours.before == seen_ours.after and seen_ours.after[0][1] is None
        assert len(seen_plain.before) == len(seen_ours.before) == 1
        # Both messages are in Redis, as Dramatiq's consumer reads them.
        consumer = plain.consume(QUEUE, prefetch=2, timeout=50)
        got = _take(consumer, 2, tries=200)
        assert [m.args for m in got] == [("run-1", "s", "m")] * 2
        consumer.close()
    finally:
        plain.close()
        ours.close()


def test_the_private_consumer_has_the_shape_wakeable_consumer_builds_on():
    assert list(inspect.signature(_RedisConsumer.__init__).parameters) == ["self", "broker", "queue_name",
                                                                           "prefetch", "timeout"]
    for name in ("ack", "nack", "__next__", "outstanding_message_count"):
        assert hasattr(_RedisConsumer, name), name
    assert isinstance(inspect.getattr_static(_RedisConsumer, "outstanding_message_count"), property)
    assert isinstance(inspect.getattr_static(RedisBroker, "consumer_class"), property)
    assert "self.consumer_class(self, queue_name, prefetch, timeout)" in inspect.getsource(
        RedisBroker.consume
    )
    assert issubclass(internals.WakeableConsumer, _RedisConsumer)


@pytest.mark.redis
def test_the_wakeable_consumer_on_real_redis_fetches_acks_and_is_woken(redis_url):
    broker = make_broker(redis_url)
    try:
        consumer = broker.consume(QUEUE, prefetch=2, timeout=1000)
        assert type(consumer) is internals.WakeableConsumer
        assert (
            consumer.prefetch == 2
            and consumer.message_cache == []
            and consumer.outstanding_message_count == 0
        )
        assert next(consumer) is None  # nothing queued: None, as Dramatiq's worker loop expects
        broker.enqueue(dramatiq.Message(queue_name=QUEUE, actor_name="noop", args=(), kwargs={}, options={}))
        assert consumer.wake.is_set()  # an enqueue from this process wakes its consumer
        proxy = None
        for _ in range(200):
            proxy = next(consumer)
            if proxy is not None:
                break
        assert proxy is not None and consumer.outstanding_message_count == 1
        consumer.wake.clear()
        consumer.ack(proxy)
        # an ack that frees prefetch
        assert consumer.outstanding_message_count == 0 and consumer.wake.is_set()
        consumer.close()
    finally:
        broker.close()


@pytest.mark.redis
def test_the_raw_fetch_and_ack_do_what_dramatiqs_own_do_and_reload_a_flushed_script(redis_url):
    """The fetch and the ack go as raw EVALSHAs on the thread's own connection (their pooled redis-py path
    cost as much CPU as the round trip): the same dispatch script and arguments as Dramatiq's own calls, so
    messages move from the queue to the ack set and out of it exactly as with Dramatiq's; on a Redis that
    lost its scripts (a restart) each falls back to Dramatiq's own call, which loads them again."""
    queue = "raw-dispatch"
    with _queued(redis_url, queue, 4) as (broker, client, acks):
        consumer = broker.consume(queue, prefetch=4, timeout=1000)
        got = _take(consumer, 2, tries=200, ack=False)
        assert client.scard(acks) == 4 and client.llen(f"dramatiq:{queue}") == 0  # one fetch took all four
        consumer.ack(got[0])
        assert client.scard(acks) == 3 and got[0].message_id not in consumer.queued_message_ids
        client.script_flush()
        consumer.ack(got[1])  # NOSCRIPT: Dramatiq's own ack loads the script
        assert client.scard(acks) == 2
        client.script_flush()
        for _ in range(2):
            broker.enqueue(_noop(queue, 9))
        client.script_flush()
        assert len(broker.do_fetch(queue, 5)) == 2  # NOSCRIPT: Dramatiq's own fetch loads the script
        assert client.scard(acks) == 4
        consumer.close()


def test_the_thread_commands_packer_writes_what_redis_py_writes():
    """evaljobs_middleware.commands packs the per-message commands itself (redis-py's packer cost more CPU
    than the round trip): byte for byte what redis-py sends for the same arguments."""
    import redis as redis_lib
    from redis.connection import PythonRespSerializer

    from evaljobs_middleware.commands import pack

    reference = PythonRespSerializer(6000, redis_lib.connection.Encoder("utf-8", "strict", False).encode)
    for command in [("EVALSHA", "ab" * 20, 1, "dramatiq", "enqueue", 1733000000123, "agents", "id-1", 60000,
                     0.5, -3, b"\x00\xffbinary", "caf\u00e9 \u2713", ""),
                    ("PUBLISH", "evaljobs:run:r1", '{"type":"result"}')]:
        assert pack(command) == b"".join(reference.pack(*command))
    with pytest.raises(redis_lib.DataError):
        pack(("SET", "k", True))  # as redis-py: a bool is refused, never sent as 1/0


@pytest.mark.redis
def test_a_thread_that_ends_hands_its_kept_connection_back_to_the_pool(redis_url):
    """Worker threads come and go (an elastic pool grows and shrinks): each keeps one connection for
    its per-message commands, and must give it back when it ends, or every ended thread leaves an
    open socket checked out of the pool for the life of the process."""
    import redis as redis_lib

    from evaljobs_middleware.commands import ThreadCommands
    from helpers import wait_until

    client = redis_lib.Redis.from_url(redis_url)
    commands = ThreadCommands(client)
    pool = client.connection_pool
    try:
        replies = []
        threads = [threading.Thread(target=lambda: replies.append(commands.execute(("PING",), ("ECHO", "x"))))
                   for _ in range(5)]
        for thread in threads:
            thread.start()
            thread.join()
        assert replies == [[True, b"x"]] * 5 or replies == [[b"PONG", b"x"]] * 5
        # every ended thread gave its connection back (when its locals are dropped, as it ends)
        assert wait_until(lambda: len(pool._in_use_connections) == 0, timeout=10, interval=0.01)
        assert len(pool._available_connections) <= 2  # and later threads reused it, not one socket each
        assert commands.execute(("PING",)) and len(pool._in_use_connections) == 1  # this thread keeps its own
    finally:
        client.close()


@pytest.mark.redis
def test_the_raw_enqueue_is_read_by_dramatiqs_own_consumer_and_reloads_a_flushed_script(redis_url):
    """The pipelined enqueue goes as raw EVALSHAs (the argument list is pinned by the test above, which
    records it through Dramatiq's script object): Dramatiq's own consumer reads every message, in order,
    also when Redis had lost the script (each message is then sent again through Dramatiq's script object)."""
    import redis as redis_lib

    ours = RedisBroker(url=redis_url)
    plain = RedisBroker(url=redis_url)
    client = redis_lib.Redis.from_url(redis_url)
    queue = "raw-enqueue"
    try:
        first = [
            dramatiq.Message(queue_name=queue, actor_name="noop", args=(i,), kwargs={}, options={})
            for i in range(3)
        ]
        internals.enqueue_pipelined(ours, first)
        client.script_flush()
        internals.enqueue_pipelined(
            ours,
            [
                dramatiq.Message(queue_name=queue, actor_name="noop", args=(i,), kwargs={}, options={})
                for i in range(3, 5)
            ],
        )
        consumer = plain.consume(queue, prefetch=5, timeout=50)
        got = [proxy.args[0] for proxy in _take(consumer, 5, tries=200)]
        assert got == [0, 1, 2, 3, 4] and client.llen(f"dramatiq:{queue}") == 0
        consumer.close()
    finally:
        client.close()
        plain.close()
        ours.close()


@pytest.mark.redis
def test_closing_the_consumer_hands_its_fetched_but_unhandled_messages_back(redis_url):
    """A graceful stop must leave nothing unacked: Dramatiq's worker requeues its work queue and delay
    queue, but not what the consumer fetched and has not yet handed to it (its ``message_cache``).

    The consumer thread leaves its loop after handing over one message once it is told to stop, so a
    fetch of several messages just before the stop left the rest in Redis's ack set until the
    heartbeat timed out (``tests/pipeline/test_faults.py``'s SIGTERM test saw ``unacked == 4`` now and then).
    """
    import redis as redis_lib

    broker = make_broker(redis_url)
    client = redis_lib.Redis.from_url(redis_url)
    queue = "cache-on-close"
    try:
        for number in range(5):
            broker.enqueue(dramatiq.Message(queue_name=queue, actor_name="noop", args=(number,), kwargs={},
                                            options={}))
        consumer = broker.consume(queue, prefetch=5, timeout=1000)
        first = None
        while first is None:
            first = next(consumer)
        assert len(consumer.message_cache) == 4  # one fetch brought all five; one handed over
        assert client.scard(f"dramatiq:__acks__.{broker.broker_id}.{queue}") == 5
        consumer.ack(first)
        consumer.close()
        assert client.scard(f"dramatiq:__acks__.{broker.broker_id}.{queue}") == 0
        assert client.llen(f"dramatiq:{queue}") == 4  # back in the queue, for any worker to fetch now
        assert consumer.message_cache == []
    finally:
        client.close()
        broker.close()


@pytest.mark.redis
@pytest.mark.parametrize("delayed", [False, True], ids=["prefetched", "delayed"])
def test_what_a_consumer_held_when_redis_went_away_is_requeued_once_it_is_back(delayed):
    """Redis restarts under a live worker: Dramatiq restarts the consumer, dropping its in-memory
    delay queue and the old consumer's ``message_cache``. Their ids stayed in this live worker's ack
    set, where neither maintenance (fresh heartbeat) nor ``evaljobs recover`` (they look queued)
    would ever touch them; the next consumer of the queue must put them back."""
    import redis as redis_lib
    from dramatiq.common import dq_name
    from dramatiq.errors import ConnectionClosed

    from helpers import RedisServer

    queue = "restarted"
    with RedisServer(appendonly=True) as server:
        broker = make_broker(server.url)
        client = redis_lib.Redis.from_url(server.url)
        try:
            for number in range(5):
                message = dramatiq.Message(
                    queue_name=queue, actor_name="noop", args=(number,), kwargs={}, options={}
                )
                broker.enqueue(message, delay=60_000 if delayed else None)
            name = dq_name(queue) if delayed else queue
            consumer = broker.consume(name, prefetch=5, timeout=1000)
            handed = []
            while len(handed) < (5 if delayed else 1):  # delayed: all five sit in the (dropped) delay queue
                proxy = next(consumer)
                if proxy is not None:
                    handed.append(proxy)
            acks = f"dramatiq:__acks__.{broker.broker_id}.{name}"
            assert client.scard(acks) == 5
            server.stop()
            with pytest.raises(ConnectionClosed):
                consumer.close()  # what Dramatiq's ConsumerThread does after a connection error
            server.start()
            client = redis_lib.Redis.from_url(server.url)
            assert client.scard(acks) == 5  # the append-only file kept them: still "held" by a live worker
            again = broker.consume(name, prefetch=5, timeout=1000)
            got = [proxy.args[0] for proxy in _take(again, 5 if delayed else 4, tries=500)]
            expected = [0, 1, 2, 3, 4] if delayed else [h for h in range(5) if h != handed[0].args[0]]
            assert sorted(got) == expected
            # Not delayed: the one message handed to a worker thread is still its to run and ack.
            assert client.scard(acks) == (0 if delayed else 1)
        finally:
            client.close()
            broker.close()


@pytest.mark.redis
def test_a_fetch_whose_reply_was_lost_is_requeued_by_the_next_consumer_of_the_live_worker(redis_url,
                                                                                          monkeypatch):
    """A partition can swallow a fetch's reply after Redis ran it: the messages sit in this worker's ack set
    and no thread has them, under a heartbeat that stays fresh (so maintenance never hands them back). The
    next consumer of the queue (Dramatiq starts one after the lost connection) requeues them first; what a
    thread still runs (handed out, not yet acked) is left alone (tests/network/test_network_faults.py)."""
    queue = "lost-reply"
    with _queued(redis_url, queue, 3) as (broker, client, acks):
        running = _take(broker.consume(queue, prefetch=1, timeout=1000), 1, tries=200, ack=False)
        assert len(running) == 1  # a thread runs it; its consumer then lost its connection
        broker.do_fetch(queue, 1)  # Redis ran the fetch; its reply never came back
        assert client.scard(acks) == 2 and client.llen(f"dramatiq:{queue}") == 1
        consumer = broker.consume(queue, prefetch=5, timeout=1000)
        got = _take(consumer, 2, tries=200)
        assert sorted(proxy.args[0] for proxy in got) == [1, 2]  # the lost one and the one never fetched
        assert client.smembers(acks) == {running[0].options["redis_message_id"].encode()}
        consumer.ack(running[0])  # the predecessor's message is acked through the new consumer
        assert client.scard(acks) == 0
        # A fetch the client gave up on, run by Redis later (a retransmitted request, after the heal):
        # the live consumer requeues it at its next reclaim (every RECLAIM_SECONDS; here at once).
        broker.enqueue(_noop(queue, 3))
        broker.do_fetch(queue, 1)
        monkeypatch.setattr(internals, "RECLAIM_SECONDS", 0.0)
        consumer._next_reclaim = 0.0
        assert [proxy.args[0] for proxy in _take(consumer, 1, tries=200)] == [3]
        assert client.scard(acks) == 0
        consumer.close()
