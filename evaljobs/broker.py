"""The one place the broker and its middleware stack are set up.

``memory`` (the embedded default) is Dramatiq's in-process ``StubBroker``
driven by a real :class:`dramatiq.Worker` with ``width`` threads; ``redis://``
is Dramatiq's Redis broker shared by any number of worker machines. Both get
the same actors and the same middleware, in this order:

1. ``ContextMiddleware`` first. Dramatiq runs ``before_*`` hooks in list order
   and ``after_*`` hooks in *reverse* order, so being first means the host
   context is restored before anything else runs and cleared last — after
   ``Retries`` and ``Callbacks`` have re-enqueued or sent their messages in
   their own ``after_process_message`` hooks, which therefore still see it.
2. Dramatiq's defaults (AgeLimit, TimeLimit, ShutdownNotifications,
   Callbacks, Pipelines, Retries), then ``CurrentMessage`` (actors read their
   retry count from it).
3. ``DatabaseConnections`` last among the after-hooks' first runners: each
   worker thread hands its database connection back after every message.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    CurrentMessage,
    Pipelines,
    Retries,
    ShutdownNotifications,
    TimeLimit,
)

from middleware.db import DatabaseConnections
from middleware.refusals import Refusals

from . import actors, events, store

DEFAULT_QUEUE = "agents"
CONTEXT_PROVIDER_GROUP = "evaljobs.context_providers"


class BrokerError(ValueError):
    """A broker URL that cannot be used (one line)."""


def queue_name() -> str:
    return os.environ.get("EVALJOBS_QUEUE", DEFAULT_QUEUE)


def broker_url(url: str | None = None) -> str:
    return url or os.environ.get("EVALJOBS_BROKER_URL") or "memory"


def context_middleware(providers: Sequence | None = None):
    """The host-context middleware with the providers registered by entry point (or given)."""
    from middleware.context import ContextMiddleware, discover_providers

    if providers is None:
        providers = discover_providers(CONTEXT_PROVIDER_GROUP)
    key = os.environ.get("EVALJOBS_CONTEXT_KEY") or None
    return ContextMiddleware(providers, signing_key=key, bind=_bind_run)


def _bind_run(message) -> str:
    """Signed contexts are bound to the run they were sent for (first actor argument)."""
    args = getattr(message, "args", None) or ()
    return str(args[0]) if args else ""


def middleware_stack(context_providers: Sequence | None = None) -> list[dramatiq.Middleware]:
    return [
        context_middleware(context_providers),
        AgeLimit(),
        TimeLimit(),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        Retries(),
        CurrentMessage(),
        Refusals(),
        DatabaseConnections(store.release_connection, hold=store.hold_connection),
    ]


@dataclass
class Binding:
    broker: dramatiq.Broker
    url: str
    queue: str
    actors: actors.Actors

    @property
    def is_memory(self) -> bool:
        return self.url == "memory"


#: Longest pause (ms) between two polls of an idle Redis queue.
CONSUMER_POLL_MS = 20


class _RedisBroker(RedisBroker):
    """Dramatiq's Redis broker, polling an idle queue at most ``CONSUMER_POLL_MS`` apart.

    Why: an idle consumer backs off up to ``worker_timeout`` between polls (5, 10, 20, 40 … ms),
    and ``start_run`` enqueues its pairs while the consumer is backing off: the first pairs
    started about 90 ms after they were enqueued. ``worker_timeout`` cannot simply be lowered,
    as every worker thread also wakes that often. An idle poll is one short Lua call.
    """

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000):
        return super().consume(queue_name, prefetch, min(timeout, CONSUMER_POLL_MS))


def make_broker(url: str, *, context_providers: Sequence | None = None) -> dramatiq.Broker:
    stack = middleware_stack(context_providers)
    if url == "memory":
        return StubBroker(middleware=stack)
    if url.startswith(("redis://", "rediss://", "unix://")):
        # How long a silent worker counts as alive, and how often (per million commands) the broker
        # looks for dead workers' unacked messages to requeue. Tests shorten both.
        heartbeat = int(os.environ.get("EVALJOBS_HEARTBEAT_TIMEOUT_MS", "60000"))
        chance = int(os.environ.get("EVALJOBS_MAINTENANCE_CHANCE", "1000"))
        return _RedisBroker(url=url, middleware=stack, heartbeat_timeout=heartbeat, maintenance_chance=chance)
    raise BrokerError(f"unsupported broker URL '{url}': use 'memory' or 'redis://host:port/db'")


def configure(url: str | None = None, *, queue: str | None = None,
              context_providers: Sequence | None = None) -> Binding:
    """Create the broker for ``url``, make it Dramatiq's global broker and declare the actors on it."""
    url = broker_url(url)
    queue = queue or queue_name()
    broker = make_broker(url, context_providers=context_providers)
    dramatiq.set_broker(broker)
    bound = actors.declare(broker, queue=queue)
    events.bind_redis(None if url == "memory" else url)
    return Binding(broker=broker, url=url, queue=queue, actors=bound)


def start_memory_worker(binding: Binding, width: int) -> dramatiq.Worker:
    """Real Dramatiq worker threads on the in-process broker."""
    worker = dramatiq.Worker(binding.broker, worker_threads=max(1, width), worker_timeout=50)
    worker.start()
    return worker
