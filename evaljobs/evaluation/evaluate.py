"""Evaluate one (scenario, model, epoch) pair: run the adapter, grade, build the Result.

Every strategy shares this code. An exception anywhere becomes an ``errored``
result with the reason — one bad pair never aborts a run — except retryable
provider faults when the caller asked to handle retries itself.
"""
from __future__ import annotations

import sys
import time
from typing import Any

from evaljobs import telemetry
from evaljobs.catalog import Scenario
from evaljobs.catalog import patterns
from evaljobs.catalog.modelspec import ModelSpec
from evaljobs.evaluation.adapters import Adapter, DeadlineExceeded, call_adapter
from evaljobs.evaluation.assertions import process_runner
from evaljobs.evaluation.grading import Judge, grade
from evaljobs.evaluation.replay import Replay
from evaljobs.evaluation.result import ERRORED, Result
from evaljobs.network import deadline as walls
from evaljobs.providers import (InBatch, PermanentError, ProviderError, RateLimited, TransientError,
                                for_epoch)

# The governor's "no permit yet": the pair is handed back (or waits), it is not a fault.
from evaljobs.governor import Busy

RETRYABLE = (RateLimited, TransientError, Busy)

def _describe(exc: BaseException) -> str:
    if isinstance(exc, ProviderError):
        return exc.reason
    text = str(exc) or exc.__class__.__name__
    return f"{exc.__class__.__name__}: {text}"[:2000]


def evaluate(
    scenario: Scenario,
    model: ModelSpec,
    adapter: Adapter,
    *,
    judge: Judge | None = None,
    attempts: int = 1,
    raise_retryable: bool = False,
    time_limit: float | None = None,
    epoch: int = 0,
    cache_across_epochs: bool = False,
    deadline: float | None = None,
    pair_started: float | None = None,
) -> Result:
    """Run and grade one pair.

    With ``raise_retryable`` a rate limit or transient provider fault is raised
    to the caller (a queue retries it); otherwise it becomes ``errored``.
    ``epoch`` is stamped on the result and keys the response cache, unless
    ``cache_across_epochs`` (every epoch may then be answered by one cached call).

    ``time_limit`` is a hard wall for the whole pair: every provider call, tool call and judge
    call of this thread ends by ``deadline`` (a ``time.monotonic()`` instant; default: now +
    ``time_limit``) through :mod:`evaljobs.network.deadline`, and whatever fails once it has
    passed is recorded as ``timed out after LIMIT s (ELAPSED s elapsed; …)``, never retried.
    ``pair_started`` (``time.monotonic()``) is when the pair's first attempt began, for that
    elapsed time when retries share one deadline.
    """
    if deadline is None and time_limit:
        deadline = time.monotonic() + time_limit
    began = pair_started if pair_started is not None else time.monotonic()
    with telemetry.span("evaluate_pair", {"evaljobs.scenario.key": scenario.key, "evaljobs.model": model.spec,
                                          "evaljobs.epoch": epoch, "evaljobs.attempt": attempts}) as span, \
            for_epoch(0 if cache_across_epochs else epoch), walls.scope(deadline), \
            patterns.deadline_scope(deadline):
        result = _evaluate(
            scenario, model, adapter, judge, attempts, raise_retryable, time_limit, deadline, began
        )
        span.set_attribute("evaljobs.status", result.status)
    result.epoch = epoch
    return result


def _evaluate(
    scenario: Scenario,
    model: ModelSpec,
    adapter: Adapter,
    judge: Judge | None,
    attempts: int,
    raise_retryable: bool,
    time_limit: float | None,
    deadline: float | None,
    began: float,
) -> Result:
    started = time.perf_counter()
    try:
        replay = call_adapter(adapter, scenario, model, deadline)
        if not isinstance(replay, Replay):
            raise TypeError(f"adapter returned {type(replay).__name__}, expected a Replay")
    except DeadlineExceeded as exc:
        return _errored(scenario, model, timed_out(time_limit, began, str(exc)), attempts, started)
    except InBatch:
        raise  # the pair waits for a provider batch: not a result, not a fault
    except RETRYABLE as exc:
        if _past(deadline):
            return _errored(scenario, model, timed_out(time_limit, began, _describe(exc)), attempts, started)
        if raise_retryable:
            raise
        return _errored(scenario, model, _last_reason(), attempts, started)
    except Exception as exc:  # noqa: BLE001 - any adapter failure is this pair's error, not the run's
        if _past(deadline):
            return _errored(scenario, model, timed_out(time_limit, began, _describe(exc)), attempts, started)
        return _errored(scenario, model, _describe(exc), attempts, started)

    try:
        runner = None
        if scenario.expect.assertions:  # only imported suites carry external assertions
            runner = process_runner()
        grades = grade(scenario, replay, judge, runner)
    except InBatch:
        raise  # the judge's call waits for a provider batch (--batch-judge)
    except RETRYABLE as exc:
        if _past(deadline):
            return _errored(scenario, model, timed_out(time_limit, began, f"grading: {_describe(exc)}"),
                            attempts, started)
        if raise_retryable:
            raise
        return _errored(scenario, model, _last_reason(), attempts, started)
    except Exception as exc:  # noqa: BLE001
        if _past(deadline):  # e.g. a catalog regex cut at the deadline (evaljobs.catalog.patterns)
            return _errored(scenario, model, timed_out(time_limit, began, f"grading: {_describe(exc)}"),
                            attempts, started)
        return _errored(scenario, model, f"grading failed: {_describe(exc)}", attempts, started)

    details: dict[str, Any] = dict(grades.details)
    details["turns"] = replay.turns
    details["messages"] = replay.messages[-40:]
    if replay.timeline:
        details["timeline"] = replay.timeline[-40:]
    if replay.meta:
        details["meta"] = replay.meta
    judge_info = details.get("judge")
    extra_cost = judge_info.pop("cost", 0.0) if isinstance(judge_info, dict) else 0.0
    return Result(
        scenario_key=scenario.key,
        model=model.spec,
        status=grades.status,
        score=grades.score,
        scores=grades.scores,
        fault=grades.fault,
        output=replay.answer,
        tool_calls=[c.to_dict() for c in replay.tool_calls],
        duration_ms=round(replay.duration_ms),
        input_tokens=replay.input_tokens,
        output_tokens=replay.output_tokens,
        cost=_total_cost(replay.cost, extra_cost),
        cache_read_tokens=replay.cache_read_tokens,
        cache_write_tokens=replay.cache_write_tokens,
        reasoning_tokens=replay.reasoning_tokens,
        cache_saving=None if replay.cache_saving is None else round(replay.cache_saving, 8),
        answered_by=", ".join(replay.answered_by) or None,
        ttft_ms=replay.ttft_ms,
        latency_ms=replay.latency_ms,
        attempts=attempts,
        error=replay.error or _grading_error(grades),
        details=details,
        cached=replay.cached,
    )


def _past(deadline: float | None) -> bool:
    # 10 ms of slack: a socket timeout cut to the deadline returns a hair before it.
    return deadline is not None and time.monotonic() >= deadline - 0.01


def timed_out(time_limit: float | None, began: float, detail: str) -> str:
    """The reason of a pair stopped by its time limit: the limit, the real elapsed time, what was running."""
    limit = f"{time_limit:g} s" if time_limit else "its deadline"
    return f"timed out after {limit} ({time.monotonic() - began:.2f} s elapsed; {detail})"[:2000]


def _grading_error(grades) -> str | None:
    """Why grading could not give a verdict (the judge, or an assertion that cannot run)."""
    if grades.fault == "judge_unavailable":
        judge = grades.details.get("judge")
        return str(judge.get("reason") if isinstance(judge, dict) else judge)
    if grades.fault == "not_gradable":
        return "not gradable: " + "; ".join(grades.details.get("not_gradable") or ["no assertion can run"])
    return None


def _last_reason() -> str:
    exc = sys.exc_info()[1]
    return _describe(exc) if exc else "provider error"


def _total_cost(*parts: float | None) -> float | None:
    """The sum, or None when any part is unknown: a partly unknown cost is an unknown cost."""
    if any(part is None for part in parts):
        return None
    return round(sum(parts), 8)  # type: ignore[arg-type]


def _errored(scenario: Scenario, model: ModelSpec, reason: str, attempts: int, started: float) -> Result:
    return Result.errored(scenario.key, model.spec, reason, attempts=attempts,
                          duration_ms=int((time.perf_counter() - started) * 1000))


__all__ = ["ERRORED", "RETRYABLE", "PermanentError", "evaluate", "timed_out"]
