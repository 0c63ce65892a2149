"""``regex``: patterns the answer must match."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaljobs.catalog.criteria.base import STRINGS, Criterion, Field, Shown, Walk
from evaljobs.catalog.model import Expect
from evaljobs.catalog.patterns import problem as pattern_problem


def _show(expect: Expect) -> Shown | None:
    return Shown("matches: ", expect.regex) if expect.regex else None


def _read(walk: Walk, path: tuple, where: str, raw: Mapping[str, Any], declared: list[str]) -> dict[str, Any]:
    regexes = walk.strings(path + ("regex",), where, "expect.regex", raw.get("regex"))
    for pattern in regexes:
        trouble = pattern_problem(pattern)
        if trouble:
            walk.add(path + ("regex",), where, f"expect.regex {pattern!r} {trouble}; "
                                               f"fix the pattern (escape special characters with \\)")
    return {"regex": tuple(sorted(regexes))}


CRITERION = Criterion(
    "regex", present=lambda e: bool(e.regex), show=_show, enabled_by=("regex",),
    fields=(Field("regex", STRINGS, "Patterns the answer must match."),), read=_read,
    body=lambda expect: {"regex": list(expect.regex)})
