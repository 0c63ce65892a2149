"""The pair runner: what one (scenario, model, epoch) pair of a run needs, and the one decision on it.

Every strategy evaluates pairs the same way and differs only in what it does
with the answer:

* :meth:`RunPlan.for_run` resolves once per run (cached per process) what every
  pair of it needs: the catalog snapshot, the run's settings, the retry policy,
  the adapter, the judge with its cap, and the model specs.
* :func:`check` validates a pair against its run in one place (a message naming
  an unknown run, scenario, model or epoch raises :class:`InvalidMessage`).
* :func:`attempt` is the one decision function: it evaluates the pair once and
  says what happens next — :class:`Recorded` (a result to persist),
  :class:`HandBack` (not a fault: come back after ``delay``), :class:`Retry`
  (a fault with retries left: come back after ``backoff``) or :class:`GiveUp`
  (the errored result to persist). What the pair has been through travels in
  an explicit :class:`PairState`.

The strategies only map an outcome to their mechanism: an in-process strategy
sleeps (:func:`evaljobs.pipeline.strategies.settle`); the Dramatiq actor sends
the pair back with a delay or raises ``dramatiq.Retry``; a message carrying
several pairs sends a turned-away pair on as a message of its own
(:mod:`evaljobs.pipeline.actors`). No other module retries or sleeps on a
provider's behalf (``tests/system/test_architecture.py`` checks).
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dramatiq.middleware import TimeLimitExceeded

from evaljobs import config, store
from evaljobs.catalog import Catalog
from evaljobs.catalog.modelspec import ModelSpec
from evaljobs.evaluation.adapters import Adapter
from evaljobs.evaluation.evaluate import evaluate, timed_out
from evaljobs.evaluation.grading import Judge
from evaljobs.evaluation.judge import ProviderJudge, bind_judge
from evaljobs.evaluation.result import Result
from evaljobs.evaluation.retry import RetryPolicy
from evaljobs.governor import Busy
from evaljobs.pipeline import context, runtime
from evaljobs.pipeline.messages import InvalidMessage, pair_args
from evaljobs.providers import InBatch, RateLimited, TransientError, for_pair
from evaljobs.providers import attempts as provider_attempts
from evaljobs.tools.roots import catalog_root

logger = logging.getLogger("evaljobs.pairs")

#: How long a pair evaluated in place (no queue to hand it back to) waits for a governor permit.
IN_PLACE_PERMIT_WAIT = 60.0
#: Runs whose plans a process keeps (a worker serves a few runs at a time; the oldest is dropped).
PLANS_KEPT = 32
#: Seconds Dramatiq's own time limit (a backstop: the pair's deadline ends its waits) allows past a pair's
#: (the ``time_limit`` run option's ``backstop``).
BACKSTOP = config.run_option("time_limit").backstop


@dataclass(frozen=True)
class Pair:
    """One (scenario, model, epoch) of a run: the unit every strategy evaluates and records."""

    run_id: str
    scenario_key: str
    model: str
    epoch: int = 0

    def args(self) -> tuple:
        """The positional arguments of its ``evaluate_scenario`` message (see :func:`pair_args`)."""
        return pair_args(self.run_id, self.scenario_key, self.model, self.epoch)


def pair_options(run_id: str, pairs: int = 1, run: store.RunInfo | None = None) -> dict[str, Any]:
    """The options of a message carrying ``pairs`` pairs of ``run_id``: Dramatiq's time limit (a backstop,
    :data:`BACKSTOP` past each pair's), from the time limit stored with the run, not the worker's own.

    ``run``: its row, when the caller has it (recovery): read from its options, no plan built (a run
    whose snapshot cannot be loaded must not stop the recovery of the others).
    """
    if run is not None:
        policy = runtime.policy(runtime.RunSettings.from_options(run.options))
    else:
        policy = RunPlan.for_run(run_id).policy
    return {o.message_option: o.dramatiq_value(getattr(policy, o.name), pairs) for o in config.RUN_LIMITS
            if o.message_option}


# -- the run's plan -------------------------------------------------------------------------------------


@dataclass
class RunPlan:
    """What every pair of a run needs, resolved once per run and process.

    Built from the run's stored row (its snapshot digest, models, epochs and options) and this
    process's settings and worker context; a plan whose run row, settings or context no longer
    match is rebuilt (:meth:`for_run`).
    """

    run: store.RunInfo
    catalog: Catalog
    settings: runtime.RunSettings
    policy: RetryPolicy
    #: What the plan was built under: replaced settings or a new worker context make a new plan.
    built_for: tuple = ()
    _adapter: Adapter | None = field(default=None, repr=False)
    _judge: ProviderJudge | None = field(default=None, repr=False)
    _specs: dict[str, ModelSpec] = field(default_factory=dict, repr=False)
    _judges: dict[str, Judge | None] = field(default_factory=dict, repr=False)

    @classmethod
    def for_run(cls, run_id: str, run: store.RunInfo | None = None) -> RunPlan:
        """The plan of ``run_id`` (``run``: its row, when the caller just read it; else it is read).

        A run's snapshot, models, epochs and options never change once it is created, so a cached
        plan is trusted without a query; given the row, it is also checked against it (another
        database may hold a run of the same id).

        Cached per process: a worker evaluates thousands of pairs of a few runs, and loading the
        snapshot, adapter and judge per pair was most of a fast pair's CPU.
        """
        built_for = (config.settings(), context.current())
        with _plans_lock:
            plan = _plans.get(run_id)
            if plan is not None and plan.built_for[0] is built_for[0] and plan.built_for[1] is built_for[1] \
                    and (run is None or _same_run(plan.run, run)):
                _plans.move_to_end(run_id)
                return plan
        if run is None:
            try:
                run = store.get_run(run_id)
            except store.UnknownRun as exc:
                raise InvalidMessage(str(exc)) from None
        plan = cls._build(run, built_for)
        with _plans_lock:
            _plans[run_id] = plan
            while len(_plans) > PLANS_KEPT:
                _plans.popitem(last=False)
        return plan

    @classmethod
    def _build(cls, run: store.RunInfo, built_for: tuple) -> RunPlan:
        settings = runtime.RunSettings.from_options(run.options)
        policy = runtime.policy(settings)
        own = runtime.policy()
        if policy != own:  # the run's limits win over this process's: said (per plan built), never silently
            differ = [f"{name} {getattr(policy, name):g} (this process: {getattr(own, name):g})"
                      for name in (o.name for o in config.RUN_LIMITS)
                      if getattr(policy, name) != getattr(own, name)]
            logger.info("run %s: the limits stored with it apply: %s", run.id, ", ".join(differ))
        return cls(run=run, catalog=store.load_snapshot(run.digest), settings=settings,
                   policy=policy, built_for=built_for)

    # The adapter, the judge and the model specs are resolved on a pair's first attempt, inside it:
    # a run whose adapter or providers file cannot be loaded errors its pairs (each gets a row and
    # the barrier fires) instead of failing the message that checks them.

    def adapter(self) -> Adapter:
        """The run's adapter (with the response cache in front for a run with ``--cache``; its calls
        through provider batches for a batch run)."""
        if self._adapter is None:
            self._adapter = runtime.adapter(self.settings.adapter, cache=bool(self.settings.cache),
                                            batch=self.settings.batch or (),
                                            providers_config=runtime.run_providers(self.settings))
        return self._adapter

    def spec(self, model: str) -> ModelSpec:
        """The model spec of one of the run's models (parsed against the providers file once)."""
        found = self._specs.get(model)
        if found is None:
            found = self._specs[model] = runtime.model_spec(model, runtime.run_providers(self.settings))
        return found

    def limit(self, name: str, model: str) -> Any:
        """A per-pair limit for ``model``'s pairs: its provider entry's value (in the providers the run was
        submitted with) where the run option names a providers-file key that overrides it
        (``RunOption.providers_key``), else the run's policy."""
        key = config.run_option(name).providers_key
        if key is not None:
            override = getattr(runtime.run_providers(self.settings).get(self.spec(model).provider), key)
            if override is not None:
                return override
        return getattr(self.policy, name)

    def max_retries(self, model: str) -> int:
        """Retries after a transient fault for ``model``'s pairs: its provider entry's ``max_retries``, else
        the policy's (``EVALJOBS_MAX_RETRIES``)."""
        return int(self.limit("max_retries", model))

    def max_retry_after(self, model: str) -> float:
        """The longest ``Retry-After`` ``model``'s pairs wait for (its provider entry's
        ``max_retry_after``)."""
        return runtime.run_providers(self.settings).get(self.spec(model).provider).max_retry_after

    def judge_for(self, spec: ModelSpec) -> Judge | None:
        """The run's judge for pairs of ``spec`` (the model under test is context, never the judge)."""
        found = self._judges.get(spec.spec, _MISSING)
        if found is _MISSING:
            if self._judge is None:
                allow: Callable[[], bool] | None = None
                release: Callable[[], None] | None = None
                if self.settings.judge_cap is not None:
                    run_id, cap = self.run.id, self.settings.judge_cap

                    def take_judge_call() -> bool:
                        return store.take_judge_call(run_id, cap)

                    def release_judge_call() -> None:
                        store.release_judge_call(run_id)

                    allow, release = take_judge_call, release_judge_call
                self._judge = runtime.judge_for(self.settings, allow, release)
            found = self._judges[spec.spec] = bind_judge(self._judge, spec)
        return found  # type: ignore[return-value]

    def check(self, pair: Pair) -> None:
        """Raise :class:`InvalidMessage` unless ``pair`` belongs to this run (model, scenario, epoch)."""
        run = self.run
        if pair.model not in run.models:
            raise InvalidMessage(
                f"model '{pair.model}' is not part of run {run.id} (models: {', '.join(run.models)})"
            )
        try:
            self.catalog.scenario(pair.scenario_key)
        except KeyError:
            raise InvalidMessage(f"scenario '{pair.scenario_key}' is not in run {run.id}'s catalog") from None
        epoch = pair.epoch
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < run.epochs:
            raise InvalidMessage(f"epoch {epoch!r} is not one of run {run.id}'s {run.epochs} epochs")


_MISSING = object()
_plans_lock = threading.Lock()
_plans: OrderedDict[str, RunPlan] = OrderedDict()


def _same_run(cached: store.RunInfo, fresh: store.RunInfo) -> bool:
    """Whether a cached plan still describes ``fresh`` (another database may hold a run of the same id)."""
    return (
        cached.digest == fresh.digest
        and cached.options == fresh.options
        and cached.models == fresh.models
        and cached.epochs == fresh.epochs
    )


def forget_plans() -> None:
    """Drop this process's run plans (tests; a process that rebinds its database)."""
    with _plans_lock:
        _plans.clear()


def check(pair: Pair, run: store.RunInfo | None = None) -> RunPlan:
    """The plan of ``pair``'s run, once the pair is known to belong to it; else :class:`InvalidMessage`."""
    plan = RunPlan.for_run(pair.run_id, run)
    plan.check(pair)
    return plan


# -- the one decision -------------------------------------------------------------------------------------


@dataclass
class PairState:
    """What a pair has been through, carried from one attempt to the next (a queued pair: in its message).

    ``spent``: seconds of the pair's time limit used before this attempt (its earlier attempts;
    a queued retry's wait in the queue does not count). ``deadline`` (``time.monotonic()``) is set
    by the first :func:`attempt` in this process from ``spent`` and the limit, and kept by the
    attempts that follow in place.
    """

    retries: int = 0
    rate_limit_waits: int = 0
    busy: int = 0
    spent: float = 0.0
    deadline: float | None = None
    #: No queue to hand the pair back to (sequential, threads, per-model): waits are spent in place.
    in_place: bool = False
    #: When the pair's first attempt began, as this process's ``time.monotonic()``.
    began: float | None = None
    #: Why the previous attempt did not finish (for a deadline that passes while waiting).
    last: str = ""
    #: Every provider request of the pair's attempts so far, by outcome (the client's attempt log,
    #: :mod:`evaljobs.providers.attempts`): stored with its result, so a 429 handed back is still counted.
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def attempts(self) -> int:
        """Attempts made, this one included: a rate-limit wait or a busy governor is not an attempt."""
        return self.retries + 1

    def left(self) -> float | None:
        """Seconds left before the deadline (None: no time limit)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.began if self.began is not None else self.spent


@dataclass(frozen=True)
class Recorded:
    """The pair has its result (graded, or errored for a reason of its own): persist it."""

    result: Result


@dataclass(frozen=True)
class HandBack:
    """Not a fault (no permit yet, rate limited): evaluate again after ``delay`` seconds, no retry used."""

    delay: float


@dataclass(frozen=True)
class Retry:
    """A fault with retries left: evaluate again after ``backoff`` seconds (``state.retries`` counts it)."""

    backoff: float
    reason: str


@dataclass(frozen=True)
class Parked:
    """The pair's next request waits in a provider batch: nothing to do until the batch's poller
    sends the pair again (no thread waits, no retry is used, no time limit runs meanwhile)."""

    custom_id: str


@dataclass(frozen=True)
class GiveUp:
    """The pair ends ``errored`` (retries or waits exhausted, out of time): persist ``result``."""

    result: Result


Outcome = Recorded | HandBack | Retry | GiveUp | Parked


def attempt(pair: Pair, state: PairState) -> Outcome:
    """Evaluate ``pair`` once and decide what happens next; ``state`` is updated for the next attempt.

    Every provider request made meanwhile is counted into ``state.calls``; a result to persist carries
    the pair's whole count in ``details["provider_calls"]`` (what the benchmark reads back).
    """
    with provider_attempts.recording(state.calls):
        outcome = _attempt(pair, state)
    if isinstance(outcome, (Recorded, GiveUp)) and state.calls and not outcome.result.reused_from:
        outcome.result.details[provider_attempts.DETAILS_KEY] = dict(state.calls)
    return outcome


def _attempt(pair: Pair, state: PairState) -> Outcome:
    """:func:`attempt` without the attempt log.

    The pair's run must have been checked (:func:`check`). A queued pair answered 429 with a short
    ``Retry-After`` (within the permit wait) waits it out here and is evaluated again at once: a
    re-sent message would be due on time but then queue behind the pairs the workers already
    fetched (up to two per thread), so it came back 2.5-3.5 s after a ``Retry-After: 1`` and
    became the run's tail. With the governor on, nothing is slept: the 429 paused the budget until
    ``Retry-After`` and the next permit request waits for exactly that, first in line.
    """
    plan = RunPlan.for_run(pair.run_id)
    policy = plan.policy
    if state.began is None:
        state.began = time.monotonic() - state.spent
        state.deadline = state.began + policy.time_limit if policy.time_limit else None
    if state.deadline is not None and time.monotonic() >= state.deadline:
        return GiveUp(
            _errored(
                pair,
                state,
                timed_out(
                    policy.time_limit, state.began, f"waiting to retry: {state.last or 'an earlier attempt'}"
                ),
            )
        )
    runtime.set_permit_wait(IN_PLACE_PERMIT_WAIT if state.in_place else None)
    scenario = plan.catalog.scenario(pair.scenario_key)
    try:
        spec = plan.spec(pair.model)
        adapter = plan.adapter()
        judge = plan.judge_for(spec)
        while True:
            try:
                with for_pair(pair.run_id, pair.scenario_key, pair.model, pair.epoch), \
                        catalog_root(plan.run.options.get("catalog_root")):
                    return Recorded(evaluate(scenario, spec, adapter, judge=judge, attempts=state.attempts,
                                             raise_retryable=True, time_limit=policy.time_limit,
                                             epoch=pair.epoch,
                                             cache_across_epochs=bool(plan.settings.cache_across_epochs),
                                             deadline=state.deadline, pair_started=state.began))
            except RateLimited as exc:
                if state.in_place or state.rate_limit_waits >= policy.max_rate_limit_waits \
                        or not _wait_here(exc, policy, state):
                    raise
                state.rate_limit_waits += 1  # waited out a short Retry-After on this thread: again at once
    except InBatch as exc:
        return Parked(exc.custom_id)
    except Busy as exc:
        # The governor has no permit for this deployment yet: come back after its estimate.
        # Not a fault: no retry is used, no cap applies.
        state.busy += 1
        state.last = f"{type(exc).__name__}: {exc}"
        delay = max(exc.retry_in, 0.05) * (1 + random.random() * policy.jitter)
        if exc.reason != "paused":  # a turn behind other calls: queue time, like a message's wait
            return _hand_back(state, delay)
        # Paused by a provider's Retry-After (its 429 to another call): the pair's own rate limit in
        # all but name, so bounded the same way: part of its time on every strategy (a hand-back too),
        # and a pause that outlasts what is left of it ends the pair now, with the figure.
        left = state.left()
        if left is not None and exc.retry_in > left:
            return GiveUp(_errored(pair, state, f"rate_limited: the provider's budget is paused for "
                                                f"{exc.retry_in:.0f} s (its Retry-After), more than the "
                                                f"{left:.1f} s left of the pair's {policy.time_limit:g} s "
                                                "time limit"))
        return _hand_back(state, delay if left is None else min(delay, left), counted=True)
    except RateLimited as exc:
        # A rate limit is not a fault either: it has its own, larger, cap and never touches the retries.
        # Its wait is bounded like every other: by what is left of the pair's time and by the provider's
        # max_retry_after; a Retry-After beyond either ends the pair now, with the provider's figure.
        state.last = exc.reason
        beyond = _beyond(plan, pair, state, exc.retry_after)
        if beyond:
            return GiveUp(
                _errored(
                    pair,
                    state,
                    f"rate_limited: the provider asked to wait "
                    f"{exc.retry_after:.0f} s (Retry-After), {beyond}: {exc.reason}",
                )
            )
        if state.rate_limit_waits >= policy.max_rate_limit_waits:
            return GiveUp(_errored(pair, state, f"still rate limited after {state.rate_limit_waits} waits: "
                                                f"{exc.reason}"))
        state.rate_limit_waits += 1
        delay = policy.rate_limit_delay(exc.retry_after)
        left = state.left()
        return _hand_back(state, delay if left is None else min(delay, left), counted=True)
    except TransientError as exc:
        if state.deadline is not None and time.monotonic() >= state.deadline - 0.01:
            return GiveUp(_errored(pair, state, timed_out(policy.time_limit, state.began, exc.reason)))
        if state.retries < plan.max_retries(pair.model):
            return _retry(state, policy, exc.reason)
        return GiveUp(_errored(pair, state, f"{exc.reason} (gave up after {state.attempts} attempts)"))
    except TimeLimitExceeded:
        # Dramatiq's own limit (time limit + 30 s) is only a backstop: the wall in
        # evaljobs.network.deadline ends every network wait by the pair's deadline.
        return GiveUp(
            _errored(pair, state, timed_out(policy.time_limit, state.began, "Dramatiq's time limit"))
        )
    except Exception as exc:
        if state.retries < policy.max_retries:
            logger.warning("pair %s x %s (epoch %s) of run %s failed (%s: %s); retried", pair.scenario_key,
                           pair.model, pair.epoch, pair.run_id, type(exc).__name__, exc,
                           exc_info=logger.isEnabledFor(logging.DEBUG))
            return _retry(state, policy, f"{type(exc).__name__}: {exc}")
        return GiveUp(_errored(pair, state, f"{type(exc).__name__}: {exc}"))


def _hand_back(state: PairState, delay: float, *, counted: bool = False) -> HandBack:
    """``counted``: the wait is part of the pair's time (a rate limit's), also when it is spent in a queue."""
    state.spent = state.elapsed() + (delay if counted and not state.in_place else 0.0)
    return HandBack(delay)


def _beyond(plan: RunPlan, pair: Pair, state: PairState, retry_after: float | None) -> str:
    """Why a ``Retry-After`` is too long to wait for ("" when it is not)."""
    if retry_after is None:
        return ""
    left = state.left()
    if left is not None and retry_after > left:
        return f"more than the {left:.1f} s left of the pair's {plan.policy.time_limit:g} s time limit"
    cap = plan.max_retry_after(pair.model)
    if retry_after > cap:
        return f"more than max_retry_after ({cap:g} s) of provider '{plan.spec(pair.model).provider}'"
    return ""


def _retry(state: PairState, policy: RetryPolicy, reason: str) -> Retry:
    backoff = policy.backoff(state.retries)
    state.retries += 1
    state.last = reason
    state.spent = state.elapsed()
    return Retry(backoff, reason)


def _errored(pair: Pair, state: PairState, reason: str) -> Result:
    return Result.errored(pair.scenario_key, pair.model, reason, attempts=state.attempts, epoch=pair.epoch)


def _wait_here(exc: RateLimited, policy: RetryPolicy, state: PairState) -> bool:
    """Whether a queued pair answered 429 waits out its ``Retry-After`` on this thread (then True).

    A wait within the permit wait (2 s by default, the same a pair may wait for a permit) is
    spent here; without the governor, it is ``Retry-After`` plus at most ``policy.jitter`` (5 %).
    """
    wait = exc.retry_after
    left = state.left()
    if wait is None or wait < 0 or wait > runtime.permit_wait() or (left is not None and wait > left):
        return False
    if runtime.governor() is None:
        time.sleep(policy.rate_limit_delay(wait))
    return True


__all__ = [
    "BACKSTOP",
    "IN_PLACE_PERMIT_WAIT",
    "GiveUp",
    "HandBack",
    "InvalidMessage",
    "Outcome",
    "Pair",
    "PairState",
    "Parked",
    "Recorded",
    "Retry",
    "RunPlan",
    "attempt",
    "check",
    "forget_plans",
    "pair_args",
    "pair_options",
]
