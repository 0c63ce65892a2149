"""What a grade function reads and writes (:class:`Grading`), and how it is declared (:class:`Grader`).

The half of a criterion that grades (the catalog half is
:mod:`evaljobs.catalog.criteria`); pure functions over the scenario and the replay.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from evaljobs.catalog import Scenario, patterns
from evaljobs.evaluation.replay import Replay, ToolCall


@dataclass
class Grading:
    """One answer being graded: what the graders read, and the scores and details they add."""

    scenario: Scenario
    replay: Replay
    #: Criteria that fail the scenario on their own (``expect.gate``, and the judge unless ``gate: false``).
    gates: set[str]
    #: ``judge(scenario, replay) -> JudgeVerdict | None`` (:data:`evaljobs.evaluation.grading.Judge`).
    judge: Callable[..., Any] | None
    #: ``run(assertion, answer, scenario) -> (passed, score, reason)`` (``grading.AssertionRunner``).
    assertions: Callable[..., Any] | None
    scores: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    #: Checks that failed the answer outright, without a score (an empty answer): the scenario fails with
    #: the first one's fault unless it is a gate.
    failed_checks: list[str] = field(default_factory=list)

    @property
    def answer(self) -> str:
        return self.replay.answer or ""

    @property
    def tool_errors(self) -> list[ToolCall]:
        return [c for c in self.replay.tool_calls if c.error]

    def applies(self, name: str) -> bool:
        """Whether the scenario grades ``name``: its ``criteria`` name it (or name none), or it is a gate."""
        criteria = self.scenario.criteria
        return criteria is None or name in criteria or name in self.gates


class Stop(Exception):
    """The answer cannot be graded: the pair is ``errored`` with ``fault`` (``not_gradable``,
    ``judge_unavailable``), with the scores so far unless ``keep_scores`` is False."""

    def __init__(self, fault: str, keep_scores: bool = True):
        super().__init__(fault)
        self.fault = fault
        self.keep_scores = keep_scores


def _value_failed(value: float, details: dict[str, Any]) -> bool:
    return value < 1.0


class Grader(NamedTuple):
    """How one criterion grades (its name is the criterion's, :mod:`evaljobs.catalog.criteria`)."""

    name: str
    #: ``grade(grading)``: adds ``grading.scores[name]`` (0..1) when the criterion applies, and its details;
    #: raises :class:`Stop` when the answer cannot be graded.
    grade: Callable[[Grading], None]
    #: The fault a failure of this criterion stands for.
    fault: str
    #: Where a failed gate of this criterion comes in the order faults are reported (ActiveAgent's
    #: diagnosis order: the most mechanical cause first); a new criterion comes last by default.
    gate_rank: int = 1000
    #: The fault of a failed gate when it is not ``fault`` (an empty answer gated is a ``run_error``).
    gate_fault: str | None = None
    #: ``gate_failed(score, details)``: whether the gate fails (default: a score below 1).
    gate_failed: Callable[[float, dict[str, Any]], bool] = _value_failed
    #: ``blamed(grading)``: whether a scenario failing on its mean score, with no gate failed, is blamed on
    #: this criterion (the first one in ``gate_rank`` order; none: the fault is ``low_quality``).
    blamed: Callable[[Grading], bool] | None = None
    #: ActiveAgent's ``Scorer.mean`` counts this criterion all or nothing (its ``forbidden_content`` is 0 on
    #: any hit), where evaljobs scores the fraction (``expect.diagnose``'s readings use ActiveAgent's mean).
    all_or_nothing: bool = False
    #: ``text_check(text, values) -> failures``: a promptfoo built-in assertion mapped to this criterion's key
    #: (``{kind: builtin, expect: {contains: [...]}}``) checks a transformed output with it, one phrase per
    #: failure (None: it maps to no built-in assertion).
    text_check: Callable[[str, Sequence[str]], list[str]] | None = None
    #: ``explain(details) -> lines``: what its details say of a failed answer, one fact per line (the
    #: JUnit failure message and logs: :func:`evaljobs.reports.junit.grade_lines`).
    explain: Callable[[dict[str, Any]], list[str]] = lambda details: []


def scored_below_one(name: str) -> Callable[[Grading], bool]:
    """``blamed`` for a criterion whose score says it failed."""
    return lambda grading: grading.scores.get(name, 1.0) < 1.0


def value_grader(name: str, passes: Callable[[Replay, Any], bool], *, fault: str,
                 gate_rank: int = 1000) -> Grader:
    """The grader of a criterion shaped like ``token_budget`` (one value, ``Expect.value(name)``): 1 when
    ``passes(replay, value)``, else 0, when the value is set and the criterion applies."""

    def grade(grading: Grading) -> None:
        value = grading.scenario.expect.value(name)
        if value is not None and grading.applies(name):
            grading.scores[name] = 1.0 if passes(grading.replay, value) else 0.0

    return Grader(name, grade, fault=fault, gate_rank=gate_rank)


def as_json(value: Any) -> str:
    """A detail's value in an explanation line."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def listed(key: str, label: str) -> Callable[[dict[str, Any]], list[str]]:
    """``explain`` for a criterion whose details list what failed under ``key``: one line, ``label: …``."""
    def explain(details: dict[str, Any]) -> list[str]:
        items = details.get(key)
        return [f"{label}: " + ", ".join(as_json(item) for item in items)] if items else []
    return explain


def judgement_passes(verdict: Any, score: float, threshold: float | None) -> bool:
    """promptfoo's llm-rubric rule, for a judged criterion and a weighted list's judge entries alike: the
    judge's ``pass`` (true when it gave none), and, with a threshold, the score reaching it. ``verdict`` is a
    :class:`evaljobs.evaluation.grading.JudgeVerdict`."""
    passed = verdict.passed is not False
    return passed and (threshold is None or score >= threshold)


def fraction(hits: int, total: int) -> float:
    return hits / total if total else 1.0


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


__all__ = ["Grader", "Grading", "Stop", "as_json", "fraction", "judgement_passes", "listed",
           "pattern_matches", "scored_below_one", "value_grader"]
