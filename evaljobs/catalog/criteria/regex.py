"""``regex``: patterns the answer must match."""
from __future__ import annotations

from evaljobs.catalog.criteria.base import Criterion, Shown
from evaljobs.catalog.model import Expect


def _show(expect: Expect) -> Shown | None:
    return Shown("matches: ", expect.regex) if expect.regex else None


CRITERION = Criterion("regex", present=lambda e: bool(e.regex), show=_show, enabled_by=("regex",))
