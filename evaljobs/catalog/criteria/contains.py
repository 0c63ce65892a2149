"""``contains``: strings the answer must contain (case-insensitive), and ActiveAgent's ``patterns``."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaljobs.catalog.criteria.base import STRINGS, Criterion, Field, Shown, Walk
from evaljobs.catalog.model import Expect


def _show(expect: Expect) -> Shown | None:
    return Shown("contains: ", expect.contains) if expect.contains else None


def _read(walk: Walk, path: tuple, where: str, raw: Mapping[str, Any], declared: list[str]) -> dict[str, Any]:
    contains = walk.strings(path + ("contains",), where, "expect.contains", raw.get("contains"))
    patterns = walk.strings(path + ("patterns",), where, "expect.patterns", raw.get("patterns"))
    return {"contains": tuple(sorted(contains)), "patterns": tuple(sorted(patterns))}


def _body(expect: Expect) -> dict[str, Any]:
    patterns = list(expect.patterns)
    return {"contains": list(expect.contains), **({"patterns": patterns} if patterns else {})}


CRITERION = Criterion(
    "contains", present=lambda e: bool(e.contains or e.patterns), show=_show,
    enabled_by=("contains", "patterns"),
    fields=(Field("contains", STRINGS, "Strings the answer must contain (case-insensitive)."),
            Field("patterns", STRINGS, "Regular expressions the answer must match (each counts like a "
                                       "`contains` string).", later=True)),
    read=_read, body=_body)
