"""RabbitMQ as the broker (``amqp://…``): Dramatiq's own ``RabbitmqBroker``, and what evaljobs reads of it.

Why Dramatiq's broker as it is: RabbitMQ keeps a worker's unacknowledged messages on the server and
hands them to another consumer when that worker's connection closes (a ``kill -9`` included), so the
heartbeat and maintenance the Redis broker needs have no counterpart here; delayed messages (retries,
rate-limit waits) wait on the queue's ``.DQ`` queue, as on Redis. Publishes are confirmed
(``confirm_delivery``): ``start_run`` has handed a pair over only once RabbitMQ has it on disk.

RabbitMQ carries messages only: the governor's budgets, the run events and the recovery lock live in
the state Redis (``EVALJOBS_REDIS_URL``; :attr:`evaljobs.config.Settings.state_redis`).

What ``recover`` can see: a queue's *ready* messages, read by :func:`ready_bodies` with ``basic.get``
and handed back unacknowledged (the channel closes, RabbitMQ puts them back in place). A message a
live worker holds is invisible to any other connection, so :func:`consumers` tells recovery whether
any may be in flight (see :mod:`evaljobs.pipeline.recovery`).
"""
from __future__ import annotations

import threading
from typing import Iterator, Sequence

import dramatiq
import pika
import pika.exceptions
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.common import dq_name

from evaljobs.errors import UsageError
from evaljobs.redact import redact_text

#: Seconds a check or a recovery read waits for RabbitMQ before it says so in one line.
CONNECT_SECONDS = 5.0


class StateRabbitmqBroker(RabbitmqBroker):
    """Dramatiq's RabbitMQ broker, with the state Redis as its ``client``.

    Why a ``client``: the crash counter (:mod:`evaljobs_middleware.crashes`) counts a pair's deliveries
    that never ended in the broker's ``client``; without one it counts nothing, and a pair that kills
    its worker would be redelivered by RabbitMQ to one worker after another (invariant 13). The
    recovery lock and a pool's published state use it too. ``backlog`` is what a pool grows on.
    """

    def __init__(self, *, url: str, state_url: str, middleware: Sequence[dramatiq.Middleware]) -> None:
        super().__init__(url=url, middleware=list(middleware), confirm_delivery=True)
        import redis  # the state Redis' client, as the Redis broker's

        self.url = url
        self.client = redis.Redis.from_url(state_url, socket_timeout=5, socket_connect_timeout=5)
        self._counting = threading.Lock()
        self._counter: pika.BlockingConnection | None = None

    def backlog(self, queues: Sequence[str]) -> int:
        """Ready messages on ``queues`` and their delay queues (not those held by consumers).

        A pool's controller asks every tick (50 ms): one connection is kept for it, not one a tick.
        """
        with self._counting:
            try:
                if self._counter is None or not self._counter.is_open:
                    self._counter = pika.BlockingConnection(_parameters(self.url))
                return sum(ready for ready, _ in _declare_all(self._counter, queues))
            except (pika.exceptions.AMQPError, OSError):
                self._drop_counter()
                raise

    def _drop_counter(self) -> None:
        counter, self._counter = self._counter, None
        if counter is not None and counter.is_open:
            try:
                counter.close()
            except (pika.exceptions.AMQPError, OSError):
                pass

    def close(self) -> None:
        super().close()
        with self._counting:
            self._drop_counter()
        self.client.close()


def make_broker(url: str, state_url: str, middleware: Sequence[dramatiq.Middleware]) -> StateRabbitmqBroker:
    """Dramatiq's RabbitMQ broker for ``url`` (publishing with confirms), its state in ``state_url``."""
    return StateRabbitmqBroker(url=url, state_url=state_url, middleware=middleware)


def _parameters(url: str) -> pika.URLParameters:
    parameters = pika.URLParameters(url)
    parameters.socket_timeout = CONNECT_SECONDS
    parameters.blocked_connection_timeout = CONNECT_SECONDS
    parameters.connection_attempts = 1
    return parameters


def ping(url: str) -> None:
    """Open and close a connection; raise :class:`UsageError` (one line, password masked) if it fails."""
    try:
        connection = pika.BlockingConnection(_parameters(url))
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise UsageError(f"cannot reach the broker at {redact_text(url)}: "
                         f"{redact_text(repr(exc)) or type(exc).__name__}") from None
    connection.close()


def _queue_names(queue: str) -> tuple[str, str]:
    return queue, dq_name(queue)


def _declared(url: str, queues: Sequence[str]) -> list[tuple[int, int]]:
    """(ready messages, consumers) of each of ``queues`` and its delay queue, by passive declares
    (nothing is created; a queue never declared counts (0, 0))."""
    connection = pika.BlockingConnection(_parameters(url))
    try:
        return _declare_all(connection, queues)
    finally:
        connection.close()


def _declare_all(connection: pika.BlockingConnection, queues: Sequence[str]) -> list[tuple[int, int]]:
    channel = connection.channel()
    out = []
    for queue in queues:
        for name in _queue_names(queue):
            try:
                method = channel.queue_declare(queue=name, passive=True).method
                out.append((method.message_count, method.consumer_count))
            except pika.exceptions.ChannelClosedByBroker:  # 404: never declared
                out.append((0, 0))
                channel = connection.channel()
    if channel.is_open:
        channel.close()
    return out


def consumers(url: str, queue: str) -> int:
    """Consumers of ``queue`` and its delay queue now."""
    return sum(count for _, count in _declared(url, [queue]))


def ready_counts(url: str, queues: Sequence[str]) -> list[int]:
    """Ready messages of each of ``queues`` and of its delay queue."""
    return [ready for ready, _ in _declared(url, queues)]


def ready_bodies(url: str, queue: str) -> Iterator[bytes]:
    """The body of every ready message of ``queue`` and its delay queue, left where it was.

    Each is taken with ``basic.get`` and not acknowledged; closing the channel puts them all back in
    their places (marked redelivered, which Dramatiq ignores).
    """
    connection = pika.BlockingConnection(_parameters(url))
    try:
        for name in _queue_names(queue):
            channel = connection.channel()
            try:
                while True:
                    method, _properties, body = channel.basic_get(name, auto_ack=False)
                    if method is None:
                        break
                    yield body
            except pika.exceptions.ChannelClosedByBroker:  # 404: a queue never declared holds nothing
                continue
            if channel.is_open:
                channel.close()
    finally:
        connection.close()

