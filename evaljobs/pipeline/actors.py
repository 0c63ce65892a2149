"""The Dramatiq actors: ``start_run`` → ``evaluate_scenario`` × N×M×epochs → ``finalize_run``.

Messages carry ids only. The barrier is :func:`evaljobs.store.record_result`
(distinct persisted pairs, counted by the database) — never Dramatiq's
``GroupCallbacks``, which decrements once per successful message and so
completes early on a redelivery and never fires when a child fails.

Actors are declared per broker with :func:`declare`; the module keeps the
current binding so an actor can send its children (the one piece of
module-level state besides the database binding).
"""
from __future__ import annotations

import functools
import json
import logging
import random
from dataclasses import dataclass
from typing import Any, Callable

import dramatiq
from dramatiq.middleware import CurrentMessage, TimeLimitExceeded

from evaljobs_middleware import crashes

from evaljobs.config import Settings
from evaljobs.errors import ConfigurationError
from evaljobs.pipeline import barrier, runtime
from evaljobs import store
from evaljobs.pipeline.enqueue import enqueue_many
from evaljobs.evaluation.evaluate import evaluate, evaluate_with_retries
from evaljobs.evaluation.judge import bind_judge
from evaljobs.providers.governor import Busy
from evaljobs.providers.errors import RateLimited, TransientError
from evaljobs.evaluation.result import Result

logger = logging.getLogger("evaljobs.actors")

TERMINAL = ("complete", "partial", "failed", "cancelled")


class InvalidMessage(Exception):
    """A message that can never succeed (unknown run, scenario or model): dead-lettered, never retried."""


@dataclass
class Actors:
    start_run: dramatiq.Actor
    evaluate_scenario: dramatiq.Actor
    evaluate_model: dramatiq.Actor
    finalize_run: dramatiq.Actor
    queue: str


_bound: Actors | None = None


def bound() -> Actors:
    if _bound is None:
        raise RuntimeError("evaljobs actors are not declared on a broker; call evaljobs.pipeline.broker.configure()")
    return _bound


def _retries() -> int:
    message = CurrentMessage.get_current_message()
    return int(message.options.get("retries", 0)) if message is not None else 0


def _load(run_id: str, scenario_key: str | None = None, model: str | None = None):
    try:
        run = store.get_run(run_id)
    except store.UnknownRun as exc:
        raise InvalidMessage(str(exc)) from None
    return run, _check_pair(run, scenario_key, model)


def _check_pair(run: store.RunInfo, scenario_key: str | None, model: str | None):
    """The run's catalog, once the message's scenario and model are known to belong to the run."""
    catalog = store.load_snapshot(run.digest)
    if model is not None and model not in run.models:
        raise InvalidMessage(f"model '{model}' is not part of run {run.id} (models: {', '.join(run.models)})")
    if scenario_key is not None:
        try:
            catalog.scenario(scenario_key)
        except KeyError:
            raise InvalidMessage(f"scenario '{scenario_key}' is not in run {run.id}'s catalog") from None
    return catalog


def pair_args(run_id: str, scenario_key: str, model: str, epoch: int = 0) -> tuple:
    """The positional arguments of an ``evaluate_scenario`` message; the epoch only when it is not 0,
    so a single-epoch run's messages are what they were before epochs existed (and still understood)."""
    return (run_id, scenario_key, model, epoch) if epoch else (run_id, scenario_key, model)


def persist(run_id: str, result: Result) -> store.Recorded:
    """Record one result (the barrier) and, if it completed the run, send finalize — after commit."""
    return barrier.record(run_id, result, on_complete=lambda rid: bound().finalize_run.send(rid))


def start_run(run_id: str) -> None:
    """Mark the run running and enqueue every pair not yet persisted; never waits for them."""
    run, catalog = _load(run_id)
    if run.status in TERMINAL:
        logger.info("run %s is already %s; start_run does nothing", run_id, run.status)
        return
    store.mark_running(run_id)
    missing = store.missing_pairs(run_id)
    actors = bound()
    if not missing:
        actors.finalize_run.send(run_id)
        return
    if run.strategy == "per-model":
        for model in dict.fromkeys(model for _, model, _ in missing):
            actors.evaluate_model.send(run_id, model)
        return
    messages = [actors.evaluate_scenario.message(*pair_args(run_id, *pair)) for pair in missing]
    enqueue_many(actors.evaluate_scenario.broker, messages)


def evaluate_scenario(run_id: str, scenario_key: str, model: str, epoch: int = 0, rl: int = 0,
                      busy: int = 0) -> bool:
    """Evaluate one (scenario, model, epoch) and record it. A pair already recorded returns at once.

    True when the pair is recorded (by this call or before it); False when it was handed back
    to the queue or the run is cancelled. The crash counter uses it (see :func:`_settling`).
    """
    try:
        run, recorded = store.pair_state(run_id, scenario_key, model, epoch)  # one query
    except store.UnknownRun as exc:
        raise InvalidMessage(str(exc)) from None
    catalog = _check_pair(run, scenario_key, model)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < run.epochs:
        raise InvalidMessage(f"epoch {epoch!r} is not one of run {run.id}'s {run.epochs} epochs")
    if run.status == "cancelled" or recorded:
        return recorded
    settings = runtime.RunSettings.from_options(run.options)
    policy = runtime.policy(settings)
    runtime.set_permit_wait(None)  # short: a pair without a permit goes back to the queue
    retries = _retries()
    attempts = retries + 1
    scenario = catalog.scenario(scenario_key)
    try:
        spec = runtime.model_spec(model)
        adapter = runtime.adapter(settings.adapter, cache=bool(settings.cache))
        judge = _judge(run_id, settings, spec)
        result = evaluate(scenario, spec, adapter, judge=judge, attempts=attempts, raise_retryable=True,
                          time_limit=policy.time_limit, epoch=epoch,
                          cache_across_epochs=bool(settings.cache_across_epochs))
    except Busy as exc:
        # The governor has no permit for this deployment yet: hand the pair back to the queue with its
        # estimate instead of sleeping on this thread. Not a fault: no retry is used, no cap applies.
        delay_ms = int(max(exc.retry_in, 0.05) * 1000 * (1 + random.random() * policy.jitter))
        bound().evaluate_scenario.send_with_options(args=pair_args(run_id, scenario_key, model, epoch),
                                                     kwargs={"rl": rl, "busy": busy + 1}, delay=delay_ms)
        return False
    except RateLimited as exc:
        if rl < policy.max_rate_limit_waits:
            # A rate limit is not a fault: re-send with the provider's delay instead of sleeping on
            # this thread, and without touching the retry budget (``retries`` stays as it is).
            delay_ms = int(policy.rate_limit_delay(exc.retry_after) * 1000)
            bound().evaluate_scenario.send_with_options(args=pair_args(run_id, scenario_key, model, epoch),
                                                         kwargs={"rl": rl + 1, "busy": busy}, delay=delay_ms)
            return False
        result = Result.errored(scenario_key, model, f"still rate limited after {rl} waits: {exc.reason}",
                                attempts=attempts, epoch=epoch)
    except TransientError as exc:
        if retries < policy.max_retries:
            raise dramatiq.Retry(exc.reason) from None  # retried with backoff, logged without a traceback
        result = Result.errored(scenario_key, model, f"{exc.reason} (gave up after {attempts} attempts)",
                                attempts=attempts, epoch=epoch)
    except TimeLimitExceeded:
        result = Result.errored(scenario_key, model, f"timed out after {policy.time_limit:g} s", attempts=attempts,
                                epoch=epoch)
    except Exception as exc:  # noqa: BLE001 - the last attempt must still leave a row for the barrier
        if retries < policy.max_retries:
            raise
        result = Result.errored(scenario_key, model, f"{type(exc).__name__}: {exc}", attempts=attempts,
                                epoch=epoch)
    persist(run_id, result)
    return True


def evaluate_model(run_id: str, model: str) -> None:
    """The ``per-model`` shape: one message per model, its scenarios evaluated in order."""
    run, catalog = _load(run_id, None, model)
    if run.status == "cancelled":
        return
    settings = runtime.RunSettings.from_options(run.options)
    policy = runtime.policy(settings)
    spec = runtime.model_spec(model)
    adapter = runtime.adapter(settings.adapter, cache=bool(settings.cache))
    judge = _judge(run_id, settings, spec)
    runtime.set_permit_wait(60.0)  # one message runs the model's whole list: wait for permits in place
    for key, pair_model, epoch in store.missing_pairs(run_id):
        if pair_model != model:
            continue
        result = evaluate_with_retries(catalog.scenario(key), spec, adapter, policy=policy, judge=judge,
                                       epoch=epoch, cache_across_epochs=bool(settings.cache_across_epochs))
        persist(run_id, result)


def finalize_run(run_id: str) -> None:
    """Assemble the report exactly once; sending it twice is harmless."""
    try:
        outcome = barrier.finalize(run_id)
    except store.UnknownRun as exc:
        raise InvalidMessage(str(exc)) from None
    if outcome is None:
        logger.warning("finalize_run: run %s is not complete yet; recovery will finish it", run_id)
    else:
        crashes.forget(getattr(bound().finalize_run.broker, "client", None), crash_key(run_id))


def _judge(run_id: str, settings: runtime.RunSettings, spec):
    allow = None
    if settings.judge_cap is not None:
        cap = settings.judge_cap
        allow = lambda: store.take_judge_call(run_id, cap)  # noqa: E731
    return bind_judge(runtime.judge_for(settings, allow), spec)


def declare(broker: dramatiq.Broker, *, queue: str = "agents") -> Actors:
    """Declare the actors on ``broker`` (once per broker) and make that the current binding."""
    global _bound
    policy = runtime.policy()
    retry_options = {
        "max_retries": policy.max_retries,
        "min_backoff": int(policy.min_backoff * 1000),
        "max_backoff": int(policy.max_backoff * 1000),
        "throws": (InvalidMessage,),
    }
    time_limit = int((policy.time_limit + 30) * 1000)

    def make(fn: Callable[..., Any], **options: Any) -> dramatiq.Actor:
        name = fn.__name__
        if name in broker.actors:
            return broker.actors[name]
        return dramatiq.Actor(fn, broker=broker, actor_name=name, queue_name=queue, priority=0,
                              options={**retry_options, **options})

    _bound = Actors(
        start_run=make(start_run),
        evaluate_scenario=make(_settling(evaluate_scenario), time_limit=time_limit),
        evaluate_model=make(evaluate_model, time_limit=24 * 3600 * 1000),
        finalize_run=make(finalize_run),
        queue=queue,
    )
    return _bound




# -- pairs that crash their worker (see evaljobs_middleware.crashes) ----------------------------------


def crash_key(run_id: str) -> str:
    """The Redis hash counting the crashes of a run's pairs (dropped when the run is finalized)."""
    return f"evaljobs:crashes:{run_id}"


def crash_counted(message: dramatiq.Message) -> tuple[str, str] | None:
    """What the crash counter counts: each ``evaluate_scenario`` pair, by run and [scenario, model(, epoch)]."""
    if message.actor_name != "evaluate_scenario" or len(message.args) < 3:
        return None
    run_id, scenario_key, model = message.args[:3]
    epoch = _message_epoch(message)
    item = [scenario_key, model, epoch] if epoch else [scenario_key, model]
    return crash_key(str(run_id)), json.dumps(item, separators=(",", ":"))


def _message_epoch(message: dramatiq.Message) -> int:
    if len(message.args) > 3:
        return message.args[3]
    return message.kwargs.get("epoch", 0) if isinstance(message.kwargs, dict) else 0


def crashed_result(scenario_key: str, model: str, count: int, epoch: int = 0) -> Result:
    """The row a poison pair gets instead of one more crash."""
    return Result.errored(scenario_key, model,
                          f"crashed its worker {count} times (the process died while evaluating this pair); "
                          f"not evaluated again", attempts=count, epoch=epoch)


def give_up(broker: dramatiq.Broker, message: dramatiq.Message, count: int) -> None:
    """The crash counter's callback: record a pair that crashed ``count`` workers as errored.

    So the barrier still completes and the report names the pair (invariant 5). A message for
    a pair the run does not have raises, and the crash counter dead-letters it.
    """
    run_id, scenario_key, model = message.args[:3]
    epoch = _message_epoch(message)
    if store.is_recorded(run_id, scenario_key, model, epoch):
        return
    try:
        persist(run_id, crashed_result(scenario_key, model, count, epoch))
    except (store.UnknownRun, store.UnexpectedPair) as exc:
        raise InvalidMessage(str(exc)) from None


def max_crashes(settings: Settings) -> int:
    """How many crashed workers a pair may cost before it is recorded as errored (``EVALJOBS_MAX_CRASHES``)."""
    text = settings.max_crashes
    if text is None or not str(text).strip():
        return crashes.DEFAULT_MAX_CRASHES
    try:
        value = int(text)
    except ValueError:
        raise ConfigurationError(f"EVALJOBS_MAX_CRASHES={text!r} is not a whole number: set it to 1 or more") from None
    if value < 1:
        raise ConfigurationError(f"EVALJOBS_MAX_CRASHES={value} must be 1 or more")
    return value


def crash_counter(settings: Settings) -> crashes.CrashCounter:
    """The crash-counting middleware for ``evaluate_scenario`` messages."""
    return crashes.CrashCounter(crash_counted, give_up, max_crashes=max_crashes(settings))


def _settling(evaluate: Callable[..., bool]) -> Callable[..., None]:
    """The actor function: ``evaluate``, telling the crash counter when its pair is recorded.

    Returns None whatever ``evaluate`` returns: Dramatiq warns about an actor's return value
    unless a results backend is configured.
    """

    @functools.wraps(evaluate)
    def actor(*args: Any, **kwargs: Any) -> None:
        if evaluate(*args, **kwargs) is True:
            crashes.settled()

    return actor
