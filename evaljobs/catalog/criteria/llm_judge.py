"""``llm_judge``: an LLM judge scores the answer against ``expect.judge`` (a rubric); it decides its
criterion on its own threshold and is a gate unless the catalog says ``gate: false``."""
from __future__ import annotations

from evaljobs.catalog.criteria.base import Criterion, Shown
from evaljobs.catalog.model import Expect


def _show(expect: Expect) -> Shown | None:
    return Shown("judge rubric (the judge prompt's RUBRIC): ", block=expect.judge) if expect.judge else None


CRITERION = Criterion("llm_judge", present=lambda e: e.judge is not None, show=_show, enabled_by=("judge",),
                      judged=True)
