"""A pair's governor permit rides on round trips the worker makes anyway: the acquire on the crash
counter's (its first), the release on the result event's publish (its last).

Why: at zero provider latency a pair's Redis round trips are a large share of what it costs a
worker. The crash counter (:mod:`evaljobs_middleware.crashes`) makes one at the start of every
counted message, and the pair's first provider call makes another for its permit; this companion
puts the permit's acquire in the crash counter's pipeline, so the call finds its permit (or its place
in line) already there. Only when the governor's Redis is the broker's (the same server answers both),
the governor is on and the deployment's budget is not ``unbounded``.

The release: while a message is processed, the governor defers this thread's releases
(:mod:`evaljobs.governor.deferred`: sent before its next acquire, at the latest 50 ms
after the call, or at the message's end) and :func:`carried_releases` hands them to the result
event's publish (:mod:`evaljobs.pipeline.barrier`). Only when the events' Redis is the governor's.

What it trades: a message that makes no governed call after all (a pair already recorded, a
cancelled run, a cached answer, the later pairs of a batch) holds a permit from its start until its
end and gives it back then, one round trip it would not have made; a permit held before the call
counts as in flight for that time (the pair's set-up, milliseconds).
"""
from __future__ import annotations

import logging
import threading
from typing import Any

import dramatiq

from evaljobs.pipeline import context, events, runtime
from evaljobs.pipeline.pairs import RunPlan
from evaljobs.governor import Governor

logger = logging.getLogger(__name__)


class PermitPrefetch:
    """The crash counter's :class:`~evaljobs_middleware.crashes.Companion` for evaluation messages."""

    def __init__(self) -> None:
        self._pending = threading.local()

    def queue(self, message: dramatiq.Message, pipe: Any) -> int:
        self._pending.value = None
        model = _first_model(message)
        if model is None:
            return 0
        ctx = context.current()
        try:
            governor = ctx.governor()
            if governor is None or not ctx.shares_broker_redis():
                return 0
            if events.redis_url():
                governor.deferred.start()
                self._pending.value = (governor, None)
            # the run's providers (stored with it), as its calls use: the same budget, not this worker's
            plan = RunPlan.for_run(str(message.args[0]))
            budget = ctx.budget_for(runtime.run_providers(plan.settings), plan.spec(model))
            prefetch = governor.prefetch(budget, ctx.lane())
        except Exception as exc:  # noqa: BLE001 - a bad model or config is the actor's to report
            logger.debug("no permit prefetch for message %s: %s", message.message_id, exc)
            return 0
        if prefetch is None:
            return 0
        pipe.execute_command(*prefetch.command)
        self._pending.value = (governor, prefetch)
        return 1

    def replies(self, message: dramatiq.Message, replies: list[Any]) -> None:
        pending = getattr(self._pending, "value", None)
        if pending is not None and pending[1] is not None:
            governor, prefetch = pending
            governor.prefetched(prefetch, replies[0])

    def done(self, message: dramatiq.Message) -> None:
        pending = getattr(self._pending, "value", None)
        if pending is not None:
            self._pending.value = None
            pending[0].drop_prefetch()
            pending[0].deferred.stop()


class _Carried:
    """This thread's deferred releases, for the publish's pipeline (an :class:`events.Carry`)."""

    def __init__(self, governor: Governor) -> None:
        self._governor = governor
        self._taken: list = []

    def queue(self, pipe: Any) -> int:
        self._taken = self._governor.deferred.queue(pipe)
        return len(self._taken)

    def replies(self, replies: list[Any]) -> None:
        self._governor.deferred.replies(self._taken, replies)


def carried_releases() -> _Carried | None:
    """The governor's deferred releases to carry in a publish on this thread (None: nothing to carry)."""
    governor = context.current().existing_governor()
    return _Carried(governor) if governor is not None and governor.deferred.pending() else None


def _first_model(message: dramatiq.Message) -> str | None:
    """The model of the message's first pair (``evaluate_scenario`` or ``evaluate_pairs``), if any."""
    args = message.args
    if message.actor_name == "evaluate_scenario" and len(args) >= 3:
        return str(args[2])
    if message.actor_name == "evaluate_pairs" and len(args) >= 2:
        pairs = args[1]
        if isinstance(pairs, list) and pairs and isinstance(pairs[0], list) and len(pairs[0]) >= 2:
            return str(pairs[0][1])
    return None
