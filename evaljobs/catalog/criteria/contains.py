"""``contains``: strings the answer must contain (case-insensitive), and ActiveAgent's ``patterns``."""
from __future__ import annotations

from evaljobs.catalog.criteria.base import Criterion, Shown
from evaljobs.catalog.model import Expect


def _show(expect: Expect) -> Shown | None:
    return Shown("contains: ", expect.contains) if expect.contains else None


CRITERION = Criterion("contains", present=lambda e: bool(e.contains or e.patterns), show=_show,
                      enabled_by=("contains", "patterns"))
