"""``response_present``: an empty answer fails the scenario outright (a check: it never adds a score)."""
from __future__ import annotations

from evaljobs.evaluation.graders.base import Grader, Grading


def _grade(grading: Grading) -> None:
    if grading.applies("response_present") and not grading.answer.strip():
        grading.failed_checks.append("response_present")


GRADER = Grader("response_present", _grade, fault="empty_answer", gate_rank=10, gate_fault="run_error")
