"""``expected_tools``: the tools the model must call (``expect.tools``), with a subset of arguments."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from evaljobs.catalog.criteria.base import NONEMPTY, Criterion, Field, Shown, Walk
from evaljobs.catalog.model import Expect, ExpectedTool
from evaljobs.catalog.text import did_you_mean, kind_of, show

_TOOL_KEYS = ("name", "arguments")
_TOOL: dict[str, Any] = {"anyOf": [NONEMPTY, {
    "type": "object", "additionalProperties": False,
    "properties": {"name": {**NONEMPTY, "description": "The tool's name (one of the scenario's tools)."},
                   "arguments": {"type": ["object", "null"],
                                 "description": "Arguments the call must have (a subset of its own)."}},
    "required": ["name"]}]}


def _show(expect: Expect) -> Shown | None:
    if not expect.tools:
        return None
    calls = tuple(f"{t.name}({json.dumps(t.arguments, sort_keys=True)})" for t in expect.tools)
    return Shown("calls: ", calls)


def _tools(walk: Walk, path: tuple, where: str, raw: Any, declared: list[str]) -> tuple[ExpectedTool, ...]:
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, (str, dict)) else raw
    if not isinstance(items, list):
        walk.add(path, where, f"expect.tools must be a list of tool names or {{name, arguments}}, "
                              f"not {kind_of(raw)}")
        return ()
    out: list[ExpectedTool] = []
    for i, item in enumerate(items):
        ipath = path + (i,) if isinstance(raw, list) else path
        arguments: Any = {}
        if isinstance(item, dict):
            walk.unknown_keys(ipath, f"{where}: expect.tools[{i}]", item, _TOOL_KEYS)
            name, arguments = item.get("name"), item.get("arguments")
            if arguments is None:
                arguments = {}
            elif not isinstance(arguments, dict):
                walk.add(ipath + ("arguments",), where,
                         f"expect.tools[{i}].arguments must be a mapping, not {kind_of(arguments)}")
                continue
            arguments = walk.json_value(ipath + ("arguments",), where, f"expect.tools[{i}].arguments",
                                        arguments)
        else:
            name = item
        if not isinstance(name, str) or not name:
            walk.add(ipath, where, f"expect.tools[{i}] needs a tool name, not {show(name)}")
            continue
        if name not in declared:
            have = f"declared: {', '.join(declared)}" if declared else "the scenario declares no tools"
            walk.add(ipath, where,
                     f"expect.tools: {name!r} is not one of this scenario's tools ({have}); "
                     f"declare it under 'tools' or fix the name{did_you_mean(name, declared, '')}")
            continue
        out.append(ExpectedTool(name=name, arguments=arguments if isinstance(arguments, dict) else {}))
    return tuple(out)


def _read(walk: Walk, path: tuple, where: str, raw: Mapping[str, Any], declared: list[str]) -> dict[str, Any]:
    tools_match = raw.get("tools_match", "all")
    if tools_match not in ("all", "any"):
        walk.add(path + ("tools_match",), where,
                 f"expect.tools_match must be 'all' (every expected tool) or 'any' (one of them), "
                 f"not {show(tools_match)}")
        tools_match = "all"
    return {"tools": _tools(walk, path + ("tools",), where, raw.get("tools"), declared),
            "tools_match": tools_match}


def _body(expect: Expect) -> dict[str, Any]:
    tools = [{"name": t.name, "arguments": t.arguments} for t in expect.tools]
    return {"tools": tools, **({"tools_match": expect.tools_match} if expect.tools_match != "all" else {})}


CRITERION = Criterion(
    "expected_tools", present=lambda e: bool(e.tools), show=_show, enabled_by=("tools",),
    fields=(Field("tools", {"anyOf": [{"anyOf": [_TOOL, {"type": "array", "items": _TOOL}]},
                                      {"type": "null"}]},
                  "The tools the model must call: names, or {name, arguments}."),
            Field("tools_match", {"anyOf": [{"enum": ["all", "any"]}, {"type": "null"}]},
                  "'all': every expected tool must be called; 'any': one of them.", later=True)),
    read=_read, body=_body)
