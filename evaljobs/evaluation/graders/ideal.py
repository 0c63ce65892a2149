"""``ideal``: the answer matches one of the reference answers, compared with ``expect.ideal_grader``."""
from __future__ import annotations

from evaljobs.evaluation.graders.base import Grader, Grading, scored_below_one
from evaljobs.evaluation.reference import reference_matches


def _grade(grading: Grading) -> None:
    expect, scores, details = grading.scenario.expect, grading.scores, grading.details
    if expect.ideal and grading.applies("ideal"):
        hit = reference_matches(grading.answer, expect.ideal, expect.ideal_grader)
        scores["ideal"] = 1.0 if hit else 0.0
        if not hit:
            details["ideal"] = {"grader": expect.ideal_grader, "expected": list(expect.ideal)}


GRADER = Grader("ideal", _grade, fault="wrong_answer", gate_rank=90, blamed=scored_below_one("ideal"))
