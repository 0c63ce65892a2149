"""``regex``: the fraction of patterns the answer matches."""
from __future__ import annotations

from collections.abc import Sequence

from evaljobs.catalog import patterns
from evaljobs.evaluation.graders.base import Grader, Grading, fraction, listed, scored_below_one


def _grade(grading: Grading) -> None:
    expect, answer, scores, details = grading.scenario.expect, grading.answer, grading.scores, grading.details
    if expect.regex and grading.applies("regex"):
        unmatched = [r for r in expect.regex if not patterns.search(r, answer)]
        scores["regex"] = fraction(len(expect.regex) - len(unmatched), len(expect.regex))
        if unmatched:
            details["unmatched_regex"] = unmatched


def _unmatched(text: str, regexes: Sequence[str]) -> list[str]:
    return [f"no match for /{r}/" for r in regexes if not patterns.search(r, text)]


GRADER = Grader("regex", _grade, fault="regex_mismatch", gate_rank=80, blamed=scored_below_one("regex"),
                text_check=_unmatched, explain=listed("unmatched_regex", "unmatched regex"))
