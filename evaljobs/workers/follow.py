"""Following a run from a command: the progress bar, and what it says when nothing moves.

``Session.run``, ``Session.rerun`` and ``Session.watch`` share it (the CLI's ``run``, ``rerun``
and ``watch`` only pass ``progress=True``). Why: a run enqueued on Redis with no worker consuming
its queue used to show a bar at 0/N with "ETA 0.0s" forever; a ``watch`` without Redis sees no
events from workers elsewhere and moved in 5-second jumps without saying why. The bar now says
both, once, as notes. It sits with the workers because what it asks when nothing moves is
whether any worker takes the run's messages (:func:`evaljobs.workers.status.read_queues`).
"""
from __future__ import annotations

from typing import Callable

from evaljobs.config import AMQP_SCHEMES, REDIS_SCHEMES, settings
from evaljobs.pipeline.progress import Progress
from evaljobs.pipeline.strategies import QUEUED
from evaljobs.redact import redact
from evaljobs.store import RunInfo, batches

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


def batch_idle_check(run_id: str) -> IdleCheck:
    """At a read with no new result: the run's open provider batches (what the run waits for)."""

    def check() -> str | None:
        found = batches.open_batches(run_id)
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

    from evaljobs.pipeline import rabbitmq  # start-up time, as above

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

    # start-up time: the status collector is loaded by a follower on Redis only
    from evaljobs.workers.status import read_queues

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


__all__ = ["IdleCheck", "follow_progress", "batch_idle_check", "queue_idle_check", "rabbitmq_idle_check"]
