"""The embedded broker's worker, which stops as soon as its work in hand is done.

Dramatiq's ``Worker.stop`` marks every worker thread stopped, joins them, then does the same
for the consumer threads. An idle thread only notices when its queue wait times out
(``worker_timeout``, 50 ms here): a worker thread waits on the work queue, then a consumer
thread on the ``StubBroker``'s queue, so an in-process ``evaljobs run`` spent ~0.1 s of its
wall clock in ``Session.close``. A shorter ``worker_timeout`` would make every idle thread wake
that often for the whole run.

So the queues here are Dramatiq's (``queue.Queue`` / ``PriorityQueue``) with a wait that can be
cut short: while the worker stops, a waiting thread whose ``running`` flag is down gives up its
wait (``Empty``, as if it had timed out) within :data:`STOP_POLL` seconds, instead of at the end
of its timeout. Nothing else changes: a thread that holds a message finishes it (workers are
still joined before consumers), a queued message is still taken by a running thread or
requeued by Dramatiq's ``stop``, and a wait with the queue non-empty returns the item.

A stop also keeps the work it did not start: Dramatiq requeues a stopping worker's prefetched
messages through its consumer, and the stub consumer's ``requeue`` does nothing — here it puts
them back on the broker's queue (:class:`_RequeueingConsumer`).

Dramatiq internals used (pinned by ``tests/pipeline/test_memory_worker.py``): ``Worker.work_queue`` is
created in ``__init__`` and handed to the threads in ``start``; ``StubBroker.declare_queue`` and
``consume`` (repeated by :class:`MemoryBroker` with wakeable queues and a requeueing
``_StubConsumer``, whose ``queue`` and ``ack`` it uses); the threads' ``running``.
"""
from __future__ import annotations

import threading
import weakref
from queue import Empty, PriorityQueue, Queue
from time import monotonic
from typing import Any, Iterable

import dramatiq
from dramatiq.brokers.stub import StubBroker, _StubConsumer
from dramatiq.common import dq_name
from dramatiq.errors import QueueNotFound

#: Longest a waiting thread takes to notice that it was stopped, while its worker stops.
STOP_POLL = 0.002


class _Stopping:
    """Set while a worker stops: the queues' waits then poll their thread's ``running`` flag."""

    def __init__(self) -> None:
        self.active = False
        self._queues: weakref.WeakSet = weakref.WeakSet()

    def watch(self, queue: "_WakeableMixin") -> None:
        self._queues.add(queue)

    def begin(self) -> None:
        self.active = True
        for queue in list(self._queues):
            queue.wake_waiters()

    def end(self) -> None:
        self.active = False


class _WakeableMixin:
    """``Queue.get`` (CPython's, line for line) whose timed wait ends early for a stopped thread."""

    not_empty: threading.Condition
    not_full: threading.Condition

    def __init__(self, stopping: _Stopping, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stopping = stopping
        stopping.watch(self)

    def wake_waiters(self) -> None:
        with self.not_empty:
            self.not_empty.notify_all()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if not block or timeout is None:  # not waits Dramatiq makes (it always passes a timeout)
            return super().get(block, timeout)  # type: ignore[misc]
        if timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        with self.not_empty:
            endtime = monotonic() + timeout
            while not self._qsize():  # type: ignore[attr-defined]
                remaining = endtime - monotonic()
                if remaining <= 0.0 or (self._stopping.active and _stopped()):
                    raise Empty
                if self._stopping.active:
                    remaining = min(remaining, STOP_POLL)
                self.not_empty.wait(remaining)
            item = self._get()  # type: ignore[attr-defined]
            self.not_full.notify()
            return item


def _stopped() -> bool:
    """Whether the calling thread is a Dramatiq worker/consumer thread told to stop."""
    return getattr(threading.current_thread(), "running", True) is False


class WakeableQueue(_WakeableMixin, Queue):
    """The ``StubBroker``'s per-queue ``Queue``, wakeable when its worker stops."""


class WakeablePriorityQueue(_WakeableMixin, PriorityQueue):
    """The worker's work queue, wakeable when it stops."""


class _RequeueingConsumer(_StubConsumer):
    """The stub consumer, whose ``requeue`` puts messages back on its queue (Dramatiq's does nothing).

    A stopping worker hands back what it prefetched but never started (and a delay-queue consumer
    its not-yet-due messages): with Dramatiq's own stub consumer they were dropped, so a session
    closed with work still queued lost it. The message goes back *before* the old delivery is
    acked, so the queue's unfinished count never touches zero and ``join`` cannot return early.
    """

    def requeue(self, messages: Iterable[Any]) -> None:
        for message in messages:
            self.queue.put(message.encode())
            self.ack(message)


class MemoryBroker(StubBroker):
    """Dramatiq's ``StubBroker`` whose queues a stopping :class:`MemoryWorker` can wake."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.stopping = _Stopping()
        super().__init__(*args, **kwargs)

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 100) -> "_RequeueingConsumer":
        """``StubBroker.consume``, with a consumer that can hand messages back
        (:class:`_RequeueingConsumer`)."""
        try:
            return _RequeueingConsumer(self.queues[queue_name], self.dead_letters_by_queue[queue_name],
                                       prefetch, timeout)
        except KeyError:
            raise QueueNotFound(queue_name) from None

    def declare_queue(self, queue_name: str) -> None:
        """``StubBroker.declare_queue``, with :class:`WakeableQueue` queues."""
        if queue_name in self.queues:
            return

        self.emit_before("declare_queue", queue_name)
        self.queues[queue_name] = WakeableQueue(self.stopping)
        self.emit_after("declare_queue", queue_name)

        delayed_name = dq_name(queue_name)
        self.queues[delayed_name] = WakeableQueue(self.stopping)
        self.delay_queues.add(delayed_name)
        self.emit_after("declare_delay_queue", delayed_name)


class MemoryWorker(dramatiq.Worker):
    """Dramatiq's ``Worker`` on a :class:`MemoryBroker`: ``stop`` returns once the work in hand is done."""

    broker: MemoryBroker

    def __init__(self, broker: MemoryBroker, **kwargs: Any) -> None:
        super().__init__(broker, **kwargs)
        self.work_queue = WakeablePriorityQueue(broker.stopping)  # before start() hands it to the threads

    def stop(self, timeout: int = 600000) -> None:
        stopping = self.broker.stopping
        stopping.begin()
        try:
            super().stop(timeout)
        finally:
            stopping.end()


__all__ = ["MemoryBroker", "MemoryWorker", "WakeableQueue", "WakeablePriorityQueue", "STOP_POLL"]
