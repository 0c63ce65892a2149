"""Live tool specs (``http`` / ``mcp`` on a catalog tool): the pure checks, no network.

The catalog validator checks a live tool's spec here; calling the endpoint
and listing an MCP server's tools is :mod:`evaljobs.tools`,
a layer above. An MCP tool *import* (``{mcp: {...}, only: [...]}`` without a
``name``) stands for tools only the server can list: it is expanded in an
explicit step before validation (:func:`evaljobs.tools.expand_source`).
"""
from __future__ import annotations

import re
from typing import Any

from evaljobs.errors import suggest

LIVE_KINDS = ("http", "mcp")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
HTTP_KEYS = ("url", "method", "headers", "timeout")
MCP_KEYS = ("url", "command", "env", "cwd", "headers", "timeout", "tool")
#: Keys of a catalog tool entry that imports tools from an MCP server (it has no ``name``).
MCP_IMPORT_KEYS = ("mcp", "only")
#: The problem reported for an MCP tool import that reached validation unexpanded.
MCP_IMPORT_NOT_EXPANDED = (
    "an MCP tool import ({mcp, only}) must be expanded first: only the server can list "
    "its tools (Session.load and the evaljobs commands do it; in code call "
    "evaljobs.tools.expand_source); or give each tool a 'name'"
)


def validate_live_spec(kind: str, spec: Any) -> list[str]:
    """Problems with an ``http`` or ``mcp`` tool spec, one line each (empty if it is fine).

    Plain validation with no network or SDK imports, so the catalog parser can
    call it: ``[f"{where}: {p}" for p in validate_live_spec("http", raw["http"])]``.
    """
    if kind not in ("http", "mcp"):
        return [f"unknown live tool kind {kind!r}; use 'http' or 'mcp'"]
    if not isinstance(spec, dict):
        return [f"{kind} must be a mapping ({', '.join(HTTP_KEYS if kind == 'http' else MCP_KEYS)}), "
                f"not {type(spec).__name__}"]
    valid = HTTP_KEYS if kind == "http" else MCP_KEYS
    problems = [f"{kind}: unknown key {key!r}{suggest(key, valid)}" for key in spec if key not in valid]
    url = spec.get("url")
    if url is not None and (not isinstance(url, str) or not re.match(r"https?://[^\s/]+", url)):
        problems.append(f"{kind}.url must be an http:// or https:// URL, not {url!r}")
    timeout = spec.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or timeout <= 0):
        problems.append(f"{kind}.timeout must be a positive number of seconds, not {timeout!r}")
    for name in ("headers", "env"):
        value = spec.get(name)
        if value is not None and (not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
            problems.append(f"{kind}.{name} must map names to strings (use \"${{NAME}}\" for secrets)")
    if kind == "http":
        if url is None:
            problems.append("http needs 'url'")
        method = spec.get("method")
        if method is not None and (not isinstance(method, str) or method.upper() not in HTTP_METHODS):
            problems.append(f"http.method must be one of {', '.join(HTTP_METHODS)}, not {method!r}")
        return problems
    command = spec.get("command")
    if (url is None) == (command is None):
        problems.append("mcp needs exactly one of 'url' (streamable HTTP) or 'command' (a list: program and "
                        "arguments, spoken to over stdio)")
    if command is not None and (not isinstance(command, list) or not command
                                or not all(isinstance(c, str) and c for c in command)):
        problems.append(f"mcp.command must be a non-empty list of strings, not {command!r}")
    if url is not None and (spec.get("env") is not None or spec.get("cwd") is not None):
        problems.append("mcp.env and mcp.cwd apply to a 'command' server, not to a 'url'")
    if command is not None and spec.get("headers") is not None:
        problems.append("mcp.headers apply to a 'url' server, not to a 'command'")
    cwd, tool = spec.get("cwd"), spec.get("tool")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        problems.append(f"mcp.cwd must be a directory path, not {cwd!r}")
    if tool is not None and (not isinstance(tool, str) or not tool):
        problems.append(f"mcp.tool must be the server's tool name, not {tool!r}")
    return problems


def is_mcp_import(entry: Any) -> bool:
    """A tool entry ``{mcp: {...}, only: [...]}`` without a ``name``: the server's tools, to be listed."""
    return isinstance(entry, dict) and "mcp" in entry and "name" not in entry


def has_mcp_imports(data: Any) -> bool:
    """Whether catalog data has any MCP tool import (then it needs the expansion step)."""
    if not isinstance(data, dict):
        return False
    raw_groups = data.get("groups")
    groups = raw_groups if isinstance(raw_groups, list) else []
    lists = [data.get("scenarios")] + [g.get("scenarios") for g in groups if isinstance(g, dict)]
    return any(is_mcp_import(tool)
               for scenarios in lists if isinstance(scenarios, list)
               for scenario in scenarios
               if isinstance(scenario, dict) and isinstance(scenario.get("tools"), list)
               for tool in scenario["tools"])


__all__ = [
    "HTTP_KEYS",
    "HTTP_METHODS",
    "LIVE_KINDS",
    "MCP_IMPORT_KEYS",
    "MCP_IMPORT_NOT_EXPANDED",
    "MCP_KEYS",
    "has_mcp_imports",
    "is_mcp_import",
    "validate_live_spec",
]
