"""``ideal``: the answer matches one of the reference answers, compared with ``expect.ideal_grader``."""
from __future__ import annotations

from typing import Any

from evaljobs.evaluation.graders.base import Grader, Grading, as_json, scored_below_one
from evaljobs.evaluation.reference import reference_matches


def _grade(grading: Grading) -> None:
    expect, scores, details = grading.scenario.expect, grading.scores, grading.details
    if expect.ideal and grading.applies("ideal"):
        hit = reference_matches(grading.answer, expect.ideal, expect.ideal_grader)
        scores["ideal"] = 1.0 if hit else 0.0
        if not hit:
            details["ideal"] = {"grader": expect.ideal_grader, "expected": list(expect.ideal)}


def _explain(details: dict[str, Any]) -> list[str]:
    ideal = details.get("ideal")
    if not isinstance(ideal, dict):
        return []
    expected = ", ".join(as_json(i) for i in ideal.get("expected") or [])
    return [f"reference answer ({ideal.get('grader')}): {expected}"]


GRADER = Grader("ideal", _grade, fault="wrong_answer", gate_rank=90, blamed=scored_below_one("ideal"),
                explain=_explain)
