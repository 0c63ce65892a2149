"""``not_contains``: the fraction of forbidden strings (case-insensitive) and patterns the answer avoids."""
from __future__ import annotations

from collections.abc import Sequence

from evaljobs.evaluation.graders.base import (Grader, Grading, fraction, listed, pattern_matches,
                                             scored_below_one)


def _grade(grading: Grading) -> None:
    expect, answer, scores, details = grading.scenario.expect, grading.answer, grading.scores, grading.details
    lowered = answer.lower()
    if (expect.not_contains or expect.forbidden_patterns) and grading.applies("not_contains"):
        found = [s for s in expect.not_contains if s.lower() in lowered]
        found += [p for p in expect.forbidden_patterns if pattern_matches(answer, p)]
        total = len(expect.not_contains) + len(expect.forbidden_patterns)
        scores["not_contains"] = fraction(total - len(found), total)
        if found:
            details["forbidden"] = found


def _forbidden(text: str, forbidden: Sequence[str]) -> list[str]:
    lowered = text.lower()
    return [f"forbidden {c!r}" for c in forbidden if c.lower() in lowered]


GRADER = Grader("not_contains", _grade, fault="forbidden_content", gate_rank=60,
                blamed=scored_below_one("not_contains"), all_or_nothing=True, text_check=_forbidden,
                explain=listed("forbidden", "forbidden"))
