"""MCP tool imports: list a server's tools and write them into catalog data, as an explicit step.

A catalog tool entry ``{mcp: {url | command}, only: [names]}`` (no ``name``)
imports the server's tool schemas instead of redeclaring them. Listing them
is I/O (a subprocess or an HTTP connection), so catalog loading never does it;
the session performs this step between reading and validating::

    source = expand_source(read_catalog(path))
    catalog = parse_source(source, providers=providers)
"""
from __future__ import annotations

import copy
import json
import re
from typing import TYPE_CHECKING, Any

from evaljobs.catalog.load import CatalogSource
from evaljobs.catalog.model import CatalogError
from evaljobs.catalog.toolspec import MCP_IMPORT_KEYS, is_mcp_import, validate_live_spec
from evaljobs.errors import suggest
from evaljobs.tools._common import LiveToolError, describe
from evaljobs.tools.allowance import refusal
from evaljobs.lazy import submodules
from evaljobs.tools.roots import catalog_root, folder_of

if TYPE_CHECKING:
    from evaljobs.tools.live import LiveTools

#: The live tools (their HTTP client, the MCP sessions), loaded when a catalog imports an MCP server's
#: tools: a catalog without imports is expanded by every submit, and a Redis submit calls no tool.
_tools = submodules("evaljobs.tools", ("live",))

_TOOL_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")


def expand_source(source: CatalogSource, *, live: LiveTools | None = None) -> CatalogSource:
    """``source`` with its MCP tool imports expanded (the same object when it has none).

    Raises :class:`~evaljobs.catalog.CatalogError` naming the scenario and tool
    entry when a server cannot be listed or lacks a tool named in ``only``.
    """
    if not source.has_mcp_imports:
        return source
    with catalog_root(folder_of(source.source)):  # its relative paths mean the catalog's folder
        return source.with_data(expand_catalog_tools(source.data, source=source.source, live=live))


def expand_mcp_tools(spec: dict[str, Any], *, live: LiveTools | None = None) -> list[dict[str, Any]]:
    """Native tool dicts for a catalog entry ``{mcp: {...}, only: [names]}``.

    The server's schemas are imported instead of redeclared; each returned tool
    keeps the ``mcp`` spec (plus ``tool:`` when its native name had to change),
    so calls go to that server. Raises :class:`LiveToolError` (one line).
    """
    if not isinstance(spec, dict) or "mcp" not in spec:
        raise LiveToolError("an MCP tool import needs 'mcp: {url | command}' "
                            "(and optionally 'only: [names]')")
    unknown = [k for k in spec if k not in MCP_IMPORT_KEYS]
    if unknown:
        hint = suggest(unknown[0], MCP_IMPORT_KEYS)
        raise LiveToolError(f"unknown key {unknown[0]!r} in an MCP tool import{hint}; to declare one tool "
                            f"give it a 'name'")
    server = spec["mcp"]
    problems = validate_live_spec("mcp", server)
    if problems:
        raise LiveToolError("; ".join(problems))
    refused = refusal("an MCP tool import", "mcp", server)
    if refused:  # before the server is started or asked: the operator's rule (evaljobs.tools.allowance)
        raise LiveToolError(refused)
    if server.get("tool") is not None:
        raise LiveToolError("mcp.tool names one tool: give the entry a 'name' to declare it, or use 'only' "
                            "to import several")
    only = spec.get("only")
    if only is not None and (not isinstance(only, list) or not all(isinstance(n, str) and n for n in only)):
        raise LiveToolError(f"'only' must be a list of the server's tool names, not {only!r}")
    owned = live is None
    live = live or _tools("live").LiveTools()
    try:
        listed = live.list_mcp_tools(server)
    finally:
        if owned:
            live.close()
    by_name = {t["name"]: t for t in listed}
    if only is not None:
        missing = [n for n in only if n not in by_name]
        if missing:
            offered = ", ".join(by_name) or "none"
            raise LiveToolError(f"MCP server {describe(server)} has no tool {missing[0]!r} "
                                f"(it offers: {offered}){suggest(missing[0], list(by_name))}")
        listed = [by_name[n] for n in only]
    out = []
    for tool in listed:
        name = _TOOL_NAME_BAD.sub("_", tool["name"])[:64]
        mcp = dict(server)
        if name != tool["name"]:
            mcp["tool"] = tool["name"]
        out.append({"name": name, "description": tool["description"], "parameters": tool["parameters"],
                    "mcp": mcp})
    return out


def expand_catalog_tools(data: Any, *, source: str = "<catalog>", live: LiveTools | None = None) -> Any:
    """Native catalog data with every ``{mcp: ..., only: [...]}`` tool entry expanded.

    Call it on loaded catalog data before ``parse_catalog``; each server is
    listed once however many scenarios use it. Returns a copy (the input is not
    changed); raises :class:`CatalogError` naming the scenario and tool entry.
    """
    if not isinstance(data, dict):
        return data
    out = copy.deepcopy(data)
    scenario_lists = [("", out.get("scenarios"))]
    for group in out.get("groups") or []:
        if isinstance(group, dict):
            scenario_lists.append((f"group '{group.get('name')}': ", group.get("scenarios")))
    imports = [(prefix, scenario, i, entry)
               for prefix, scenarios in scenario_lists if isinstance(scenarios, list)
               for scenario in scenarios
               if isinstance(scenario, dict) and isinstance(scenario.get("tools"), list)
               for i, entry in enumerate(scenario["tools"])
               if is_mcp_import(entry)]
    if not imports:
        return out
    problems: list[str] = []
    cache: dict[str, list[dict[str, Any]] | LiveToolError] = {}
    owned = live is None
    live = live or _tools("live").LiveTools()
    try:
        for prefix, scenario, i, entry in imports:
            key = json.dumps(entry, sort_keys=True, default=str)
            if key not in cache:
                try:
                    cache[key] = expand_mcp_tools(entry, live=live)
                except LiveToolError as exc:
                    cache[key] = exc
            found = cache[key]
            if isinstance(found, LiveToolError):
                problems.append(f"{source}: {prefix}scenario '{scenario.get('key')}': tool #{i + 1}: {found}")
    finally:
        if owned:
            live.close()
    if problems:
        raise CatalogError(problems)
    for _, scenario, _, _ in imports:
        tools: list[dict[str, Any]] = []
        for entry in scenario["tools"]:
            if is_mcp_import(entry):
                expanded = cache[json.dumps(entry, sort_keys=True, default=str)]
                assert not isinstance(expanded, LiveToolError)  # raised as a problem above
                tools.extend(copy.deepcopy(expanded))
            else:
                tools.append(entry)
        scenario["tools"] = tools
    return out


__all__ = ["expand_catalog_tools", "expand_mcp_tools", "expand_source"]
