"""The middleware order is part of the contract (see evaljobs/broker.py)."""
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
