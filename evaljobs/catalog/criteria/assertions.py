"""``assertions``: imported assertions run natively, by a transform chain or an external runtime (a
``refused`` entry, dropped at import with its reason, enables nothing)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaljobs.catalog.criteria.base import Criterion, Field, Walk
from evaljobs.catalog.model import ASSERTION_KINDS, SET_ENTRIES, Expect
from evaljobs.catalog.text import kind_of, show

_ASSERTIONS: dict[str, Any] = {
    "type": ["array", "null"],
    "items": {"type": "object", "required": ["kind"],
              "properties": {"kind": {"enum": list(ASSERTION_KINDS)},
                             "weight": {"type": "number", "minimum": 0}}},
}


def _entries(walk: Walk, path: tuple, where: str, raw: Any, what: str) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        walk.add(path, where, f"{what} must be a list of assertions, not {kind_of(raw)}")
        return ()
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or item.get("kind") not in ASSERTION_KINDS:
            walk.add(path + (i,), where, f"{what}[{i}] must be a mapping with 'kind' "
                                         f"({', '.join(ASSERTION_KINDS)}), not {show(item)}")
            continue
        weight = item.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            walk.add(path + (i, "weight"), where,
                     f"{what}[{i}].weight must be a number >= 0, not {show(weight)}")
            continue
        limit = item.get("max_usd")
        if item["kind"] == "cost" and (isinstance(limit, bool) or not isinstance(limit, (int, float))
                                       or not limit >= 0):
            walk.add(path + (i, "max_usd"), where, f"{what}[{i}].max_usd must be a number of USD >= 0 "
                                                   f"(the most the call may cost), not {show(limit)}")
            continue
        if item["kind"] == "set":  # a nested list: its entries follow the same rules
            _entries(walk, path + (i, SET_ENTRIES), where, item.get(SET_ENTRIES) or [],
                     f"{what}[{i}].{SET_ENTRIES}")
        value = walk.json_value(path + (i,), where, f"{what}[{i}]", item)
        if isinstance(value, dict):
            out.append(value)
    return tuple(out)


def _read(walk: Walk, path: tuple, where: str, raw: Mapping[str, Any], declared: list[str]) -> dict[str, Any]:
    entries = _entries(walk, path + ("assertions",), where, raw.get("assertions"), "expect.assertions")
    return {"assertions": entries}


def _body(expect: Expect) -> dict[str, Any]:
    return {"assertions": [dict(a) for a in expect.assertions]} if expect.assertions else {}


CRITERION = Criterion(
    "assertions", present=lambda e: any(a.get("kind") != "refused" for a in e.assertions),
    enabled_by=("assertions",), grades_weighted=True,
    fields=(Field("assertions", _ASSERTIONS, "Imported assertions (builtin, javascript, python, json_schema, "
                                             "cost; judge, latency, set when weighted).", later=True),),
    read=_read, body=_body)
