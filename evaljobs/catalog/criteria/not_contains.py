"""``not_contains``: strings the answer must not contain, and ActiveAgent's ``forbidden_patterns``."""
from __future__ import annotations

from evaljobs.catalog.criteria.base import Criterion, Shown
from evaljobs.catalog.model import Expect


def _show(expect: Expect) -> Shown | None:
    return Shown("does not contain: ", expect.not_contains) if expect.not_contains else None


CRITERION = Criterion("not_contains", present=lambda e: bool(e.not_contains or e.forbidden_patterns),
                      show=_show, enabled_by=("not_contains", "forbidden_patterns"))
