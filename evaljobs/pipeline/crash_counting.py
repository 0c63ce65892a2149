"""Pairs that crash their worker: what evaljobs tells the generic crash counter.

:class:`evaljobs_middleware.crashes.CrashCounter` counts, per message, the
deliveries that started and never ended (the process died). This module says
what it counts (each ``evaluate_scenario`` pair; each ``evaluate_pairs`` batch
as a whole) and what happens to a pair that crashed ``Settings.max_crashes``
workers: it is recorded ``errored`` without running, so the barrier still
completes and the report names it (invariant 5). A batch that crashed its
workers is split: each missing pair goes on as a message of its own, with a
crash count of its own, since not every pair of the batch is the poison one.

The actors are reached through the broker's registry (``broker.get_actor``), so
this module and :mod:`evaljobs.pipeline.actors` do not import each other.
"""
from __future__ import annotations

import json
import threading
from typing import Any

import dramatiq
from evaljobs_middleware import crashes

from evaljobs import store
from evaljobs.config import Settings
from evaljobs.evaluation.result import Result
from evaljobs.pipeline import pair_path
from evaljobs.pipeline.messages import InvalidMessage, pair_args

#: ``json.dumps(item, separators=(",", ":"))`` without an encoder built per call (every counted message).
_compact = json.JSONEncoder(separators=(",", ":")).encode


def crash_key(run_id: str) -> str:
    """The Redis hash counting the crashes of a run's pairs (dropped when the run is finalized)."""
    return f"evaljobs:crashes:{run_id}"


def crash_counted(message: dramatiq.Message) -> tuple[str, str] | None:
    """What the crash counter counts: each ``evaluate_scenario`` pair, by run and [scenario, model(, epoch)];
    each ``evaluate_pairs`` batch, by run and ["batch", its pairs]."""
    if message.actor_name == "evaluate_pairs" and len(message.args) >= 2:
        run_id, pairs = message.args[:2]
        return crash_key(str(run_id)), _compact(["batch", pairs])
    if message.actor_name != "evaluate_scenario" or len(message.args) < 3:
        return None
    run_id, scenario_key, model = message.args[:3]
    epoch = message_epoch(message)
    item = [scenario_key, model, epoch] if epoch else [scenario_key, model]
    return crash_key(str(run_id)), _compact(item)


def message_epoch(message: dramatiq.Message) -> int:
    """The epoch of an ``evaluate_scenario`` message (positional, keyword, or 0)."""
    if len(message.args) > 3:
        return message.args[3]
    return message.kwargs.get("epoch", 0) if isinstance(message.kwargs, dict) else 0


def crashed_result(scenario_key: str, model: str, count: int, epoch: int = 0) -> Result:
    """The row a poison pair gets instead of one more crash."""
    return Result.errored(scenario_key, model,
                          f"crashed its worker {count} times (the process died while evaluating this pair); "
                          f"not evaluated again", attempts=count, epoch=epoch)


def batch_pairs(run_id: str, pairs: object) -> list[tuple[str, str, int]]:
    """The [scenario, model(, epoch)] items of an ``evaluate_pairs`` message, or :class:`InvalidMessage`."""
    if (not isinstance(pairs, list) or not pairs
            or not all(isinstance(p, (list, tuple)) and len(p) in (2, 3) for p in pairs)):
        raise InvalidMessage(
            f"run {run_id}: a batch must be a list of [scenario, model, epoch], not {pairs!r:.200}"
        )
    return [(str(p[0]), str(p[1]), p[2] if len(p) == 3 else 0) for p in pairs]


def give_up(broker: dramatiq.Broker, message: dramatiq.Message, count: int) -> None:
    """The crash counter's callback: record a pair that crashed ``count`` workers as errored.

    A message for a pair the run does not have raises, and the crash counter dead-letters it.
    """
    if message.actor_name == "evaluate_pairs":
        run_id, pairs = message.args[:2]
        wanted = batch_pairs(run_id, pairs)
        done = store.recorded_among(run_id, wanted)
        if len(done) == len(wanted):
            finalize = broker.get_actor("finalize_run")
            pair_path.barrier.resume(store.get_run(run_id), on_complete=lambda rid: finalize.send(rid))
        single = broker.get_actor("evaluate_scenario")
        for key, model, epoch in wanted:
            if (key, model, epoch) not in done:
                single.send_with_options(args=pair_args(run_id, key, model, epoch),
                                         **pair_path.pairs.pair_options(run_id))
        return
    run_id, scenario_key, model = message.args[:3]
    epoch = message_epoch(message)
    finalize = broker.get_actor("finalize_run")
    if store.is_recorded(run_id, scenario_key, model, epoch):
        pair_path.barrier.resume(store.get_run(run_id), on_complete=lambda rid: finalize.send(rid))
        return
    try:
        pair_path.barrier.record(run_id, crashed_result(scenario_key, model, count, epoch),
                       on_complete=lambda rid: finalize.send(rid))
    except (store.UnknownRun, store.UnexpectedPair) as exc:
        raise InvalidMessage(str(exc)) from None


def max_crashes(settings: Settings) -> int:
    """How many crashed workers a pair may cost before it is recorded as errored
    (``EVALJOBS_MAX_CRASHES``)."""
    return settings.crash_limit()


def crash_counter(settings: Settings) -> crashes.CrashCounter:
    """The crash-counting middleware for evaluation messages."""
    return crashes.CrashCounter(crash_counted, give_up, max_crashes=settings.crash_limit(),
                                companion=_Prefetch())


class _Prefetch:
    """The pair's permit prefetch (:class:`evaljobs.pipeline.prefetch.PermitPrefetch`, the crash counter's
    companion), made at the first counted message: every process that binds a broker builds this
    middleware, a Redis submitter too, and the prefetch plans pairs (the pair path: issue 42, item 3)."""

    def __init__(self) -> None:
        self._made: Any = None
        self._lock = threading.Lock()

    def _prefetch(self) -> Any:
        if self._made is None:
            with self._lock:
                if self._made is None:
                    self._made = pair_path.prefetch.PermitPrefetch()
        return self._made

    def queue(self, message: dramatiq.Message, pipe: Any) -> int:
        return self._prefetch().queue(message, pipe)

    def replies(self, message: dramatiq.Message, replies: list[Any]) -> None:
        self._prefetch().replies(message, replies)

    def done(self, message: dramatiq.Message) -> None:
        self._prefetch().done(message)


def forget(broker: dramatiq.Broker, run_id: str) -> None:
    """Drop a finalized run's crash counts (a no-op without Redis)."""
    crashes.forget(getattr(broker, "client", None), crash_key(run_id))


__all__ = [
    "batch_pairs",
    "crash_counted",
    "crash_counter",
    "crash_key",
    "crashed_result",
    "forget",
    "give_up",
    "max_crashes",
    "message_epoch",
]
