"""The middleware order is part of the contract (see evaljobs/pipeline/broker.py); so is how consumers
poll."""
import concurrent.futures
import threading
import time

import dramatiq
import pytest
from dramatiq.middleware import Callbacks, CurrentMessage, Pipelines, Retries

from evaljobs.config import Settings
from evaljobs.pipeline.broker import middleware_stack

from evaljobs_middleware.context import ContextMiddleware
from evaljobs_middleware.crashes import CrashCounter
from evaljobs_middleware.db import DatabaseConnections

#: Beats 2 minutes apart: a consumer's pause is then CONSUMER_POLL_MS (a beat due sooner shortens it).
QUIET = Settings(heartbeat_timeout_ms=600_000)


def test_context_middleware_comes_before_every_middleware_that_enqueues_in_an_after_hook():
    stack = middleware_stack(context_providers=[])
    kinds = [type(m) for m in stack]
    assert kinds[0] is ContextMiddleware
    # after-hooks run in reverse: the context is cleared only after these have re-enqueued
    for enqueuing in (Callbacks, Pipelines, Retries):
        assert kinds.index(ContextMiddleware) < kinds.index(enqueuing)
    assert CurrentMessage in kinds and DatabaseConnections in kinds
    # the crash counter's give-up records a pair: context restored and connection held before it
    assert kinds[-1] is CrashCounter and kinds.index(DatabaseConnections) < kinds.index(CrashCounter)


@pytest.mark.redis
def test_an_idle_consumer_waits_in_redis_and_takes_another_process_message_at_once(redis_url):
    """An idle consumer blocks on its empty queue in Redis (BLMOVE) instead of polling it: a message sent
    by another process (no wake-up from this one) is fetched long before its pause would end.

    Dramatiq's consumer backs off up to worker_timeout between polls (start_run's pairs waited for it),
    and polling every 20 ms instead cost ~120 commands a second per idle worker process."""
    from evaljobs.pipeline.broker import make_broker

    broker = make_broker(redis_url, settings=QUIET)
    other = make_broker(redis_url)  # another worker machine
    try:
        consumer = broker.consume("idle-wait", prefetch=4, timeout=1000)
        # The first pass: the fetch finds nothing, then a wait that ends with the queue still empty (the
        # default poll, a second: at 60 s this pass alone took a minute).
        assert next(consumer) is None and consumer._empty
        # From now on an unwoken consumer would come round after 60 s: a fetch within 20 s can only be
        # Redis waking it (no latency is measured, so a loaded machine's stalls cannot fail it).
        consumer.poll_ms = 60_000
        got = _next_in_thread(consumer, idle_first=0.3)
        other.enqueue(_message("idle-wait"))  # no wake-up: another process sent it
        got.result(timeout=20)
        consumer.close()
    finally:
        broker.close()
        other.close()


@pytest.mark.redis
def test_a_message_sent_from_this_process_wakes_its_idle_consumer(redis_url, monkeypatch):
    """finalize_run is sent by the worker that recorded the last pair: its own consumer fetches it at
    once instead of at its next idle poll (half a poll, on average, between last result and report)."""
    from evaljobs.pipeline import broker as broker_module

    # An unwoken consumer would sleep 30-60 s: a fetch within 20 s can only be the wake-up (no
    # latency is measured, so a loaded machine's stalls cannot fail it).
    monkeypatch.setattr("evaljobs.pipeline.dramatiq_internals.CONSUMER_POLL_MS", 60_000)
    broker = broker_module.make_broker(redis_url, settings=QUIET)
    try:
        consumer = broker.consume("wake-local", prefetch=4, timeout=60_000)
        got = _next_in_thread(consumer, idle_first=0.3)
        broker.enqueue(_message("wake-local"))
        got.result(timeout=20)
        consumer.close()
    finally:
        broker.close()


@pytest.mark.redis
def test_a_consumer_holding_its_prefetch_fetches_again_as_soon_as_acks_free_half_of_it(
    redis_url, monkeypatch
):
    """Dramatiq's consumer sleeps (5, 10, 20 … ms) when it holds `prefetch` unacked messages; with a
    provider that answers at once the worker threads drained the queue and sat idle meanwhile."""
    from evaljobs.pipeline import broker as broker_module

    monkeypatch.setattr("evaljobs.pipeline.dramatiq_internals.CONSUMER_POLL_MS", 60_000)
    broker = broker_module.make_broker(redis_url, settings=QUIET)
    try:
        consumer, held = _full_consumer(broker, "wake-ack", prefetch=4, more=2, timeout_ms=60_000)
        got = _next_in_thread(consumer, idle_first=0.3)
        consumer.ack(held[0])
        assert not got.done(), "one ack of four must not trigger a fetch (refills come in batches)"
        consumer.ack(held[1])  # half of the prefetch free
        got.result(timeout=20)  # within 20 s: only the ack's wake-up, never the 30-60 s poll
        consumer.close()
    finally:
        broker.flush_all()
        broker.close()


@pytest.mark.redis
def test_a_consumer_holding_its_prefetch_waits_for_an_ack_instead_of_spinning(redis_url, monkeypatch):
    """Dramatiq's loop comes round every 0-1 ms while the prefetch is full: CPU for nothing."""
    from evaljobs.pipeline import broker as broker_module

    monkeypatch.setattr("evaljobs.pipeline.dramatiq_internals.CONSUMER_POLL_MS", 300)
    broker = broker_module.make_broker(redis_url, settings=QUIET)
    try:
        consumer, held = _full_consumer(broker, "full-wait", prefetch=2, more=1)
        started = time.perf_counter()
        assert next(consumer) is None
        assert time.perf_counter() - started >= 0.25  # one wait for the whole poll, not a spin
        consumer.ack(held[0])
        consumer.ack(held[1])
        assert _next_message(consumer, timeout=1) is not None
        consumer.close()
    finally:
        broker.flush_all()
        broker.close()


def _message(queue: str) -> dramatiq.Message:
    return dramatiq.Message(queue_name=queue, actor_name="noop", args=(), kwargs={}, options={})


def _full_consumer(broker, queue: str, *, prefetch: int, more: int, timeout_ms: int = 5000):
    """A consumer holding its whole prefetch (unacked), with ``more`` messages still in Redis."""
    for _ in range(prefetch + more):
        broker.enqueue(_message(queue))
    consumer = broker.consume(queue, prefetch=prefetch, timeout=timeout_ms)
    held = [_next_message(consumer) for _ in range(prefetch)]
    assert consumer.outstanding_message_count == prefetch  # full: the next fetch waits for acks
    return consumer, held


def _next_message(consumer, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = next(consumer)
        if message is not None:
            return message
    raise AssertionError("no message")


def _next_in_thread(consumer, *, idle_first: float) -> concurrent.futures.Future:
    """Poll ``consumer`` in a thread (as Dramatiq's consumer thread does); the future is the time the
    first message came out. Waits ``idle_first`` seconds so the consumer is in its idle back-off."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def poll() -> None:
        try:
            _next_message(consumer, timeout=10)
            future.set_result(time.perf_counter())
        except BaseException as exc:  # noqa: BLE001 - reported through the future
            future.set_exception(exc)

    threading.Thread(target=poll, daemon=True).start()
    # Not convertible to a fake clock: the pause is the consumer's blocking read on a real Redis
    # (server-side timeout), which only real time ends.
    time.sleep(idle_first)
    assert not future.done()
    return future
