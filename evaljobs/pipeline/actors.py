"""The Dramatiq actors: ``start_run`` → ``evaluate_scenario`` × N×M×epochs → ``finalize_run``.

Messages carry ids only. The barrier is :func:`evaljobs.store.record_result`
(distinct persisted pairs, counted by the database) — never Dramatiq's
``GroupCallbacks``, which decrements once per successful message and so
completes early on a redelivery and never fires when a child fails.

Actors are declared per broker with :func:`declare`; the module keeps the
current binding so an actor can send its children (the one piece of
module-level state besides the database binding). Every process that binds a
broker declares them, a submitter too; what their bodies call (the pair path:
:mod:`~evaljobs.pipeline.pairs`, the barrier, batching) loads on first use
(:mod:`evaljobs.pipeline.pair_path`), in a worker (issue 42, item 3).
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dramatiq
from dramatiq.middleware import CurrentMessage
from evaljobs_middleware import crashes

from evaljobs import config, store
from evaljobs.evaluation.result import Result
from evaljobs.evaluation.retry import RetryPolicy
from evaljobs.pipeline import batch_choice, events, on_demand, pair_path
from evaljobs.pipeline.crash_counting import (  # noqa: F401
    batch_pairs,
    crash_counted,
    crash_counter,
    crash_key,
    crashed_result,
    give_up,
    max_crashes,
)
from evaljobs.pipeline.enqueue import enqueue_many
from evaljobs.pipeline.messages import InvalidMessage, pair_args

if TYPE_CHECKING:  # the pair path loads on first use (pair_path): a submitter declares these, runs none
    from evaljobs.pipeline.pairs import Pair, PairState, RunPlan

logger = logging.getLogger("evaljobs.actors")

TERMINAL = ("complete", "partial", "failed", "cancelled")
#: The most pairs one ``evaluate_pairs`` message may carry (``EVALJOBS_PAIRS_PER_MESSAGE`` is capped here).
MAX_PAIRS_PER_MESSAGE = 64
#: Message option: seconds a pair has spent in earlier attempts. The per-pair time limit spans a
#: pair's attempts but not the time a retry waits in the queue behind other work, so the spent
#: seconds (each machine's own ``time.monotonic()`` differences, never compared across machines)
#: travel with the message: Dramatiq's ``Retries`` re-enqueues the message it was processing,
#: options and all.
SPENT = "pair_spent"
#: Message option: the pair's provider requests so far, by outcome (its attempt log, carried across
#: hand-backs and retries so that a 429 handed back is still counted with its result).
CALLS = "pair_calls"


@dataclass
class Actors:
    start_run: dramatiq.Actor
    evaluate_scenario: dramatiq.Actor
    evaluate_pairs: dramatiq.Actor
    evaluate_model: dramatiq.Actor
    finalize_run: dramatiq.Actor
    collect_batch: dramatiq.Actor
    poll_batch: dramatiq.Actor
    queue: str


_bound: Actors | None = None


def bound() -> Actors:
    if _bound is None:
        raise RuntimeError(
            "evaljobs actors are not declared on a broker; call evaljobs.pipeline.broker.configure()"
        )
    return _bound


def persist(run_id: str, result: Result) -> store.Recorded:
    """Record one result (the barrier) and, if it completed the run, send finalize — after commit."""
    return pair_path.barrier.record(run_id, result, on_complete=_finalize)


def _finalize(run_id: str) -> None:
    bound().finalize_run.send(run_id)


def start_run(run_id: str) -> None:
    """Mark the run running and enqueue every pair not yet persisted; never waits for them."""
    run, plan = _plan(run_id)
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
    batch = min(int(plan.settings.pairs_per_message or 1), MAX_PAIRS_PER_MESSAGE)
    if batch > 1:  # a fast provider: several pairs a message (see evaluate_pairs)
        messages = [actors.evaluate_pairs.message_with_options(
            args=(run_id, [list(pair) for pair in missing[i:i + batch]]),
            **pair_path.pairs.pair_options(run_id, batch))
            for i in range(0, len(missing), batch)]
    else:
        options = pair_path.pairs.pair_options(run_id)
        messages = [actors.evaluate_scenario.message_with_options(args=pair_args(run_id, *pair), **options)
                    for pair in missing]
    enqueue_many(actors.evaluate_scenario.broker, messages)


def _plan(run_id: str) -> tuple[store.RunInfo, RunPlan]:
    """The run as it is now (its status) and its plan."""
    try:
        run = store.get_run(run_id)
    except store.UnknownRun as exc:
        raise InvalidMessage(str(exc)) from None
    return run, pair_path.pairs.RunPlan.for_run(run_id, run)


def _message_state(rl: int = 0, busy: int = 0) -> PairState:
    """The state a queued pair's message carries: its retries and spent time (options), its waits (kwargs)."""
    message = CurrentMessage.get_current_message()
    if message is None:  # called directly, not by a worker
        return pair_path.pairs.PairState(rate_limit_waits=rl, busy=busy)
    options = message.options
    calls = options.get(CALLS)
    return pair_path.pairs.PairState(retries=int(options.get("retries", 0)), rate_limit_waits=rl, busy=busy,
                                     spent=float(options.get(SPENT, 0.0)),
                                     calls={str(k): int(v) for k, v in calls.items()}
                                     if isinstance(calls, dict) else {})


def _send_back(pair: Pair, state: PairState, delay: float) -> None:
    """A pair goes (back) to the queue as a message of its own, due in ``delay`` s, carrying its state."""
    options = {SPENT: round(state.spent, 3), **pair_path.pairs.pair_options(pair.run_id)}
    if state.calls:
        options[CALLS] = dict(state.calls)
    bound().evaluate_scenario.send_with_options(args=pair.args(), kwargs={"rl": state.rate_limit_waits,
                                                                          "busy": state.busy},
                                                 delay=int(delay * 1000), retries=state.retries, **options)


def evaluate_scenario(run_id: str, scenario_key: str, model: str, epoch: int = 0, rl: int = 0,
                      busy: int = 0) -> bool:
    """Evaluate one (scenario, model, epoch) and record it. A pair already recorded returns at once.

    True when the pair is recorded (by this call or before it); False when it was handed back
    to the queue or the run is cancelled. The crash counter uses it (see :func:`_settling`).
    The outcome of :func:`evaljobs.pipeline.pairs.attempt` maps to Dramatiq: a hand-back is a
    delayed send (no retry used); a retry raises ``dramatiq.Retry`` with the pair's backoff, and
    Dramatiq's ``Retries`` middleware re-enqueues the message (its ``max_retries`` is the policy's).
    """
    try:
        run, recorded = store.pair_state(run_id, scenario_key, model, epoch)  # one query
    except store.UnknownRun as exc:
        raise InvalidMessage(str(exc)) from None
    pair = pair_path.pairs.Pair(run_id, scenario_key, model, epoch)
    pair_path.pairs.check(pair, run)
    if recorded:
        pair_path.barrier.resume(run, on_complete=_finalize)
    if run.status == "cancelled" or recorded:
        return recorded
    state = _message_state(rl, busy)
    outcome = pair_path.pairs.attempt(pair, state)
    if isinstance(outcome, (pair_path.pairs.Recorded, pair_path.pairs.GiveUp)):
        persist(run_id, outcome.result)
        return True
    if isinstance(outcome, pair_path.pairs.HandBack):
        _send_back(pair, state, outcome.delay)
        return False
    if isinstance(outcome, pair_path.pairs.Parked):
        return False  # its batch's poller sends it again once the batch has answered
    message = CurrentMessage.get_current_message()
    if message is not None:
        message.options[SPENT] = round(state.spent, 3)
        message.options[CALLS] = dict(state.calls)
        # The pair's retry budget may be its provider's (max_retries in the providers file), above the
        # actor's: Dramatiq's Retries must not drop a retry attempt() asked for.
        limit = message.options.get("max_retries", bound().evaluate_scenario.options.get("max_retries", 0))
        message.options["max_retries"] = max(int(limit), state.retries)
    # Dramatiq counts the retry (message option "retries"); logged without a traceback.
    raise dramatiq.Retry(outcome.reason, delay=int(outcome.backoff * 1000))


def evaluate_pairs(run_id: str, pairs: list) -> bool:
    """Several pairs of one run in one message, for a fast provider (``pairs_per_message`` > 1).

    At zero latency a Dramatiq message costs a worker more CPU than the provider call it carries,
    and each pair's transaction more than its insert. So a batch of [scenario, model, epoch]: the
    pairs already recorded are skipped (a redelivered batch evaluates only its missing pairs), the
    others are evaluated one after another and go to the store in one group commit
    (:func:`evaljobs.store.record_results`) — each still its own row, uniqueness check and barrier
    count. A pair turned away (no permit, rate limited, a failure with retries left) leaves the
    batch as a message of its own, its state carried, so one pair's failure neither retries nor
    holds up the others. What it trades: a worker that dies mid-batch loses the evaluations it had
    not committed (they are done again on redelivery), and results arrive in groups (BENCHMARKS.md,
    the raw-stack section).
    """
    wanted = batch_pairs(run_id, pairs)
    try:
        run, _ = store.pair_state(run_id, *wanted[0])
    except store.UnknownRun as exc:
        raise InvalidMessage(str(exc)) from None
    batch = [pair_path.pairs.Pair(run_id, key, model, epoch) for key, model, epoch in wanted]
    plan = pair_path.pairs.RunPlan.for_run(run_id, run)
    for pair in batch:
        plan.check(pair)
    if run.status == "cancelled":
        return False
    done = store.recorded_among(run_id, wanted)
    if len(done) == len(wanted):
        pair_path.barrier.resume(run, on_complete=_finalize)
    retries = _message_state().retries
    results: list[Result] = []
    try:
        for pair in batch:
            if (pair.scenario_key, pair.model, pair.epoch) in done:
                continue
            state = pair_path.pairs.PairState(retries=retries)
            outcome = pair_path.pairs.attempt(pair, state)
            if isinstance(outcome, (pair_path.pairs.Recorded, pair_path.pairs.GiveUp)):
                results.append(outcome.result)
            elif isinstance(outcome, pair_path.pairs.Parked):
                continue  # its batch's poller sends it again
            else:
                delay = outcome.delay if isinstance(outcome, pair_path.pairs.HandBack) else outcome.backoff
                _send_back(pair, state, delay)
    finally:  # what was evaluated is kept, also when the batch is cut short (a time limit, a crash of code)
        if results:
            pair_path.barrier.record_many(run_id, results, on_complete=_finalize)
    return len(done) + len(results) == len(wanted)


def evaluate_model(run_id: str, model: str) -> None:
    """The ``per-model`` shape: one message per model, its scenarios evaluated in order, in place."""
    run, _ = _plan(run_id)
    if model not in run.models:
        raise InvalidMessage(f"model '{model}' is not part of run {run_id} (models: {', '.join(run.models)})")
    if run.status == "cancelled":
        return
    missing = [(key, epoch) for key, pair_model, epoch in store.missing_pairs(run_id) if pair_model == model]
    if not missing:
        pair_path.barrier.resume(store.get_run(run_id), on_complete=_finalize)
    for key, epoch in missing:
        persist(run_id, pair_path.strategies.settle(pair_path.pairs.Pair(run_id, key, model, epoch)))


def pair_abandoned(message: dict, retries: dict) -> None:
    """A pair message Dramatiq retried out ends as rows: each of its pairs not yet recorded, ``errored``.

    Dramatiq's ``Retries`` sends this (the evaluation actors' ``on_retry_exhausted``) once a message
    failed its last retry, for whatever reason it kept failing (a result the database refused to
    insert, a bug): without it the pair had no row and the run stayed ``running`` for ever
    (invariant 13). The reason is the last line of the last failure.
    """
    name, args = message.get("actor_name"), list(message.get("args") or [])
    options = message.get("options") or {}
    lines = [line for line in str(options.get("traceback") or "").splitlines() if line.strip()]
    cause = lines[-1].strip()[:500] if lines else "it kept failing"
    deliveries = int(retries.get("retries", 0)) + 1
    reason = f"Dramatiq gave up on the pair's message after {deliveries} deliveries: {cause}"
    if name == "evaluate_scenario" and len(args) >= 3:
        kwargs = message.get("kwargs") or {}
        epoch = args[3] if len(args) > 3 else kwargs.get("epoch", 0)
        wanted = [(str(args[1]), str(args[2]), epoch)]
    elif name == "evaluate_pairs" and len(args) >= 2:
        wanted = batch_pairs(str(args[0]), args[1])
    else:
        logger.warning("Dramatiq gave up on a %s message; it carries no pair to record", name)
        return
    run_id = str(args[0])
    done = store.recorded_among(run_id, wanted)
    if len(done) == len(wanted):
        pair_path.barrier.resume(store.get_run(run_id), on_complete=_finalize)
    for key, model, epoch in wanted:
        if (key, model, epoch) not in done:
            try:
                persist(run_id, Result.errored(key, model, reason, attempts=deliveries, epoch=epoch))
            except (store.UnknownRun, store.UnexpectedPair) as exc:
                raise InvalidMessage(str(exc)) from None
def collect_batch(run_id: str, provider: str, model: str) -> None:
    """Submit a batch run's parked requests of one provider and model
    (:func:`evaljobs.pipeline.batching.collect`)."""
    on_demand.batching.collect(run_id, provider, model)


def poll_batch(key: str) -> None:
    """Look at one provider batch; sends itself again, delayed, until the batch ends (never sleeps)."""
    on_demand.batching.poll(key)


class BatchSender:
    """The messages :mod:`evaljobs.pipeline.batching` continues with (bound by :func:`declare`)."""

    def collect(self, run_id: str, provider: str, model: str, delay: float) -> None:
        bound().collect_batch.send_with_options(args=(run_id, provider, model), delay=int(delay * 1000))

    def poll(self, key: str, delay: float) -> None:
        bound().poll_batch.send_with_options(args=(key,), delay=int(delay * 1000))

    def evaluate(self, run_id: str, pairs: list[tuple[str, str, int]]) -> None:
        actors = bound()
        options = pair_path.pairs.pair_options(run_id)
        enqueue_many(actors.evaluate_scenario.broker,
                     [actors.evaluate_scenario.message_with_options(args=pair_args(run_id, *pair), **options)
                      for pair in pairs])


def finalize_run(run_id: str) -> None:
    """Assemble the report exactly once; sending it twice is harmless."""
    try:
        outcome = pair_path.barrier.finalize(run_id)
    except store.UnknownRun as exc:
        raise InvalidMessage(str(exc)) from None
    if outcome is None:
        logger.warning("finalize_run: run %s is not complete yet; recovery will finish it", run_id)
    else:
        crashes.forget(getattr(bound().finalize_run.broker, "client", None), crash_key(run_id))


def actor_options(policy: RetryPolicy) -> dict[str, Any]:
    """Dramatiq's actor options (``max_retries``, ``min_backoff`` …, in its units) from the run options that
    set one (``evaljobs.config.RUN_OPTIONS``); a message's own options win, as Dramatiq resolves them."""
    return {o.actor_option: o.dramatiq_value(getattr(policy, o.name)) for o in config.RUN_LIMITS
            if o.actor_option}


def declare(broker: dramatiq.Broker, *, queue: str = "agents") -> Actors:
    """Declare the actors on ``broker`` (once per broker) and make that the current binding."""
    global _bound
    policy = RetryPolicy.from_settings()  # this process's limits (a run's own travel with its messages)
    retry_options: dict[str, Any] = {
        **actor_options(policy),
        # A database that refuses writes (a full disk) fails the message once, logged in one line:
        # retrying would only repeat the provider call and the failure (a retry storm); the pair
        # stays missing and `evaljobs recover` re-sends it once space is freed.
        "throws": (InvalidMessage, store.StorageFailed),
    }
    # Each pair message carries its run's (pair_options); this is for a message sent without it.
    time_limit = config.run_option("time_limit").dramatiq_value(policy.time_limit)

    def make(fn: Callable[..., Any], **options: Any) -> dramatiq.Actor:
        name = fn.__name__
        if name in broker.actors:
            return broker.actors[name]
        return dramatiq.Actor(fn, broker=broker, actor_name=name, queue_name=queue, priority=0,
                              options={**retry_options, **options})

    # Every pair ends (invariant 13): a pair message Dramatiq retries out is recorded errored.
    abandoned = make(pair_abandoned)
    ends = {"on_retry_exhausted": abandoned.actor_name}
    _bound = Actors(
        start_run=make(start_run),
        evaluate_scenario=make(_settling(evaluate_scenario), time_limit=time_limit, **ends),
        # A batch's pairs each have their own deadline; this one backs them all (runs cap a batch).
        evaluate_pairs=make(_settling(evaluate_pairs), time_limit=time_limit * MAX_PAIRS_PER_MESSAGE, **ends),
        evaluate_model=make(evaluate_model, time_limit=24 * 3600 * 1000),
        finalize_run=make(finalize_run),
        collect_batch=make(collect_batch),
        poll_batch=make(poll_batch),
        queue=queue,
    )
    batch_choice.bind_sender(BatchSender())
    return _bound


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
