"""``not_contains``: strings the answer must not contain, and ActiveAgent's ``forbidden_patterns``."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaljobs.catalog.criteria.base import STRINGS, Criterion, Field, Shown, Walk
from evaljobs.catalog.model import Expect


def _show(expect: Expect) -> Shown | None:
    return Shown("does not contain: ", expect.not_contains) if expect.not_contains else None


def _read(walk: Walk, path: tuple, where: str, raw: Mapping[str, Any], declared: list[str]) -> dict[str, Any]:
    not_contains = walk.strings(path + ("not_contains",), where, "expect.not_contains",
                                raw.get("not_contains"))
    forbidden = walk.strings(path + ("forbidden_patterns",), where, "expect.forbidden_patterns",
                             raw.get("forbidden_patterns"))
    return {"not_contains": tuple(sorted(not_contains)), "forbidden_patterns": tuple(sorted(forbidden))}


def _body(expect: Expect) -> dict[str, Any]:
    forbidden = list(expect.forbidden_patterns)
    return {"not_contains": list(expect.not_contains),
            **({"forbidden_patterns": forbidden} if forbidden else {})}


CRITERION = Criterion(
    "not_contains", present=lambda e: bool(e.not_contains or e.forbidden_patterns), show=_show,
    enabled_by=("not_contains", "forbidden_patterns"),
    fields=(Field("not_contains", STRINGS, "Strings the answer must not contain."),
            Field("forbidden_patterns", STRINGS, "Regular expressions the answer must not match.",
                  later=True)),
    read=_read, body=_body)
