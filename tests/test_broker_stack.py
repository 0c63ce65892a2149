"""The middleware order is part of the contract (see evaljobs/broker.py)."""
import pytest
from dramatiq.middleware import Callbacks, CurrentMessage, Pipelines, Retries

from evaljobs.broker import middleware_stack
from middleware.context import ContextMiddleware
from middleware.db import DatabaseConnections


def test_context_middleware_comes_before_every_middleware_that_enqueues_in_an_after_hook():
    stack = middleware_stack(context_providers=[])
    kinds = [type(m) for m in stack]
    assert kinds[0] is ContextMiddleware
    # after-hooks run in reverse: the context is cleared only after these have re-enqueued
    for enqueuing in (Callbacks, Pipelines, Retries):
        assert kinds.index(ContextMiddleware) < kinds.index(enqueuing)
    assert CurrentMessage in kinds and DatabaseConnections in kinds


@pytest.mark.redis
def test_an_idle_redis_queue_is_polled_at_most_consumer_poll_ms_apart(redis_url):
    """Dramatiq backs off up to worker_timeout (100 ms for `evaljobs worker`) between polls of an
    idle queue; start_run's pairs then waited that long before the first was picked up."""
    from evaljobs.broker import CONSUMER_POLL_MS, make_broker

    broker = make_broker(redis_url)
    try:
        consumer = broker.consume("agents", prefetch=4, timeout=100)
        assert consumer.timeout == CONSUMER_POLL_MS < 100
        assert broker.consume("agents", prefetch=4, timeout=5).timeout == 5
        consumer.close()
    finally:
        broker.close()
