"""Following a run from a command: the progress bar, and what it says when nothing moves.

``Session.run``, ``Session.rerun`` and ``Session.watch`` share it (the CLI's ``run``, ``rerun``
and ``watch`` only pass ``progress=True``); :func:`guide` is what ``run`` tells a person besides the
bar. Why: a run enqueued on Redis with no worker consuming its queue used to show a bar at 0/N with
"ETA 0.0s" forever; a ``watch`` without Redis sees no events from workers elsewhere and moved in
5-second jumps without saying why. The bar now says
both, once, as notes. It sits with the workers because what it asks when nothing moves is
whether any worker takes the run's messages (:func:`evaljobs.workers.status.read_queues`).
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from evaljobs import pipeline, store
from evaljobs.catalog import Catalog
from evaljobs.catalog.subset import Selection, select, selection_note
from evaljobs.config import AMQP_SCHEMES, REDIS_SCHEMES, settings
from evaljobs.pipeline.broker import Binding
from evaljobs.pipeline.progress import Progress
from evaljobs.pipeline.run_settings import SubmitOptions
from evaljobs.pipeline.strategy_names import QUEUED
from evaljobs.redact import redact
from evaljobs.store import RunInfo
from evaljobs.workers import on_demand

#: What a follower asks, at a database read that found nothing new, why nothing moves (or None).
IdleCheck = Callable[[], "str | None"]


def follow_progress(info: RunInfo, broker: str | None, poll: float, *,
                    local_workers: bool = False) -> tuple[Progress, IdleCheck | None]:
    """The bar for following ``info``, and what to ask when a read finds nothing new (or None).

    A queued run followed without Redis sees no events from workers elsewhere: the bar then moves
    on database reads, and says so once when a read finds results no event announced (not when
    this process runs the workers: ``local_workers``). On Redis, a read that finds nothing new
    asks the queue whether any worker is taking its messages.
    """
    progress = Progress(info.expected)
    if info.strategy not in QUEUED:
        return progress, None
    if (info.options or {}).get("batch"):  # a batch run waits on its batches, not on workers
        return progress, batch_idle_check(info.id)
    if broker and broker.startswith(AMQP_SCHEMES):
        return progress, rabbitmq_idle_check(broker)
    if not (broker and broker.startswith(REDIS_SCHEMES)):
        if local_workers:
            return progress, None
        progress.catchup_note = (
            f"with --broker {broker or 'memory'} this process sees no events from workers "
            f"elsewhere: progress moves on database reads every {poll:g} s (pass --broker "
            f"redis://… for live events)"
        )
        return progress, None
    return progress, queue_idle_check(broker)


class Guided(Protocol):
    """What :func:`guide` reads of the session it guides (:class:`evaljobs.api.Session`)."""

    import_warnings: list[str]
    excluded: int
    reuse_note: str | None

    def follows(self, strategy: str, wait: bool | None = None) -> bool: ...

    def binding(self) -> Binding: ...


def guide(session: Guided, catalog: Catalog, models: Sequence[str], strategy: str, wait: bool | None,
          options: SubmitOptions, progress: bool, on_note: Callable[[str], None] | None,
          on_event: Callable[[dict[str, Any]], None] | None, idle: IdleCheck | None,
          on_submit: Callable[[RunInfo], None] | None) -> tuple[Any, Any, Any]:
    """What :meth:`evaljobs.api.Session.run` tells a person: the import's and the selection's notes now,
    the bar, and (once the run exists) what the bar asks when nothing moves and the run's line.

    Returns the run's ``on_event``, ``idle`` and ``on_submit``: those given, or the guide's own.
    """
    note = on_note if on_note is not None else (lambda line: None)
    for warning in session.import_warnings:
        note(f"warning: {warning}")
    if session.excluded:
        note(f"note: {session.excluded} production_only scenarios left out "
             f"(--include-production-only keeps them)")
    chosen_catalog, chosen = select(catalog, options.get("selection") or Selection())
    if chosen:  # an empty selection stopped in select: no run is created
        note(f"selected {selection_note(chosen)}")
    inline = strategy not in QUEUED
    epochs = options.get("epochs")
    bar = (Progress(len(chosen_catalog.scenarios) * len(models)
                    * (epochs if epochs is not None else chosen_catalog.epochs)) if progress else None)
    checks: list[IdleCheck | None] = []  # known once the run exists (a batch run's)

    def asked() -> str | None:
        check = checks[0] if checks else None
        return check() if check is not None else None

    def submitted(info: RunInfo) -> None:
        if bar is not None and not inline and session.follows(strategy, wait):
            # on Redis with no worker taking the messages, the bar says so (not "ETA 0.0s")
            shown, check = follow_progress(info, session.binding().url, 5.0,
                                           local_workers=session.binding().is_memory)
            bar.catchup_note = shown.catchup_note
            checks.append(check)
        if session.reuse_note:
            note(session.reuse_note)
        times = f" × {info.epochs} epochs" if info.epochs > 1 else ""
        broker_text = redact(session.binding().url) if not inline else "none"
        note(f"run {info.id}: {len(chosen_catalog.scenarios)} scenarios × {len(models)} models{times} "
             f"= {info.expected} pairs ({strategy}, broker {broker_text})")
        if on_submit is not None:
            on_submit(info)

    if bar is None:
        return on_event, idle, submitted
    return bar, (asked if not inline else None), submitted


def batch_idle_check(run_id: str) -> IdleCheck:
    """At a read with no new result: the run's open provider batches (what the run waits for)."""

    def check() -> str | None:
        found = store.batches.open_batches(run_id)
        if not found:
            return None
        requests = sum(b.size for b in found)
        where = ", ".join(sorted({f"{b.provider}/{b.model} ({b.provider_status or b.state})" for b in found}))
        return (f"waiting for {len(found)} provider batch{'es' if len(found) != 1 else ''} "
                f"({requests} requests: {where}); `evaljobs status` shows their counts")

    return check


def rabbitmq_idle_check(broker: str) -> IdleCheck:
    """:func:`queue_idle_check` on RabbitMQ: ready messages with no consumer (passive declares)."""
    import pika.exceptions  # start-up time: only a follower on RabbitMQ

    rabbitmq = pipeline.rabbitmq  # loads pika, as above
    queue = settings().queue

    def check() -> str | None:
        try:
            ready, consumers = sum(rabbitmq.ready_counts(broker, [queue])), rabbitmq.consumers(broker, queue)
        except (pika.exceptions.AMQPError, OSError):
            return None  # the bar goes on from the database
        if ready and not consumers:
            return (f"no worker is consuming queue '{queue}': {ready} message(s) ready, none taken; "
                    f"start one with `evaljobs worker --broker {redact(broker)}`")
        return None

    return check


def queue_idle_check(broker: str) -> IdleCheck:
    """At a read with no new result: say so when the run's queue has work that no worker takes."""
    import redis  # start-up time: only a command following a run on Redis loads the client

    read_queues = on_demand.status.read_queues  # the status collector: a follower on Redis only
    queue = settings().queue

    def check() -> str | None:
        client = redis.Redis.from_url(broker, socket_connect_timeout=5, socket_timeout=5)
        try:
            (depth,) = read_queues(client, [queue])
        except redis.exceptions.RedisError:
            return None  # the bar goes on from the database; `evaljobs status` says what is wrong with Redis
        finally:
            client.close()
        if depth.ready and not depth.in_flight:
            return (f"no worker is consuming queue '{queue}': {depth.ready} message(s) ready, none taken; "
                    f"start one with `evaljobs worker --broker {redact(broker)}`")
        return None

    return check


__all__ = ["Guided", "IdleCheck", "follow_progress", "guide", "batch_idle_check", "queue_idle_check",
           "rabbitmq_idle_check"]
