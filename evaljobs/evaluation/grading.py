"""Grading: turn a Replay into per-criterion scores, a score, a status and one fault.

Domain code: pure functions over the scenario and the replay. The LLM judge is
injected as a callable so this module never talks to a provider itself.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from evaljobs.catalog import Scenario
from evaljobs.evaluation.replay import Replay
from evaljobs.evaluation.result import ERRORED, FAILED, PASSED

CRITERIA = (
    "response_present",
    "contains",
    "not_contains",
    "regex",
    "expected_tools",
    "max_latency_ms",
    "token_budget",
    "llm_judge",
)

#: Faults, most mechanical first: a non-passing result gets the first one that applies.
FAULTS = (
    "run_error",
    "tool_error",
    "expected_tool_not_called",
    "forbidden_content",
    "missing_content",
    "low_quality",
)


@dataclass
class JudgeVerdict:
    score: float
    reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0


#: ``judge(scenario, replay) -> JudgeVerdict | None``; None means "not judged" (e.g. the run's cap is reached).
Judge = Callable[[Scenario, Replay], "JudgeVerdict | None"]


@dataclass
class Grades:
    status: str
    score: float
    scores: dict[str, float] = field(default_factory=dict)
    fault: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def _applies(scenario: Scenario, name: str) -> bool:
    return scenario.criteria is None or name in scenario.criteria


def _fraction(hits: int, total: int) -> float:
    return hits / total if total else 1.0


def _tool_matches(expected_args: dict[str, Any], actual_args: dict[str, Any]) -> bool:
    """An expected tool call matches when its arguments are a subset of the actual ones."""
    for key, value in expected_args.items():
        if key not in actual_args:
            return False
        actual = actual_args[key]
        if isinstance(value, dict) and isinstance(actual, dict):
            if not _tool_matches(value, actual):
                return False
        elif actual != value and str(actual) != str(value):
            return False
    return True


def grade(scenario: Scenario, replay: Replay, judge: Judge | None = None) -> Grades:
    """Score a replay against the scenario's expectations.

    Score is the mean of the applicable criteria; the result passes when the
    score reaches the scenario's pass threshold. A replay with an error is
    ``errored`` with fault ``run_error`` and is not graded further.
    """
    if replay.error:
        return Grades(status=ERRORED, score=0.0, fault="run_error", details={"error": replay.error})

    expect = scenario.expect
    answer = replay.answer or ""
    lowered = answer.lower()
    scores: dict[str, float] = {}
    details: dict[str, Any] = {}

    if _applies(scenario, "response_present"):
        scores["response_present"] = 1.0 if answer.strip() else 0.0
    if expect.contains and _applies(scenario, "contains"):
        missing = [s for s in expect.contains if s.lower() not in lowered]
        scores["contains"] = _fraction(len(expect.contains) - len(missing), len(expect.contains))
        if missing:
            details["missing"] = missing
    if expect.not_contains and _applies(scenario, "not_contains"):
        found = [s for s in expect.not_contains if s.lower() in lowered]
        scores["not_contains"] = _fraction(len(expect.not_contains) - len(found), len(expect.not_contains))
        if found:
            details["forbidden"] = found
    if expect.regex and _applies(scenario, "regex"):
        unmatched = [r for r in expect.regex if not re.search(r, answer)]
        scores["regex"] = _fraction(len(expect.regex) - len(unmatched), len(expect.regex))
        if unmatched:
            details["unmatched_regex"] = unmatched
    if expect.tools and _applies(scenario, "expected_tools"):
        not_called = []
        for wanted in expect.tools:
            if not any(c.name == wanted.name and _tool_matches(wanted.arguments, c.arguments or {})
                       for c in replay.tool_calls):
                not_called.append({"name": wanted.name, "arguments": wanted.arguments})
        scores["expected_tools"] = _fraction(len(expect.tools) - len(not_called), len(expect.tools))
        if not_called:
            details["expected_tools_not_called"] = not_called
    if expect.max_latency_ms is not None and _applies(scenario, "max_latency_ms"):
        scores["max_latency_ms"] = 1.0 if replay.duration_ms <= expect.max_latency_ms else 0.0
    if expect.token_budget is not None and _applies(scenario, "token_budget"):
        used = replay.input_tokens + replay.output_tokens
        scores["token_budget"] = 1.0 if used <= expect.token_budget else 0.0
    if expect.judge and judge is not None and _applies(scenario, "llm_judge"):
        verdict = judge(scenario, replay)
        if verdict is None:
            details["judge"] = "skipped: the run's judge-call cap is reached"
        else:
            scores["llm_judge"] = max(0.0, min(1.0, float(verdict.score)))
            details["judge"] = {"score": scores["llm_judge"], "reason": verdict.reason, "cost": verdict.cost,
                                "tokens": verdict.input_tokens + verdict.output_tokens}

    tool_errors = [c for c in replay.tool_calls if c.error]
    if tool_errors:
        details["tool_errors"] = [{"name": c.name, "error": c.error} for c in tool_errors]

    score = sum(scores.values()) / len(scores) if scores else 0.0
    score = round(score, 6)
    if score >= scenario.pass_threshold and scores:
        return Grades(status=PASSED, score=score, scores=scores, details=details)
    return Grades(status=FAILED, score=score, scores=scores, fault=_fault(scores, tool_errors), details=details)


def _fault(scores: dict[str, float], tool_errors: list) -> str:
    if tool_errors:
        return "tool_error"
    if scores.get("expected_tools", 1.0) < 1.0:
        return "expected_tool_not_called"
    if scores.get("not_contains", 1.0) < 1.0:
        return "forbidden_content"
    if min(scores.get("contains", 1.0), scores.get("regex", 1.0), scores.get("response_present", 1.0)) < 1.0:
        return "missing_content"
    return "low_quality"
