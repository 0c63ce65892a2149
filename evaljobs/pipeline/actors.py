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
import time
from dataclasses import dataclass
from typing import Any, Callable

import dramatiq
from dramatiq.common import compute_backoff
from dramatiq.middleware import CurrentMessage, TimeLimitExceeded

from evaljobs_middleware import crashes

from evaljobs.config import Settings
from evaljobs.errors import ConfigurationError
from evaljobs.pipeline import barrier, events, runtime
from evaljobs.pipeline.attempts import SPENT, remember_spent, spent
from evaljobs import store
from evaljobs.pipeline.enqueue import enqueue_many
from evaljobs.pipeline.prefetch import PermitPrefetch
from evaljobs.evaluation.evaluate import evaluate, evaluate_with_retries, timed_out
from evaljobs.evaluation.judge import bind_judge
from evaljobs.governor import Busy
from evaljobs.providers.errors import RateLimited, TransientError
from evaljobs.evaluation.result import Result

logger = logging.getLogger("evaljobs.actors")

TERMINAL = ("complete", "partial", "failed", "cancelled")
#: The most pairs one ``evaluate_pairs`` message may carry (``EVALJOBS_PAIRS_PER_MESSAGE`` is capped here).
MAX_PAIRS_PER_MESSAGE = 64


class InvalidMessage(Exception):
    """A message that can never succeed (unknown run, scenario or model): dead-lettered, never retried."""


@dataclass
class Actors:
    start_run: dramatiq.Actor
    evaluate_scenario: dramatiq.Actor
    evaluate_pairs: dramatiq.Actor
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
    batch = min(int(runtime.RunSettings.from_options(run.options).pairs_per_message or 1), MAX_PAIRS_PER_MESSAGE)
    if batch > 1:  # a fast provider: several pairs a message (see evaluate_pairs)
        messages = [actors.evaluate_pairs.message(run_id, [list(pair) for pair in missing[i:i + batch]])
                    for i in range(0, len(missing), batch)]
    else:
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
    runtime.set_permit_wait(None)  # short: a pair without a permit goes back to the queue
    result = _evaluate_pair(run_id, catalog, scenario_key, model, epoch, settings, retries=_retries(), rl=rl,
                            busy=busy)
    if result is None:
        return False
    persist(run_id, result)
    return True


def _evaluate_pair(run_id: str, catalog, scenario_key: str, model: str, epoch: int, settings: runtime.RunSettings,
                   *, retries: int, rl: int = 0, busy: int = 0, alone: bool = True) -> Result | None:
    """One pair's result, or None when it was handed back to the queue (no permit yet, rate limited).

    ``alone``: the pair has a message of its own, whose retries are its retries (a transient failure
    with retries left raises, and Dramatiq retries the message). In a batch (``alone=False``) such a
    pair leaves the batch instead: it is sent on as a message of its own, its retry count carried, so
    one pair's failure neither retries nor holds up the others.
    """
    policy = runtime.policy(settings)
    attempts = retries + 1
    scenario = catalog.scenario(scenario_key)
    carried = {} if alone else {"retries": retries}
    # When the pair would have started had its attempts run back to back (see pipeline.attempts).
    began = time.monotonic() - (spent() if alone else 0.0)
    deadline = began + policy.time_limit if policy.time_limit else None
    try:
        spec = runtime.model_spec(model)
        adapter = runtime.adapter(settings.adapter, cache=bool(settings.cache))
        judge = _judge(run_id, settings, spec)
        while True:
            try:
                return evaluate(scenario, spec, adapter, judge=judge, attempts=attempts, raise_retryable=True,
                                time_limit=policy.time_limit, epoch=epoch,
                                cache_across_epochs=bool(settings.cache_across_epochs), deadline=deadline,
                                pair_started=began)
            except RateLimited as exc:
                if rl >= policy.max_rate_limit_waits or not _wait_in_place(exc, policy):
                    raise
                rl += 1  # waited out a short Retry-After on this thread: evaluate again at once
    except Busy as exc:
        # The governor has no permit for this deployment yet: hand the pair back to the queue with its
        # estimate instead of sleeping on this thread. Not a fault: no retry is used, no cap applies.
        delay_ms = int(max(exc.retry_in, 0.05) * 1000 * (1 + random.random() * policy.jitter))
        bound().evaluate_scenario.send_with_options(args=pair_args(run_id, scenario_key, model, epoch),
                                                     kwargs={"rl": rl, "busy": busy + 1}, delay=delay_ms,
                                                     **carried)
        return None
    except RateLimited as exc:
        if rl < policy.max_rate_limit_waits:
            # A rate limit is not a fault: re-send with the provider's delay instead of sleeping on
            # this thread, and without touching the retry budget (``retries`` stays as it is).
            delay_ms = int(policy.rate_limit_delay(exc.retry_after) * 1000)
            bound().evaluate_scenario.send_with_options(args=pair_args(run_id, scenario_key, model, epoch),
                                                         kwargs={"rl": rl + 1, "busy": busy}, delay=delay_ms,
                                                         **carried)
            return None
        return Result.errored(scenario_key, model, f"still rate limited after {rl} waits: {exc.reason}",
                              attempts=attempts, epoch=epoch)
    except TransientError as exc:
        if deadline is not None and time.monotonic() >= deadline - 0.01:
            return Result.errored(scenario_key, model, timed_out(policy.time_limit, began, exc.reason),
                                  attempts=attempts, epoch=epoch)
        if retries < policy.max_retries:
            if not alone:
                return _on_its_own(run_id, scenario_key, model, epoch, retries, policy, time.monotonic() - began)
            remember_spent(time.monotonic() - began)
            raise dramatiq.Retry(exc.reason) from None  # retried with backoff, logged without a traceback
        return Result.errored(scenario_key, model, f"{exc.reason} (gave up after {attempts} attempts)",
                              attempts=attempts, epoch=epoch)
    except TimeLimitExceeded:
        # Dramatiq's own limit (time limit + 30 s) is only a backstop now: the wall in
        # evaljobs.providers.deadline ends every network wait by the pair's deadline.
        return Result.errored(scenario_key, model, timed_out(policy.time_limit, began, "Dramatiq's time limit"),
                              attempts=attempts, epoch=epoch)
    except Exception as exc:  # noqa: BLE001 - the last attempt must still leave a row for the barrier
        if retries < policy.max_retries:
            if not alone:
                logger.warning("pair %s x %s (epoch %s) of run %s failed in a batch (%s: %s); retried on its own",
                               scenario_key, model, epoch, run_id, type(exc).__name__, exc)
                return _on_its_own(run_id, scenario_key, model, epoch, retries, policy, time.monotonic() - began)
            remember_spent(time.monotonic() - began)
            raise
        return Result.errored(scenario_key, model, f"{type(exc).__name__}: {exc}", attempts=attempts,
                              epoch=epoch)


def _on_its_own(run_id: str, scenario_key: str, model: str, epoch: int, retries: int, policy: Any,
                spent: float = 0.0) -> None:
    """Send a batch's failed pair as its own message, one retry used, after Dramatiq's backoff."""
    delay_ms = int(compute_backoff(retries, factor=int(policy.min_backoff * 1000),
                                   max_backoff=int(policy.max_backoff * 1000))[1])
    bound().evaluate_scenario.send_with_options(args=pair_args(run_id, scenario_key, model, epoch),
                                                 delay=delay_ms, retries=retries + 1, **{SPENT: round(spent, 3)})
    return None


def evaluate_pairs(run_id: str, pairs: list) -> bool:
    """Several pairs of one run in one message, for a fast provider (``pairs_per_message`` > 1).

    At zero latency a Dramatiq message costs a worker more CPU than the provider call it carries,
    and each pair's transaction more than its insert. So a batch of [scenario, model, epoch]: the
    pairs already recorded are skipped (a redelivered batch evaluates only its missing pairs), the
    others are evaluated one after another and go to the store in one group commit
    (:func:`evaljobs.store.record_results`) — each still its own row, uniqueness check and barrier
    count. A pair turned away (no permit, rate limited, a transient failure with retries left)
    leaves the batch as a message of its own. What it trades: a worker that dies mid-batch loses
    the evaluations it had not committed (they are done again on redelivery), and results arrive
    in groups (BENCHMARKS.md, the raw-stack section).
    """
    wanted = _batch_pairs(run_id, pairs)
    try:
        run, _ = store.pair_state(run_id, *wanted[0])
    except store.UnknownRun as exc:
        raise InvalidMessage(str(exc)) from None
    catalog = _check_pair(run, None, None)
    for key, model, epoch in wanted:
        _check_pair_in(run, catalog, key, model, epoch)
    if run.status == "cancelled":
        return False
    done = store.recorded_among(run_id, wanted)
    settings = runtime.RunSettings.from_options(run.options)
    runtime.set_permit_wait(None)
    retries = _retries()
    results: list[Result] = []
    try:
        for key, model, epoch in wanted:
            if (key, model, epoch) not in done:
                result = _evaluate_pair(run_id, catalog, key, model, epoch, settings, retries=retries, alone=False)
                if result is not None:
                    results.append(result)
    finally:  # what was evaluated is kept, also when the batch is cut short (a time limit, a crash of code)
        if results:
            barrier.record_many(run_id, results, on_complete=lambda rid: bound().finalize_run.send(rid))
    return len(done) + len(results) == len(wanted)


def _batch_pairs(run_id: str, pairs: Any) -> list[tuple[str, str, int]]:
    if (not isinstance(pairs, list) or not pairs
            or not all(isinstance(p, (list, tuple)) and len(p) in (2, 3) for p in pairs)):
        raise InvalidMessage(f"run {run_id}: a batch must be a list of [scenario, model, epoch], not {pairs!r:.200}")
    return [(str(p[0]), str(p[1]), p[2] if len(p) == 3 else 0) for p in pairs]


def _check_pair_in(run: store.RunInfo, catalog, scenario_key: str, model: str, epoch: Any) -> None:
    if model not in run.models:
        raise InvalidMessage(f"model '{model}' is not part of run {run.id} (models: {', '.join(run.models)})")
    try:
        catalog.scenario(scenario_key)
    except KeyError:
        raise InvalidMessage(f"scenario '{scenario_key}' is not in run {run.id}'s catalog") from None
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < run.epochs:
        raise InvalidMessage(f"epoch {epoch!r} is not one of run {run.id}'s {run.epochs} epochs")


def _wait_in_place(exc: RateLimited, policy) -> bool:
    """Whether a pair answered 429 waits out its ``Retry-After`` on this thread (then True) or goes back.

    A short wait (within the permit wait, 2 s by default, the same a pair may wait for a permit)
    is spent here: a re-sent message would be due on time but then queue behind the pairs the
    workers already fetched (up to two per thread), so it came back 2.5-3.5 s after a
    ``Retry-After: 1`` and became the run's tail. With the governor on, nothing is slept here:
    the 429 paused the budget until ``Retry-After`` and the next permit request waits for
    exactly that, first in line (it queued before the calls that arrived during the pause).
    Without it, the wait is ``Retry-After`` plus at most ``policy.jitter`` (5 %).
    """
    wait = exc.retry_after
    if wait is None or wait < 0 or wait > runtime.permit_wait():
        return False
    if runtime.governor() is None:
        time.sleep(policy.rate_limit_delay(wait))
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
        # A database that refuses writes (a full disk) fails the message once, logged in one line:
        # retrying would only repeat the provider call and the failure (a retry storm); the pair
        # stays missing and `evaljobs recover` re-sends it once space is freed.
        "throws": (InvalidMessage, store.StorageFailed),
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
        # A batch's pairs each have their own deadline; this one backs them all (runs cap a batch).
        evaluate_pairs=make(_settling(evaluate_pairs), time_limit=time_limit * MAX_PAIRS_PER_MESSAGE),
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
    """What the crash counter counts: each ``evaluate_scenario`` pair, by run and [scenario, model(, epoch)];
    each ``evaluate_pairs`` batch, by run and ["batch", its pairs]."""
    if message.actor_name == "evaluate_pairs" and len(message.args) >= 2:
        run_id, pairs = message.args[:2]
        return crash_key(str(run_id)), json.dumps(["batch", pairs], separators=(",", ":"))
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
    if message.actor_name == "evaluate_pairs":
        # Not every pair of a batch that crashed its workers is the poison one: each missing pair goes
        # on as a message of its own, with a crash count of its own.
        run_id, pairs = message.args[:2]
        wanted = _batch_pairs(run_id, pairs)
        done = store.recorded_among(run_id, wanted)
        for key, model, epoch in wanted:
            if (key, model, epoch) not in done:
                bound().evaluate_scenario.send(*pair_args(run_id, key, model, epoch))
        return
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
    return crashes.CrashCounter(crash_counted, give_up, max_crashes=max_crashes(settings),
                                companion=PermitPrefetch())


def _hold_results_for_ack() -> None:
    """In a worker processing this message, on a broker whose acks can carry them: the message's
    result events go out with its ack (one Redis round trip fewer a pair; see events.hold_results)."""
    if CurrentMessage.get_current_message() is None:
        return  # called directly, not by a worker: nothing would ack it
    carries = getattr(bound().evaluate_scenario.broker, "acks_carry_events", None)
    if carries is not None and carries():
        events.hold_results()


def _settling(evaluate: Callable[..., bool]) -> Callable[..., None]:
    """The actor function: ``evaluate``, telling the crash counter when its pair is recorded.

    Returns None whatever ``evaluate`` returns: Dramatiq warns about an actor's return value
    unless a results backend is configured.
    """

    @functools.wraps(evaluate)
    def actor(*args: Any, **kwargs: Any) -> None:
        _hold_results_for_ack()
        if evaluate(*args, **kwargs) is True:
            crashes.settled()

    return actor
