"""Grading: turn a Replay into per-criterion scores, a score, a status and one fault.

Domain code: pure functions over the scenario and the replay. The LLM judge is
injected as a callable so this module never talks to a provider itself.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

from evaljobs import evaluation
from evaljobs.catalog import Scenario
from evaljobs.catalog.criteria import weighted_criterion
from evaljobs.evaluation.refused import AssertionRefused
from evaljobs.evaluation.cost_check import cost_check
from evaljobs.evaluation.graders import Grader, Grading, Stop, grader, graders, judgement_passes
from evaljobs.evaluation.graders import pattern_matches as pattern_matches  # where callers found it
from evaljobs.evaluation.replay import Replay
from evaljobs.evaluation.result import ERRORED, FAILED, PASSED
from evaljobs.evaluation.weighted import Outcome, check_outcome, combine, fault_of, walk

#: Where ActiveAgent's heuristics (``expect.diagnose``) come among the failed gates; each is its own fault.
_DIAGNOSIS_RANKS = {"missing_capability": 30, "ungrounded_answer": 50}


def gate_order() -> tuple[str, ...]:
    """Gates are reported in ActiveAgent's diagnosis order: the most mechanical cause first (with its two
    heuristics, ``expect.diagnose``, where its Diagnosis#call tries them)."""
    return _ranked(graders())[0]


#: (the graders' table it was computed for, (gate order, graders by rank)): the last one computed.
_last_ranked: tuple[tuple[Grader, ...], tuple[tuple[str, ...], tuple[Grader, ...]]] | None = None


def _ranked(table: tuple[Grader, ...]) -> tuple[tuple[str, ...], tuple[Grader, ...]]:
    """The gate order and the graders by rank, for one state of the graders' table (computed once).

    Kept for the table *object* (``graders()`` returns the same tuple until a grader is registered or
    removed): an ``lru_cache`` keyed by the table hashed its eleven frozen graders, every field of each,
    on every pair graded (issue 42, item 4)."""
    global _last_ranked
    last = _last_ranked
    if last is not None and last[0] is table:
        return last[1]
    ranks = {**{g.name: g.gate_rank for g in table}, **_DIAGNOSIS_RANKS}
    ranked = (tuple(sorted(ranks, key=lambda name: ranks[name])),
              tuple(sorted(table, key=lambda g: g.gate_rank)))
    _last_ranked = (table, ranked)
    return ranked


def _fault_of(name: str) -> str:
    """The fault a failed gate stands for (a diagnosis heuristic is its own fault)."""
    try:
        found = grader(name)
    except KeyError:
        return name
    return found.gate_fault or found.fault


#: Faults, most mechanical first: a non-passing result gets the first one that applies (the order of
#: ActiveAgent's diagnosis: an empty answer, then tool errors, tools, content, quality). Built from the
#: graders' table, with the ActiveAgent heuristics of ``expect.diagnose`` among them.
FAULTS = tuple(dict.fromkeys(
    ("run_error", "judge_unavailable", "not_gradable")
    + tuple(grader(n).fault if n not in _DIAGNOSIS_RANKS else n for n in gate_order())
))

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

    grading = Grading(scenario, replay, set(scenario.expect.gates), judge, assertions)
    try:
        for each in graders():
            each.grade(grading)
    except Stop as stop:
        return Grades(status=ERRORED, score=0.0, scores=grading.scores if stop.keep_scores else {},
                      fault=stop.fault, details=grading.details)
    scores, details, gates = grading.scores, grading.details, grading.gates

    # Nothing to score but a present answer: the answer is all the scenario asks for.
    checks = grading.failed_checks
    score = _weighted_mean(scores, dict(scenario.weights)) if scores else (0.0 if checks else 1.0)
    fired = _diagnose(scenario, replay, scores, details) | set(checks)
    failed_gates = [c for c in gate_order() if c in fired
                    or (c in gates and c in scores and grader(c).gate_failed(scores[c], details))]
    ungated = [c for c in checks if c not in gates]
    if ungated:  # its own fault, ahead of what the empty text fails
        fault = grader(ungated[0]).fault
        details[fault] = True
        return Grades(status=FAILED, score=score, scores=scores, fault=fault, details=details)
    if failed_gates:
        details["failed_gates"] = failed_gates
        return Grades(status=FAILED, score=score, scores=scores, fault=_fault_of(failed_gates[0]),
                      details=details)
    if score >= scenario.pass_threshold:
        return Grades(status=PASSED, score=score, scores=scores, details=details)
    return Grades(status=FAILED, score=score, scores=scores, fault=_fault(grading), details=details)


def _weighted_mean(scores: dict[str, float], weights: dict[str, float]) -> float:
    """The score: the mean of the criteria, each counting its weight (1 unless the scenario says)."""
    total = sum(weights.get(c, 1.0) for c in scores)
    if not scores or total <= 0:
        return 0.0
    return round(sum(value * weights.get(c, 1.0) for c, value in scores.items()) / total, 6)


def _diagnose(
    scenario: Scenario, replay: Replay, scores: dict[str, float], details: dict[str, Any]
) -> set[str]:
    """The ActiveAgent heuristics the scenario asks for that fire on this answer (each quoted in
    ``details``)."""
    answer = replay.answer or ""
    if not scenario.expect.diagnose or not answer.strip():
        return set()
    # Loaded by the scenarios that ask for a heuristic (its regexes compile at import: start-up time).
    diagnosis = evaluation.diagnosis
    called = [c.name for c in replay.tool_calls]
    found = {}
    if "missing_capability" in scenario.expect.diagnose:
        found["missing_capability"] = diagnosis.missing_capability(answer, called, scores,
                                                                   scenario.pass_threshold)
    if "ungrounded_answer" in scenario.expect.diagnose:
        found["ungrounded_answer"] = diagnosis.ungrounded_answer(answer, [t.name for t in scenario.tools],
                                                                 called)
    fired = {name: quote for name, quote in found.items() if quote is not None}
    if fired:
        details["diagnosis"] = fired
    return set(fired)


def _fault(grading: Grading) -> str:
    """Why a scenario failed on its mean score: the first criterion, in gate order, that takes the blame."""
    ranked = _ranked(graders())[1]
    return next((g.fault for g in ranked if g.blamed is not None and g.blamed(grading)), "low_quality")


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
    criterion = weighted_criterion()  # the list's score and outcomes are its criterion's
    details[criterion] = [o.as_detail() for o in verdict.children]
    details["weighted"] = {"threshold": expect.threshold, "reason": verdict.reason}
    if verdict.passed:
        return Grades(status=PASSED, score=score, scores={criterion: score}, details=details)
    return Grades(status=FAILED, score=score, scores={criterion: score}, fault=verdict.fault, details=details)
