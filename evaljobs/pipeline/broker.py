"""The one place the broker and its middleware stack are set up.

``memory`` (the embedded default) is Dramatiq's in-process ``StubBroker``
driven by a real :class:`dramatiq.Worker` with ``width`` threads (both as subclasses from
:mod:`~evaljobs.pipeline.memory_worker`, whose worker stops at once); ``redis://``
is Dramatiq's Redis broker shared by any number of worker machines, and ``amqp://``
Dramatiq's RabbitMQ broker (:mod:`~evaljobs.pipeline.rabbitmq`). All get
the same actors and the same middleware, in this order:

1. ``ContextMiddleware`` first. Dramatiq runs ``before_*`` hooks in list order
   and ``after_*`` hooks in *reverse* order, so being first means the host
   context is restored before anything else runs and cleared last — after
   ``Retries`` and ``Callbacks`` have re-enqueued or sent their messages in
   their own ``after_process_message`` hooks, which therefore still see it.
2. Dramatiq's defaults (AgeLimit, TimeLimit, ShutdownNotifications,
   Callbacks, Pipelines, Retries), then ``CurrentMessage`` (actors read their
   retry count from it).
3. ``DatabaseConnections``: each worker thread hands its database connection
   back after every message.
4. ``CrashCounter`` last (:mod:`evaljobs_middleware.crashes`): a pair that
   crashed too many workers is recorded by its give-up callback with the
   host context restored and the connection held; its after-hook, which ends
   the pair's count, runs first.
5. The host's own middleware (entry-point group ``evaljobs.middleware``, then
   ``evaljobs worker --middleware``; see :mod:`evaljobs.pipeline.host_middleware`):
   after all of evaljobs', so they run with the host context restored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import dramatiq
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

from evaljobs_middleware.context import ContextMiddleware, discover_providers
from evaljobs_middleware.db import DatabaseConnections
from evaljobs_middleware.refusals import Refusals
from evaljobs_middleware.tracecontext import TraceContextProvider

from evaljobs import config, extras, store
from evaljobs.config import DEFAULT_QUEUE, REDIS_SCHEMES, Settings  # noqa: F401 - DEFAULT_QUEUE: re-exported
from evaljobs.errors import UsageError
from evaljobs.redact import redact
from evaljobs.capacity import thread_start_failed
from evaljobs.pipeline import actors, context, events
from evaljobs.pipeline.context import WorkerContext
from evaljobs.pipeline.host_middleware import host_middleware, installed, references
from evaljobs.pipeline.memory_worker import MemoryBroker, MemoryWorker
from evaljobs.pipeline import on_demand
CONTEXT_PROVIDER_GROUP = "evaljobs.context_providers"


class BrokerError(UsageError):
    """A broker URL that cannot be used (one line)."""


def queue_name(settings: Settings | None = None) -> str:
    return (settings or config.settings()).queue


def broker_url(url: str | None = None, settings: Settings | None = None) -> str:
    return url or (settings or config.settings()).broker_url or "memory"


def context_providers(given: Sequence | None = None) -> list:
    """The host's context providers (``given``, else those registered by entry point) and the built-in one
    that carries the W3C trace context (``traceparent``), unless the host brings its own of that name."""
    providers = list(given) if given is not None else discover_providers(CONTEXT_PROVIDER_GROUP,
                                                                          installed(CONTEXT_PROVIDER_GROUP))
    if not any(getattr(p, "name", None) == TraceContextProvider.name for p in providers):
        providers.append(TraceContextProvider())
    return providers


def context_middleware(
    providers: Sequence | None = None, *, settings: Settings | None = None
) -> ContextMiddleware:
    """The host-context middleware with the providers registered by entry point (or given), and the trace
    context."""
    providers = context_providers(providers)
    key = (settings or config.settings()).context_key
    return ContextMiddleware(providers, signing_key=key, bind=_bind_run)


def _bind_run(message) -> str:
    """Signed contexts are bound to the run they were sent for (first actor argument)."""
    args = getattr(message, "args", None) or ()
    return str(args[0]) if args else ""


def middleware_stack(context_providers: Sequence | None = None, *,
                     settings: Settings | None = None) -> list[dramatiq.Middleware]:
    settings = settings or config.settings()
    return [
        context_middleware(context_providers, settings=settings),
        AgeLimit(),
        TimeLimit(),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        Retries(),
        CurrentMessage(),
        Refusals(),
        DatabaseConnections(store.release_connection, hold=store.hold_connection),
        # Last: a pair given up on is recorded with the thread's database connection held and the
        # host context restored; its after-hook (the end of the count) runs first.
        actors.crash_counter(settings),
        # The host's own (entry points, then --middleware): after evaljobs', so they see the restored
        # context in before_* hooks and, as after_* hooks run in reverse, still see it in theirs.
        *host_middleware(references(settings.middleware)),
    ]


@dataclass
class Binding:
    """A broker with the actors declared on it, and the worker context its messages' calls use."""

    broker: dramatiq.Broker
    url: str
    queue: str
    actors: actors.Actors
    context: WorkerContext | None = None
    #: False for a host's broker (:func:`bind`): the host runs its workers, evaljobs never starts one.
    owned: bool = True

    @property
    def is_memory(self) -> bool:
        return self.url == "memory"


def make_broker(url: str, *, context_providers: Sequence | None = None,
                settings: Settings | None = None) -> dramatiq.Broker:
    settings = settings or config.settings()
    stack = middleware_stack(context_providers, settings=settings)
    if url == "memory":
        return MemoryBroker(middleware=stack)
    if url.startswith(REDIS_SCHEMES):
        # How long a silent worker counts as alive, and how often (per million commands) the broker
        # looks for dead workers' unacked messages to requeue. Tests shorten both.
        # Dramatiq's private parts (a consumer subclass, the pipelined enqueue) live in one module, pinned
        # by tests/pipeline/test_dramatiq_internals.py; loaded here, so the memory broker never loads the
        # Redis client (start-up time).
        return on_demand.dramatiq_internals.WakingRedisBroker(
            url=url, middleware=stack, heartbeat_timeout=settings.heartbeat_timeout_ms,
            maintenance_chance=settings.maintenance_chance)
    if url.startswith(config.AMQP_SCHEMES):
        state = config.state_redis(url, settings)
        if state is None:  # fail closed: budgets, events and crash counts need a Redis
            raise BrokerError(f"the RabbitMQ broker {redact(url)} carries only the messages: set "
                              "EVALJOBS_REDIS_URL=redis://host:port/db for the governor's budgets and the "
                              "run events (docs/operations.md, RabbitMQ)")
        extras.require("rabbitmq")
        return on_demand.rabbitmq.make_broker(url, state, stack)  # pika only for an amqp:// broker
    raise BrokerError(f"unsupported broker URL '{redact(url)}': use 'memory', 'redis://host:port/db' "
                      "or 'amqp://host:port/vhost'")


def configure(url: str | None = None, *, queue: str | None = None,
              context_providers: Sequence | None = None, settings: Settings | None = None) -> Binding:
    """Create the broker for ``url``, make it Dramatiq's global broker and declare the actors on it."""
    settings = settings or config.settings()
    url = broker_url(url, settings)
    queue = queue or settings.queue
    broker = make_broker(url, context_providers=context_providers, settings=settings)
    dramatiq.set_broker(broker)
    bound = actors.declare(broker, queue=queue)
    events.bind_redis(config.state_redis(url, settings))
    return Binding(broker=broker, url=url, queue=queue, actors=bound, context=context.current())


def bind(broker: dramatiq.Broker, *, queue: str | None = None,
         context_providers: Sequence | None = None) -> Binding:
    """Use a host's own broker (a ``StubBroker`` in its tests, its ``RedisBroker`` in production).

    What evaljobs' stack needs and the broker lacks is added: ``ContextMiddleware`` first (before the
    host's middleware, so they all see the restored context), the rest at the end. The actors are
    declared on it, and evaljobs never starts a worker of its own for it: that is the host's.
    """
    present = {type(m) for m in broker.middleware}
    for position, middleware in enumerate(middleware_stack(context_providers)):
        if type(middleware) in present:
            continue
        if position == 0 and broker.middleware:
            broker.add_middleware(middleware, before=type(broker.middleware[0]))
        else:
            broker.add_middleware(middleware)
    queue = queue or queue_name()
    bound = actors.declare(broker, queue=queue)
    url = "memory" if isinstance(broker, StubBroker) else "host"
    if url == "memory":
        events.bind_redis(None)  # in-process events: Session.wait is woken by this process's workers
    return Binding(broker=broker, url=url, queue=queue, actors=bound, context=context.current(), owned=False)


def start_memory_worker(binding: Binding, width: int) -> dramatiq.Worker:
    """Real Dramatiq worker threads on the in-process broker (one that stops at once on ours)."""
    broker, threads = binding.broker, max(1, width)
    if isinstance(broker, MemoryBroker):
        worker: dramatiq.Worker = MemoryWorker(broker, worker_threads=threads, worker_timeout=50)
    else:
        worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=50)
    try:
        worker.start()
    except RuntimeError as exc:  # "can't start new thread": what was started stops, one line says why
        worker.stop(timeout=1000)
        raise thread_start_failed(width, exc) from None
    return worker


#: Names this module re-exported from :mod:`evaljobs.pipeline.dramatiq_internals` (still importable
#: from here; loaded on first use, as they load the Redis client).
_INTERNALS = {"CONSUMER_POLL_MS": "CONSUMER_POLL_MS", "_WakeableConsumer": "WakeableConsumer",
              "_RedisBroker": "WakingRedisBroker"}


def __getattr__(name: str):
    if name in _INTERNALS:
        return getattr(on_demand.dramatiq_internals, _INTERNALS[name])  # the Redis client only when asked for
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
