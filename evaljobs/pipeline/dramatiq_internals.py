"""Everything of Dramatiq's that is not its public API, in one place.

Two speed-ups lean on Dramatiq's Redis broker internals:

* :class:`WakeableConsumer` subclasses the private ``dramatiq.brokers.redis._RedisConsumer``
  (its constructor ``(broker, queue_name, prefetch, timeout)``, its ``prefetch``,
  ``message_cache``, ``outstanding_message_count``, ``ack``/``nack`` and a ``__next__`` that
  returns ``None`` when nothing was fetched) and the broker's ``do_requeue(queue, *redis_ids)``
  (what ``_RedisConsumer.requeue`` calls), and :class:`WakingRedisBroker` swaps it in
  through ``RedisBroker.consumer_class``.
* :func:`enqueue_pipelined` repeats ``RedisBroker.enqueue`` for many messages in one pipeline:
  it copies the private ``_should_do_maintenance``, ``_max_unpack_size`` and the argument list
  of the ``dispatch`` Lua script (``command, timestamp, queue, broker_id, heartbeat_timeout,
  dead_message_ttl, maintenance, max_unpack, redis_message_id, encoded message``).

``tests/pipeline/test_dramatiq_internals.py`` pins each of these against the installed Dramatiq on a
real Redis (the dispatch arguments are compared with those of Dramatiq's own ``enqueue``), so
an upgrade that changes them fails in CI, not silently in production.
"""
from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any, Iterable
from uuid import uuid4

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.redis import _RedisConsumer
from dramatiq.common import current_millis
from dramatiq.errors import ConnectionClosed
from dramatiq.middleware import MiddlewareError

from evaljobs_middleware.commands import is_noscript, thread_commands

from evaljobs.pipeline import events
from evaljobs.pipeline.heartbeats import Heart

logger = logging.getLogger(__name__)

#: The private attributes of RedisBroker that :func:`enqueue_pipelined` uses.
PIPELINE_ATTRIBUTES = ("_should_do_maintenance", "_max_unpack_size", "namespace", "broker_id",
                       "heartbeat_timeout", "dead_message_ttl")


#: What a lost Redis raises: a refused or reset connection, and a reply that never came. The second is what
#: a partition looks like (packets vanish; redis-py's socket timeout runs out); it is no ``ConnectionError``:
#: Dramatiq turns only ``ConnectionError`` into its ``ConnectionClosed``, so a timed-out ack was logged as
#: "You've found a bug in Dramatiq" and dropped, leaving the message in this live worker's ack set until the
#: worker restarted (then it ran again). As ``ConnectionClosed``, Dramatiq retries the ack every second
#: until Redis answers, and restarts a consumer without a traceback (tests/network/test_network_faults.py).
LOST_REDIS = (redis.ConnectionError, redis.TimeoutError)

#: How often (s) a consumer requeues what its worker's ack set holds and no thread has (see ``_reclaim``).
RECLAIM_SECONDS = 10.0

#: Longest pause (ms) of an idle consumer: how long it blocks on its empty queue (``BLMOVE``) or waits for
#: acks while it holds its whole prefetch, before its loop comes round (to beat, to stop, to hand a due
#: delayed message over). Dramatiq's own idle consumer backs off up to ``worker_timeout``, 1 s by default.
CONSUMER_POLL_MS = 1000
#: How much longer than the block a reply may take before the connection counts as lost (seconds).
BLOCK_GRACE = 5.0


class WakeableConsumer(_RedisConsumer):
    """Dramatiq's Redis consumer, which waits for work instead of polling for it.

    Dramatiq's consumer sleeps between fetches whenever a fetch brings nothing: when the queue
    is empty, but also when the process already holds ``prefetch`` unacked messages. Both
    sleeps back off (5, 10, 20 ms … up to ``worker_timeout``): a message sent while it sleeps
    waits, and a short ``worker_timeout`` makes an idle worker poll Redis all day long (evaljobs'
    20 ms poll cost about 120 commands a second per idle worker process). So:

    * an empty queue is waited on in Redis: ``BLMOVE queue queue LEFT LEFT`` blocks until the list
      holds an id and then puts it back where it was (the fetch, Dramatiq's script, takes it),
      for at most ``CONSUMER_POLL_MS`` — less when a delayed message this thread holds is due
      sooner. A message from any process is seen at once; an idle consumer costs one command a
      second;
    * a consumer holding its whole prefetch waits on a :class:`threading.Event`, set by an ack or
      nack that leaves half the prefetch free and by an enqueue on this queue from this process
      (see :meth:`WakingRedisBroker.enqueue`): no Redis command, no spin;
    * its loop beats for the process (:mod:`evaljobs.pipeline.heartbeats`): once a period, not on
      every command.
    """

    def __init__(self, broker, queue_name: str, prefetch: int, timeout: int):
        # Dramatiq's own pause is cut to a yield (0-1 ms); ours, below, waits in Redis or is woken.
        super().__init__(broker, queue_name, prefetch, 1)
        self.poll_ms = max(1, CONSUMER_POLL_MS)
        self.wake = threading.Event()
        self._registered = False
        #: True after a wait in Redis that ended with the queue still empty.
        self._empty = False
        #: message_id -> redis_message_id of what this consumer handed out and nobody acked yet.
        self._held: dict[str, str] = {}
        self._next_reclaim = 0.0  # at once: before this consumer's first fetch

    def ack(self, message) -> None:
        held = events.take_held()
        try:
            self._ack(message, held)
            _in_hand(self.broker, self.queue_name).discard(message.options["redis_message_id"])
        finally:
            self._held.pop(message.message_id, None)
            self._freed()

    def _ack(self, message, held: list[tuple[str, str]]) -> None:
        """Dramatiq's ack (its ``dispatch`` script with its arguments, as :func:`enqueue_pipelined`)
        sent as a raw ``EVALSHA`` on this thread's own connection, with the message's held result
        events (:func:`evaljobs.pipeline.events.hold_results`) in the same round trip.

        Why: redis-py's pooled command path costs a worker ~130 µs of CPU a command, the socket and
        the parser ~40 µs (:mod:`evaljobs_middleware.commands`); and the events' own round trip
        cost as much again. An unknown script (a restarted Redis) falls back to Dramatiq's own ack,
        which loads it.
        """
        broker = self.broker
        commands: list[tuple[Any, ...]] = [
            ("EVALSHA", broker.scripts["dispatch"].sha, 1, broker.namespace, "ack", current_millis(),
             self.queue_name, broker.broker_id, broker.heartbeat_timeout, broker.dead_message_ttl,
             broker._should_do_maintenance("ack"), broker._max_unpack_size(),
             message.options["redis_message_id"])]
        commands += [("PUBLISH", name, payload) for name, payload in held]
        try:
            replies = thread_commands(broker.client).execute(*commands)
        except LOST_REDIS as error:
            if held:
                events.restore_held(held)  # Dramatiq retries the ack once Redis answers: they go with it
            raise ConnectionClosed(error) from None
        if is_noscript(replies[0]):
            super().ack(message)
        else:
            self.queued_message_ids.discard(message.message_id)
            if isinstance(replies[0], Exception):
                raise replies[0]
        failed = [reply for reply in replies[1:] if isinstance(reply, Exception)]
        if failed:
            logger.warning("could not publish %d event(s) with the ack of %s: %s", len(failed),
                           message.message_id, failed[0])

    def nack(self, message) -> None:
        try:
            super().nack(message)
            _in_hand(self.broker, self.queue_name).discard(message.options["redis_message_id"])
        except redis.TimeoutError as error:  # Dramatiq's nack converts a ConnectionError itself
            raise ConnectionClosed(error) from None
        finally:
            self._held.pop(message.message_id, None)
            self._freed()
            events.flush_held()

    def _freed(self) -> None:
        # Refill in batches: waking on every ack would turn one fetch of many messages into a
        # fetch (a Lua call) per message. Half the prefetch still queued keeps the threads busy.
        # (Setting an Event takes its lock and notifies: skipped when it is set already.)
        if self.outstanding_message_count <= self.prefetch // 2 and not self.wake.is_set():
            self.wake.set()

    def __next__(self):
        if time.monotonic() >= self._next_reclaim:
            self._reclaim()
        self._requeue_orphans()
        self._beat()
        if not self.message_cache and self.outstanding_message_count >= self.prefetch:
            # Full: nothing may be fetched until acks free half the prefetch, and they wake us.
            # (Dramatiq's own loop would come round every 0-1 ms here, burning CPU.)
            self.wake.wait(self._pause())
            self.wake.clear()
            return None
        self.wake.clear()  # before the fetch: a wake-up during it is not lost
        if self._empty:  # the last wait saw nothing arrive: no fetch until something does
            self._block(self._pause())
            return None
        try:
            message = super().__next__()
        except redis.TimeoutError as error:  # Dramatiq's fetch converts a ConnectionError itself
            raise ConnectionClosed(error) from None
        if message is not None:
            inline_fields(message)
            self._held[message.message_id] = message.options["redis_message_id"]
            _in_hand(self.broker, self.queue_name).add(message.options["redis_message_id"])
            return message
        self._block(self._pause())
        return None

    def _beat(self) -> None:
        try:
            self.broker.heart.beat(force=not self._registered)  # the first: before this queue's first fetch
        except LOST_REDIS as error:
            raise ConnectionClosed(error) from None
        self._registered = True

    def _pause(self) -> float:
        """Seconds until this loop must come round: ``CONSUMER_POLL_MS``, or sooner for a delayed message
        this consumer's thread holds (Dramatiq's ``ConsumerThread.delay_queue``, enqueued when due)."""
        pause = self.poll_ms / 1000
        delayed = getattr(threading.current_thread(), "delay_queue", None)
        heap = getattr(delayed, "queue", None)
        if heap:
            pause = min(pause, max(0.0, (heap[0].priority - current_millis()) / 1000))
        return min(pause, self.broker.heart.period)

    def _block(self, seconds: float) -> None:
        """Wait in Redis until this queue holds a message id, for at most ``seconds``."""
        self._empty = False
        if seconds < 0.01 or self.broker.blocking is False:
            # Due now (a BLMOVE of 0 would block for ever), or a Redis without BLMOVE (before 6.2).
            self.wake.wait(seconds)
            return
        key = f"{self.broker.namespace}:{self.queue_name}"
        try:
            reply = thread_commands(self.broker.client).execute(
                ("BLMOVE", key, key, "LEFT", "LEFT", round(seconds, 3)), timeout=seconds + BLOCK_GRACE
            )[0]
        except (redis.ConnectionError, redis.TimeoutError) as error:
            raise ConnectionClosed(error) from None
        if isinstance(reply, redis.ResponseError):
            if "unknown command" not in str(reply).lower():
                raise reply
            logger.warning("this Redis has no BLMOVE (Redis 6.2+): idle consumers poll every %d ms instead",
                           self.poll_ms)
            self.broker.blocking = False
            self.wake.wait(seconds)
        else:
            self._empty = reply is None

    def close(self) -> None:
        """Hand back what this process fetched and will no longer run.

        * The ``message_cache`` (fetched, never handed to the worker): Dramatiq's ``Worker.stop``
          requeues its work queue and delay queues, but its consumer thread leaves the fetch loop
          after one message once told to stop, so the rest of a fetch made during the stop stayed
          in this worker's ack set until the heartbeat timed out (the graceful-stop fault test
          saw 4 unacked now and then).
        * On a delay queue (``….DQ``), everything handed out and not acked: when a consumer loses
          its Redis connection, Dramatiq's ``ConsumerThread`` replaces its in-memory delay queue
          (``self.delay_queue = PriorityQueue()``) and those messages are gone from the process
          while their ids stay in this *live* worker's ack set: maintenance never requeues them
          (the heartbeat is fresh) and ``evaljobs recover`` counts them as queued, so a retry or a
          rate-limit wait in flight when Redis restarted waited for the worker's restart. (On a
          graceful stop Dramatiq requeued them already; requeueing twice is a no-op.)

        With Redis gone, the ids are kept on the broker and the next consumer of the queue in this
        process (Dramatiq restarts it once Redis answers) requeues them first.
        """
        cached, self.message_cache = self.message_cache, []
        ids = [
            dramatiq.Message.decode(data).options["redis_message_id"] for data in cached if data is not None
        ]
        if self.queue_name.endswith(".DQ"):
            ids += self._held.values()
            _in_hand(self.broker, self.queue_name).difference_update(self._held.values())
            self._held.clear()
        try:
            if ids:
                self.broker.do_requeue(self.queue_name, *ids)
        except LOST_REDIS as error:
            _stash_orphans(self.broker, self.queue_name, ids)
            # As Dramatiq's ack/nack do: the consumer thread's close() expects its own error type.
            raise ConnectionClosed(error) from None
        finally:
            super().close()

    def _reclaim(self) -> None:
        """Requeue what this worker's ack set holds for this queue and no thread of this process has in hand.

        Why: a fetch whose reply is lost (a partition: Redis ran the script, moved the messages into
        this worker's ack set, and the answer never came) leaves messages that no thread will run,
        under a heartbeat that stays fresh, so maintenance never hands them back: the run waited for
        the worker's restart (tests/network/test_network_faults.py). Worse, a fetch the client gave up on can
        still run *after* the partition heals: the kernel keeps retransmitting a closed socket's unsent
        request, so once is not enough. Run by each consumer before its first fetch (after a lost
        connection Dramatiq starts a new one) and every ``RECLAIM_SECONDS`` after, on the consumer's
        thread, so no fetch of this queue by this process is in flight (one consumer thread a queue):
        what it holds is in hand (handed out, not acked) or in its cache. One ``SMEMBERS`` each time; an
        id acked meanwhile is left alone (Dramatiq's requeue moves only ids still in the ack set).
        """
        broker = self.broker
        in_hand = set(_in_hand(broker, self.queue_name))  # before the ack set: a later ack is a no-op
        in_hand.update(dramatiq.Message.decode(data).options["redis_message_id"]
                       for data in self.message_cache if data is not None)
        key = f"{broker.namespace}:__acks__.{broker.broker_id}.{self.queue_name}"
        try:
            fetched = {member.decode() for member in broker.client.smembers(key)}
            lost = sorted(fetched - in_hand)
            if lost:
                broker.do_requeue(self.queue_name, *lost)
                logger.warning("requeued %d message(s) of %s in this worker's ack set that no thread has "
                               "(a fetch whose reply was lost)", len(lost), self.queue_name)
        except LOST_REDIS as error:
            raise ConnectionClosed(error) from None
        self._next_reclaim = time.monotonic() + RECLAIM_SECONDS

    def _requeue_orphans(self) -> None:
        ids = _take_orphans(self.broker, self.queue_name)
        if not ids:
            return
        try:
            self.broker.do_requeue(self.queue_name, *ids)
        except LOST_REDIS as error:
            _stash_orphans(self.broker, self.queue_name, ids)
            raise ConnectionClosed(error) from None


def inline_fields(proxy: Any) -> Any:
    """``proxy`` (Dramatiq's ``MessageProxy``) with its message's fields as its own attributes.

    Why: a proxy reads ``options``, ``args``, ``actor_name`` … through ``__getattr__``, which Python
    calls only after the ordinary lookup has failed — raising, formatting and clearing an
    ``AttributeError`` every time (about 2 µs a read, against 0.2). Dramatiq, its middleware and
    evaljobs' read a message's fields some forty times a pair: about a twentieth of a pair's worker CPU
    at one pair a message (issue 42, item 4). A message is a frozen dataclass (its ``options`` is the
    same dict, mutated in place), so the copied values are the ones ``__getattr__`` would return.
    """
    fields = getattr(proxy, "_message", None)
    if fields is not None and hasattr(fields, "__dict__"):
        proxy.__dict__.update(vars(fields))
    return proxy


def _in_hand(broker, queue_name: str) -> set[str]:
    """The redis message ids of ``queue_name`` this process's consumers handed out and nobody acked yet.

    Per broker, not per consumer: a restarted consumer's predecessor's messages are still running."""
    in_hand = getattr(broker, "in_hand", None)
    if in_hand is None:
        return set()
    with broker._consumers_lock:
        return in_hand.setdefault(queue_name, set())


def _stash_orphans(broker, queue_name: str, ids) -> None:
    orphans = getattr(broker, "orphans", None)
    if orphans is not None:
        with broker._consumers_lock:
            orphans.setdefault(queue_name, set()).update(ids)


def _take_orphans(broker, queue_name: str) -> list[str]:
    orphans = getattr(broker, "orphans", None)
    if not orphans:
        return []
    with broker._consumers_lock:
        return list(orphans.pop(queue_name, ()))


class NoOpHooksSkipped:
    """A broker whose ``emit_before``/``emit_after`` call only the middleware that define the hook.

    Dramatiq's own loop calls every middleware for every signal — about a dozen, most of them the base
    class's no-op — so a message's ``process_message`` and ``ack`` cost some fifty calls that do nothing
    (issue 42, item 4: a tenth of a pair's hook time at one pair a message). The same hooks run in the same
    order, with the same error handling: the middleware that define a hook are found once per signal and
    kept while the broker's middleware list is the same (an added middleware is seen at its next signal).
    A middleware whose instance carries the hook as an attribute counts as defining it.
    """

    middleware: list[dramatiq.Middleware]
    logger: logging.Logger

    def _defining(self, name: str) -> tuple[dramatiq.Middleware, ...]:
        cache: dict[str, tuple[list[dramatiq.Middleware], tuple[dramatiq.Middleware, ...]]] | None = \
            self.__dict__.get("_hook_cache")
        if cache is None:
            cache = self.__dict__["_hook_cache"] = {}
        kept = cache.get(name)
        if kept is not None and kept[0] == self.middleware:
            return kept[1]
        no_op = getattr(dramatiq.Middleware, name, None)
        defining = tuple(m for m in self.middleware
                         if no_op is None or getattr(type(m), name, None) is not no_op
                         or name in getattr(m, "__dict__", ()))
        cache[name] = (list(self.middleware), defining)
        return defining

    def emit_before(self, signal: str, *args: Any, **kwargs: Any) -> None:
        signal = "before_" + signal
        for middleware in self._defining(signal):
            try:
                getattr(middleware, signal)(self, *args, **kwargs)
            except MiddlewareError:
                raise
            except Exception:
                self.logger.critical("Unexpected failure in %s of %r.", signal, middleware, exc_info=True)

    def emit_after(self, signal: str, *args: Any, **kwargs: Any) -> None:
        signal = "after_" + signal
        for middleware in reversed(self._defining(signal)):
            try:
                getattr(middleware, signal)(self, *args, **kwargs)
            except Exception:
                self.logger.critical("Unexpected failure in %s of %r.", signal, middleware, exc_info=True)


class WakingRedisBroker(NoOpHooksSkipped, RedisBroker):
    """Dramatiq's Redis broker with consumers that wait for work instead of polling for it (see
    :class:`WakeableConsumer`), and heartbeats that hand a dead process's messages back without ``KEYS``
    (:mod:`evaljobs.pipeline.heartbeats`; Dramatiq's own maintenance is off unless
    ``maintenance_chance`` is set).

    Why: Dramatiq's idle consumer backs off up to ``worker_timeout`` between polls (5, 10, 20, 40 … ms),
    and ``start_run`` enqueues its pairs while the consumer is backing off: the first pairs started
    about 90 ms after they were enqueued; polling faster cost Redis ~120 commands a second per idle
    process. A blocked read is woken by the push itself.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._url = kwargs.get("url")
        self._consumers: dict[str, weakref.WeakSet] = {}
        self._consumers_lock = threading.Lock()
        #: queue -> redis message ids a closed consumer could not requeue (Redis was down).
        self.orphans: dict[str, set[str]] = {}
        #: queue -> redis message ids handed out by this process's consumers, not yet acked (see _reclaim).
        self.in_hand: dict[str, set[str]] = {}
        self.heart = Heart(self, self._consumed)
        #: False once Redis answered that it has no BLMOVE: idle consumers then poll.
        self.blocking: bool | None = None

    def _consumed(self) -> list[str]:
        with self._consumers_lock:
            return list(self._consumers)

    def beat(self) -> None:
        """A sender's beat (throttled): a process that only enqueues is forgotten once it is silent."""
        try:
            self.heart.beat()
        except redis.RedisError as error:  # the enqueue meets the same error, or succeeds: it decides
            logger.debug("heartbeat not sent: %s", error)

    @property
    def consumer_class(self):
        return WakeableConsumer

    def do_fetch(self, queue_name: str, prefetch: int):
        """Dramatiq's fetch (its ``dispatch`` script, ``"fetch"``), sent as a raw ``EVALSHA`` on the
        consumer thread's own connection: the pooled redis-py path cost as much client CPU as the
        round trip itself (see :meth:`WakeableConsumer._ack`). An unknown script (a restarted Redis)
        falls back to Dramatiq's own call, which loads it."""
        reply = thread_commands(self.client).execute(
            (
                "EVALSHA",
                self.scripts["dispatch"].sha,
                1,
                self.namespace,
                "fetch",
                current_millis(),
                queue_name,
                self.broker_id,
                self.heartbeat_timeout,
                self.dead_message_ttl,
                self._should_do_maintenance("fetch"),
                self._max_unpack_size(),
                prefetch,
            )
        )[0]
        if is_noscript(reply):
            return self._dispatch("fetch")(queue_name, prefetch)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def acks_carry_events(self) -> bool:
        """Whether a message's result events may ride on its ack (the events' Redis is this broker's)."""
        return self._url is not None and events.redis_url() == self._url

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000):
        consumer = super().consume(queue_name, prefetch, timeout)
        with self._consumers_lock:
            self._consumers.setdefault(queue_name, weakref.WeakSet()).add(consumer)
        return consumer

    def enqueue(self, message, *, delay=None):
        self.beat()
        message = super().enqueue(message, delay=delay)
        if delay is None:
            self.wake(message.queue_name)
        return message

    def wake(self, queue_name: str) -> None:
        """Tell this process's consumers of ``queue_name`` that there is a message to fetch."""
        with self._consumers_lock:
            consumers = list(self._consumers.get(queue_name, ()))
        for consumer in consumers:
            consumer.wake.set()


def pipelinable(broker: dramatiq.Broker) -> bool:
    """Whether ``broker`` is a Redis broker with the internals :func:`enqueue_pipelined` copies."""
    return (isinstance(broker, RedisBroker) and "dispatch" in getattr(broker, "scripts", {})
            and all(hasattr(broker, name) for name in PIPELINE_ATTRIBUTES))


def enqueue_pipelined(broker: RedisBroker, chunk: Iterable[dramatiq.Message]) -> None:
    """Exactly ``RedisBroker.enqueue`` for each message (no delay), the script calls in one round trip.

    Sent as raw ``EVALSHA`` commands on this thread's own connection (:mod:`evaljobs_middleware.commands`):
    redis-py's pipeline spent half of ``start_run``'s CPU packing them. A message whose script Redis
    does not hold (a restarted Redis) is sent again through Dramatiq's script object, which loads it.
    """
    dispatch = broker.scripts["dispatch"]
    keys = [broker.namespace]
    sent, calls = [], []
    beat = getattr(broker, "beat", None)
    if beat is not None:
        beat()
    for message in chunk:
        message = message.copy(options={"redis_message_id": str(uuid4())})
        broker.emit_before("enqueue", message, None)
        calls.append(
            [
                "enqueue",
                current_millis(),
                message.queue_name,
                broker.broker_id,
                broker.heartbeat_timeout,
                broker.dead_message_ttl,
                broker._should_do_maintenance("enqueue"),
                broker._max_unpack_size(),
                message.options["redis_message_id"],
                message.encode(),
            ]
        )
        sent.append(message)
    sha = getattr(dispatch, "sha", None)
    if sha is None:  # not redis-py's Script (a test recording the calls): through a redis-py pipeline
        with broker.client.pipeline(transaction=False) as pipe:
            for args in calls:
                dispatch(keys=keys, args=args, client=pipe)
            pipe.execute()
    elif calls:
        replies = thread_commands(broker.client).execute(
            *(("EVALSHA", sha, 1, *keys, *args) for args in calls)
        )
        for args, reply in zip(calls, replies):
            if is_noscript(reply):
                dispatch(keys=keys, args=args)
            elif isinstance(reply, Exception):
                raise reply
    for message in sent:
        broker.emit_after("enqueue", message, None)
    wake = getattr(broker, "wake", None)  # this process's consumers need not wait for their next poll
    if wake is not None:
        for queue in {message.queue_name for message in sent}:
            wake(queue)
