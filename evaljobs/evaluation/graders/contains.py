"""``contains``: the fraction of expected strings (case-insensitive) and patterns the answer has."""
from __future__ import annotations

from collections.abc import Sequence

from evaljobs.evaluation.graders.base import (Grader, Grading, fraction, listed, pattern_matches,
                                             scored_below_one)


def _grade(grading: Grading) -> None:
    expect, answer, scores, details = grading.scenario.expect, grading.answer, grading.scores, grading.details
    lowered = answer.lower()
    if (expect.contains or expect.patterns) and grading.applies("contains"):
        missing = [s for s in expect.contains if s.lower() not in lowered]
        missing += [p for p in expect.patterns if not pattern_matches(answer, p)]
        total = len(expect.contains) + len(expect.patterns)
        scores["contains"] = fraction(total - len(missing), total)
        if missing:
            details["missing"] = missing


def _missing(text: str, wanted: Sequence[str]) -> list[str]:
    lowered = text.lower()
    return [f"missing {c!r}" for c in wanted if c.lower() not in lowered]


GRADER = Grader("contains", _grade, fault="missing_content", gate_rank=70,
                blamed=scored_below_one("contains"), text_check=_missing,
                explain=listed("missing", "missing"))
