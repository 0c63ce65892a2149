"""Grading: turn a Replay into per-criterion scores, a score, a status and one fault.

Domain code: pure functions over the scenario and the replay. The LLM judge is
injected as a callable so this module never talks to a provider itself.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

from evaljobs.catalog import Scenario, patterns
from evaljobs.evaluation.assertions import AssertionRefused
from evaljobs.evaluation.cost_check import cost_check
from evaljobs.evaluation.reference import reference_matches
from evaljobs.evaluation.replay import Replay
from evaljobs.evaluation.result import ERRORED, FAILED, PASSED
from evaljobs.evaluation.weighted import Outcome, check_outcome, combine, fault_of, walk

CRITERIA = (
    "response_present",
    "contains",
    "not_contains",
    "regex",
    "expected_tools",
    "max_latency_ms",
    "token_budget",
    "llm_judge",
    "tools_succeeded",
    "ideal",
    "assertions",
)

#: Faults, most mechanical first: a non-passing result gets the first one that applies
#: (the order of ActiveAgent's diagnosis: an empty answer, then tool errors, tools, content, quality).
FAULTS = (
    "run_error",
    "judge_unavailable",
    "not_gradable",
    "empty_answer",
    "tool_error",
    "missing_capability",
    "expected_tool_not_called",
    "ungrounded_answer",
    "forbidden_content",
    "missing_content",
    "regex_mismatch",
    "wrong_answer",
    "assertion_failed",
    "too_slow",
    "over_token_budget",
    "low_quality",
)

#: The fault a failing criterion stands for.
CRITERION_FAULT = {
    "response_present": "empty_answer",
    "contains": "missing_content",
    "not_contains": "forbidden_content",
    "regex": "regex_mismatch",
    "expected_tools": "expected_tool_not_called",
    "tools_succeeded": "tool_error",
    "ideal": "wrong_answer",
    "assertions": "assertion_failed",
    "max_latency_ms": "too_slow",
    "token_budget": "over_token_budget",
    "llm_judge": "low_quality",
}

#: An assertion runner: ``run(assertion, answer, scenario) -> (passed, score, reason)``; injected so that
#: grading never starts a process itself. ``None``: the scenario's external assertions are not gradable.
AssertionRunner = Callable[[dict, str, Scenario], "tuple[bool, float, str]"]


@dataclass
class JudgeVerdict:
    score: float
    reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0
    #: The judge's own ``pass`` when its answer carried one (promptfoo's llm-rubric asks for it): a judgement
    #: passes when this is not False and the score reaches the criterion's threshold.
    passed: bool | None = None
    #: Set when the judge gave no usable verdict (unreachable, refused, not the expected JSON after its
    #: retries): the pair is ``errored`` with fault ``judge_unavailable``, never held against the model.
    error: str | None = None
    #: What was asked and answered, kept with the result for every report.
    prompt: str = ""
    raw: str = ""
    model: str = ""

    def details(self) -> dict[str, Any]:
        """What a result keeps of this call (``details.judge``, shown by every report), before its verdict."""
        return {"model": self.model, "prompt": self.prompt, "raw": self.raw, "cost": self.cost,
                "tokens": self.input_tokens + self.output_tokens}


#: ``judge(scenario, replay) -> JudgeVerdict | None``; None means "not judged" (e.g. the run's cap is
#: reached).
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


def pattern_matches(text: str, pattern: str) -> bool:
    """ActiveAgent's rule (``Scorer.matches_pattern?``): a case-insensitive substring, or else a
    case-insensitive regular expression; a pattern that does not compile only counts as a substring."""
    if not pattern.strip():
        return False
    if pattern.lower() in text.lower():
        return True
    try:
        return patterns.search(pattern, text, patterns.IGNORECASE)
    except patterns.PatternTimeout:
        raise
    except (re.error, patterns.error, RecursionError, OverflowError, ValueError):
        return False


def grade(scenario: Scenario, replay: Replay, judge: Judge | None = None,
          assertions: AssertionRunner | None = None) -> Grades:
    """Score a replay against the scenario's expectations.

    Score is the mean of the applicable criteria. The result passes when the
    score reaches the scenario's pass threshold and no gate failed; a failed gate
    fails the scenario whatever the score, with that gate's fault. "The answer is
    not empty" is a check, not a criterion: it never adds to the score (an
    always-1 entry in the mean would lift every failing criterion towards the
    threshold); an empty answer fails the scenario with its own fault,
    ``empty_answer`` (``run_error`` when ``response_present`` is a gate, as
    ActiveAgent reads "the agent returned nothing"). A replay with
    an error is ``errored`` with fault ``run_error``; a judge that gave no usable
    verdict makes the pair ``errored`` with ``judge_unavailable`` (it says nothing
    about the model under test).
    """
    if replay.error:
        return Grades(status=ERRORED, score=0.0, fault="run_error", details={"error": replay.error})
    if scenario.expect.weighted:
        return _grade_weighted(scenario, replay, judge, assertions)

    expect = scenario.expect
    gates = set(expect.gates)
    answer = replay.answer or ""
    lowered = answer.lower()
    scores: dict[str, float] = {}
    details: dict[str, Any] = {}

    def applies(name: str) -> bool:
        return _applies(scenario, name) or name in gates

    if expect.judge and expect.judge_gate and applies("llm_judge"):
        gates.add("llm_judge")  # the judge decides its criterion unless the catalog says gate: false

    empty = applies("response_present") and not answer.strip()
    if (expect.contains or expect.patterns) and applies("contains"):
        missing = [s for s in expect.contains if s.lower() not in lowered]
        missing += [p for p in expect.patterns if not pattern_matches(answer, p)]
        total = len(expect.contains) + len(expect.patterns)
        scores["contains"] = _fraction(total - len(missing), total)
        if missing:
            details["missing"] = missing
    if (expect.not_contains or expect.forbidden_patterns) and applies("not_contains"):
        found = [s for s in expect.not_contains if s.lower() in lowered]
        found += [p for p in expect.forbidden_patterns if pattern_matches(answer, p)]
        total = len(expect.not_contains) + len(expect.forbidden_patterns)
        scores["not_contains"] = _fraction(total - len(found), total)
        if found:
            details["forbidden"] = found
    if expect.regex and applies("regex"):
        unmatched = [r for r in expect.regex if not patterns.search(r, answer)]
        scores["regex"] = _fraction(len(expect.regex) - len(unmatched), len(expect.regex))
        if unmatched:
            details["unmatched_regex"] = unmatched
    if expect.tools and applies("expected_tools"):
        not_called = []
        for wanted in expect.tools:
            if not any(c.name == wanted.name and _tool_matches(wanted.arguments, c.arguments or {})
                       for c in replay.tool_calls):
                not_called.append({"name": wanted.name, "arguments": wanted.arguments})
        if expect.tools_match == "any":  # ActiveAgent: any one of the expected tools is enough
            scores["expected_tools"] = 0.0 if len(not_called) == len(expect.tools) else 1.0
        else:
            scores["expected_tools"] = _fraction(len(expect.tools) - len(not_called), len(expect.tools))
        if scores["expected_tools"] < 1.0:
            details["expected_tools_not_called"] = not_called
    tool_errors = [c for c in replay.tool_calls if c.error]
    if tool_errors:
        details["tool_errors"] = [{"name": c.name, "error": c.error} for c in tool_errors]
    if "tools_succeeded" in gates and replay.tool_calls:
        scores["tools_succeeded"] = 0.0 if tool_errors else 1.0
    if expect.ideal and applies("ideal"):
        hit = reference_matches(answer, expect.ideal, expect.ideal_grader)
        scores["ideal"] = 1.0 if hit else 0.0
        if not hit:
            details["ideal"] = {"grader": expect.ideal_grader, "expected": list(expect.ideal)}
    if expect.max_latency_ms is not None and applies("max_latency_ms"):
        scores["max_latency_ms"] = 1.0 if replay.duration_ms <= expect.max_latency_ms else 0.0
    if expect.token_budget is not None and applies("token_budget"):
        used = replay.input_tokens + replay.output_tokens
        scores["token_budget"] = 1.0 if used <= expect.token_budget else 0.0
    refused = [a for a in expect.assertions if a.get("kind") == "refused"]
    runnable = [a for a in expect.assertions if a.get("kind") != "refused"]
    if refused and not runnable and not _has_expectations(expect):
        # Every assertion of the source test was refused at import (--lenient): nothing is left to grade,
        # and "the answer is not empty" is not the test the user wrote.
        details["not_gradable"] = [f"{a.get('label')}: {a.get('reason')}" for a in refused]
        return Grades(status=ERRORED, score=0.0, fault="not_gradable", details=details)
    if runnable and applies("assertions"):
        if assertions is None and any(a.get("kind") != "cost" for a in runnable):
            details["not_gradable"] = ["no assertion runner in this process"]
            return Grades(status=ERRORED, score=0.0, scores=scores, fault="not_gradable", details=details)
        outcomes = []
        for item in runnable:
            try:
                if item.get("kind") == "cost":  # the call's price, not the answer: graded on the replay
                    passed, value, reason = cost_check(item, replay)
                else:
                    assert assertions is not None
                    passed, value, reason = assertions(item, answer, scenario)
            except AssertionRefused as exc:
                details["not_gradable"] = [str(exc)]
                return Grades(status=ERRORED, score=0.0, scores=scores, fault="not_gradable", details=details)
            outcomes.append({"assertion": item.get("label") or item.get("kind"), "pass": bool(passed),
                             "score": round(float(value), 6), "reason": reason[:500]})
        scores["assertions"] = _fraction(sum(1 for o in outcomes if o["pass"]), len(outcomes))
        details["assertions"] = outcomes
    if expect.judge and judge is not None and applies("llm_judge"):
        verdict = judge(scenario, replay)
        if verdict is None:
            details["judge"] = "skipped: the run's judge-call cap is reached"
        else:
            info = verdict.details()
            if verdict.error:
                info.update(score=None, reason=verdict.error)
                details["judge"] = info
                return Grades(status=ERRORED, score=0.0, scores=scores, fault="judge_unavailable",
                              details=details)
            scores["llm_judge"] = max(0.0, min(1.0, float(verdict.score)))
            threshold = judge_threshold(scenario)
            info.update(score=scores["llm_judge"], reason=verdict.reason, threshold=threshold,
                        passed=judgement_passes(verdict, scores["llm_judge"], threshold),
                        gate="llm_judge" in gates)
            if verdict.passed is not None:
                info["judge_pass"] = verdict.passed
            details["judge"] = info

    # Nothing to score but a present answer: the answer is all the scenario asks for.
    score = _weighted_mean(scores, dict(scenario.weights)) if scores else (0.0 if empty else 1.0)
    fired = _diagnose(scenario, replay, scores, details)
    if empty:
        fired.add("response_present")
    failed_gates = [c for c in GATE_ORDER if c in fired
                    or (c in gates and c in scores and _gate_failed(c, scores[c], details))]
    if empty and "response_present" not in gates:  # its own fault, ahead of what the empty text fails
        details["empty_answer"] = True
        return Grades(status=FAILED, score=score, scores=scores, fault="empty_answer", details=details)
    if failed_gates:
        details["failed_gates"] = failed_gates
        return Grades(status=FAILED, score=score, scores=scores, fault=_gate_fault(failed_gates[0], answer),
                      details=details)
    if score >= scenario.pass_threshold:
        return Grades(status=PASSED, score=score, scores=scores, details=details)
    return Grades(
        status=FAILED, score=score, scores=scores, fault=_fault(scores, tool_errors), details=details
    )


def _weighted_mean(scores: dict[str, float], weights: dict[str, float]) -> float:
    """The score: the mean of the criteria, each counting its weight (1 unless the scenario says)."""
    total = sum(weights.get(c, 1.0) for c in scores)
    if not scores or total <= 0:
        return 0.0
    return round(sum(value * weights.get(c, 1.0) for c, value in scores.items()) / total, 6)


def _has_expectations(expect) -> bool:
    return bool(expect.contains or expect.not_contains or expect.regex or expect.tools or expect.judge
                or expect.patterns or expect.forbidden_patterns or expect.ideal
                or expect.max_latency_ms is not None or expect.token_budget is not None)


#: Gates are reported in ActiveAgent's diagnosis order: the most mechanical cause first (with its two
#: heuristics, ``expect.diagnose``, where its Diagnosis#call tries them).
GATE_ORDER = (
    "response_present",
    "tools_succeeded",
    "missing_capability",
    "expected_tools",
    "ungrounded_answer",
    "not_contains",
    "contains",
    "regex",
    "ideal",
    "assertions",
    "max_latency_ms",
    "token_budget",
    "llm_judge",
)


def _diagnose(
    scenario: Scenario, replay: Replay, scores: dict[str, float], details: dict[str, Any]
) -> set[str]:
    """The ActiveAgent heuristics the scenario asks for that fire on this answer (each quoted in
    ``details``)."""
    answer = replay.answer or ""
    if not scenario.expect.diagnose or not answer.strip():
        return set()
    # Imported by the scenarios that ask for a heuristic (its regexes compile at import: start-up time).
    from evaljobs.evaluation.diagnosis import missing_capability, ungrounded_answer

    called = [c.name for c in replay.tool_calls]
    found = {}
    if "missing_capability" in scenario.expect.diagnose:
        found["missing_capability"] = missing_capability(answer, called, scores, scenario.pass_threshold)
    if "ungrounded_answer" in scenario.expect.diagnose:
        found["ungrounded_answer"] = ungrounded_answer(answer, [t.name for t in scenario.tools], called)
    fired = {name: quote for name, quote in found.items() if quote is not None}
    if fired:
        details["diagnosis"] = fired
    return set(fired)


def judge_threshold(scenario: Scenario) -> float:
    """The score the ``llm_judge`` criterion needs: its own ``threshold``, else the scenario's
    ``pass_threshold``."""
    threshold = scenario.expect.judge_threshold
    return scenario.pass_threshold if threshold is None else threshold


def judgement_passes(verdict: JudgeVerdict, score: float, threshold: float | None) -> bool:
    """promptfoo's llm-rubric rule: the judge's ``pass`` (true when it gave none), and, with a threshold,
    the score reaching it."""
    passed = verdict.passed is not False
    return passed and (threshold is None or score >= threshold)


def _gate_failed(criterion: str, value: float, details: dict[str, Any]) -> bool:
    if criterion == "llm_judge":  # the judgement passes or fails on its own (its threshold, its pass)
        return not details["judge"]["passed"]
    return value < 1.0


def _gate_fault(criterion: str, answer: str) -> str:
    if criterion == "response_present":  # ActiveAgent: "the agent returned nothing" is a run_error
        return "run_error"
    return CRITERION_FAULT.get(criterion, criterion)  # a diagnosis heuristic is its own fault


def _fault(scores: dict[str, float], tool_errors: list) -> str:
    if tool_errors:
        return "tool_error"
    for criterion in ("expected_tools", "not_contains", "contains", "regex", "ideal", "assertions"):
        if scores.get(criterion, 1.0) < 1.0:
            return CRITERION_FAULT[criterion]
    return "low_quality"


def _cost_sum(costs: list[float | None]) -> float | None:
    """The sum of some calls' costs; None when one is unknown (an unknown cost is never counted as 0)."""
    return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)


class _NoVerdict(Exception):
    """The weighted list cannot be graded: ``fault`` says why (``not_gradable``, ``judge_unavailable``)."""

    def __init__(self, fault: str, why: str):
        super().__init__(why)
        self.fault = fault


def _grade_weighted(scenario: Scenario, replay: Replay, judge: Judge | None,
                    runner: AssertionRunner | None) -> Grades:
    """``expect.weighted``: the assertion list alone decides, combined as promptfoo combines a test's."""
    expect = scenario.expect
    answer = replay.answer or ""
    details: dict[str, Any] = {}
    judge_costs: list[float | None] = []  # every judge call of the list (the first one's block is shown)
    refused = [a for a in walk(expect.assertions) if a.get("kind") == "refused"]
    if refused:  # --lenient dropped part of the test: grading what is left could change the verdict
        details["not_gradable"] = [f"{a.get('label')}: {a.get('reason')}" for a in refused]
        return Grades(status=ERRORED, score=0.0, fault="not_gradable", details=details)

    def evaluate(entry: dict) -> Outcome | None:
        kind = entry.get("kind")
        label = cast(str, entry.get("label") or kind)  # the catalog gave every assertion entry a kind
        if kind in ("builtin", "promptfoo") and not entry.get("transforms"):
            return check_outcome(entry, answer)
        if kind == "latency":
            passed = replay.duration_ms <= entry["max_ms"]
            return Outcome(
                label,
                passed,
                1.0 if passed else 0.0,
                f"{replay.duration_ms} ms (max {entry['max_ms']})",
                None if passed else "too_slow",
            )
        if kind == "cost":
            try:
                passed, value, reason = cost_check(entry, replay)
            except AssertionRefused as exc:
                raise _NoVerdict("not_gradable", str(exc)) from None
            return Outcome(label, passed, value, reason, None if passed else "assertion_failed")
        if kind == "judge":
            if judge is None:
                raise _NoVerdict("not_gradable", f"{label}: no LLM judge in this process")
            verdict = judge(replace(scenario, expect=replace(expect, judge=entry["rubric"])), replay)
            if verdict is None:
                details.setdefault("skipped", []).append(f"{label}: the run's judge-call cap is reached")
                return None
            info = verdict.details()
            judge_costs.append(verdict.cost)
            details.setdefault("judge", info)  # the first judge call, shown by every report
            if verdict.error:
                info.update(score=None, reason=verdict.error)
                details["judge"] = info
                raise _NoVerdict("judge_unavailable", verdict.error)
            score = max(0.0, min(1.0, float(verdict.score)))
            # a judge that gives no pass: full marks unless the entry sets a threshold
            if verdict.passed is None:
                passed = score >= float(entry.get("threshold", 1.0))
            else:  # promptfoo's llm-rubric: its pass, and the score reaching the entry's threshold if any
                passed = judgement_passes(verdict, score, entry.get("threshold"))
                info["judge_pass"] = verdict.passed
            info.update(score=score, reason=verdict.reason, passed=passed)
            return Outcome(label, passed, score, verdict.reason, None if passed else "low_quality")
        if runner is None:
            raise _NoVerdict("not_gradable", "no assertion runner in this process")
        try:
            passed, value, reason = runner(entry, answer, scenario)
        except AssertionRefused as exc:
            raise _NoVerdict("not_gradable", str(exc)) from None
        return Outcome(label, bool(passed), float(value), reason, None if passed else fault_of(entry))

    try:
        try:
            verdict = combine(expect.assertions, expect.threshold, evaluate)
        finally:  # the pair pays for every judge call, whatever the verdict
            if isinstance(details.get("judge"), dict):
                details["judge"]["cost"] = _cost_sum(judge_costs)
    except _NoVerdict as exc:
        details["not_gradable" if exc.fault == "not_gradable" else "error"] = [str(exc)]
        return Grades(status=ERRORED, score=0.0, fault=exc.fault, details=details)
    score = round(verdict.score, 6)
    details["assertions"] = [o.as_detail() for o in verdict.children]
    details["weighted"] = {"threshold": expect.threshold, "reason": verdict.reason}
    if verdict.passed:
        return Grades(status=PASSED, score=score, scores={"assertions": score}, details=details)
    return Grades(
        status=FAILED, score=score, scores={"assertions": score}, fault=verdict.fault, details=details
    )
