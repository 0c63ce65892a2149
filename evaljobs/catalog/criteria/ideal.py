"""``ideal``: reference answers, compared with ``expect.ideal_grader`` (OpenAI evals', Inspect's)."""
from __future__ import annotations

from evaljobs.catalog.criteria.base import Criterion

CRITERION = Criterion("ideal", present=lambda e: bool(e.ideal), enabled_by=("ideal",))
