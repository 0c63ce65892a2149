"""What a process's operator allows a catalog's live tools to do with its secrets and its machine.

A catalog travels with the run to every worker, and whoever wrote it is not the worker's operator: without
a rule, ``headers: {X-Key: "${AWS_SECRET_ACCESS_KEY}"}`` on an ``http`` tool pointed at ``http://anywhere``
would make the worker send its key there, and ``mcp: {command: […]}`` would run a program of the
catalog's choosing next to the worker's keys. So, on every process that loads or evaluates a catalog
(a worker, and the submitter's own run alike: a catalog is data, whoever wrote it), invariant 20:

* a ``${NAME}`` in an ``http`` tool's ``headers``, or an ``mcp`` server's ``headers`` or ``env``, is
  read only when the operator lists NAME in ``EVALJOBS_ALLOWED_ENV`` (``--allow-env``). Not the names
  the process's own providers read: a provider's key is for its provider's URL, never for a tool;
* a request carrying one goes only to an endpoint under ``EVALJOBS_ALLOWED_BASE_URLS``
  (``--allow-endpoint``): the tool's URL and every redirect an ``http`` tool is answered with;
* an ``mcp: {command: …}`` server is a program the catalog names: it starts only where the operator opted
  in to a catalog's code (``--allow-code``), in a child of basics only (:func:`evaljobs.config.
  code_environment`) plus the allowed variables its ``env`` names, in a PID namespace of its own where
  the system allows (:mod:`evaljobs.isolation`) — the same child a ``python`` assertion gets.

A tool that reads no variable and starts no program sends nothing of the worker's and is honoured as
written. Anything else is refused in one line before any variable is read or any request is made: by
``catalog check`` and ``run`` before a run exists, and by a worker as the pair's error.
"""
from __future__ import annotations

import re
from typing import Any

from evaljobs.catalog.allowance import Allowance, shown
from evaljobs.config import settings
from evaljobs.errors import UsageError
from evaljobs.extras import tool_lists
from evaljobs.isolation import CODE_HINT

#: A `${NAME}` reference in a live tool's url, headers or env.
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

_ENV_HINT = "to let them, list it in EVALJOBS_ALLOWED_ENV or pass `evaljobs worker --allow-env NAME`"
_URL_HINT = ("to let them, list the endpoint in EVALJOBS_ALLOWED_BASE_URLS or pass `evaljobs worker "
             "--allow-endpoint URL`")


class ToolNotAllowed(UsageError):
    """A live tool this process's operator does not allow (one line): the pair errors, nothing is sent."""


def references(text: Any) -> list[str]:
    """The ``${NAME}`` variables ``text`` reads (none if it is not a string)."""
    return ENV_REF.findall(text) if isinstance(text, str) else []


def tool_variables(spec: Any) -> set[str]:
    """Every variable an ``http``/``mcp`` spec reads: ``${NAME}`` in its headers and env (a URL is sent as
    written: nothing in it is read)."""
    if not isinstance(spec, dict):
        return set()
    names: set[str] = set()
    for part in ("headers", "env"):
        values = spec.get(part)
        for value in values.values() if isinstance(values, dict) else ():
            names.update(references(value))
    return names


def allowance() -> Allowance:
    """The operator's allow-lists as they apply to tools: no variable is a tool's own."""
    now = settings()
    return Allowance.of((), now.allowed_base_urls, now.allowed_env)


def sends_to(names: set[str] | list[str], url: str) -> bool:
    """Whether variables ``names`` may go to ``url`` (always, when there are none)."""
    allowed = allowance()
    return all(allowed.sends(name, url) for name in names)


def refusal(where: str, kind: str, spec: Any) -> str | None:
    """Why the ``kind`` (``http``/``mcp``) spec of a tool (``where``: who it is) may not be used here, or
    None. Checks names, URLs and the opt-in only: nothing is read."""
    if not isinstance(spec, dict):
        return None
    if kind == "mcp" and spec.get("command") and not settings().allow_code:
        command = " ".join(str(part) for part in spec["command"]) if isinstance(spec["command"], list) \
            else str(spec["command"])
        return f"{where} starts the MCP server '{command}' on this machine: {CODE_HINT}"
    names = sorted(tool_variables(spec))
    if not names:
        return None
    allowed = allowance()
    unknown = [name for name in names if name not in allowed.readable]
    if unknown:
        return (f"{where} reads {', '.join(unknown)}, which this process's operator does not allow a "
                f"catalog's tools to read ({_ENV_HINT}); nothing was read or sent")
    url = spec.get("url")
    if isinstance(url, str) and not sends_to(names, url):
        return (f"{where} would send this process's {', '.join(names)} to {shown(url)}, where its "
                f"operator does not let a catalog's tools send it ({_URL_HINT}); nothing was sent")
    return None


def tool_refusal(tool: Any, where: str | None = None) -> str | None:
    """Why a catalog tool (a parsed ``Tool`` or its raw entry) may not be used here, or None."""
    name = tool.get("name") if isinstance(tool, dict) else getattr(tool, "name", None)
    label = where or (f"tool '{name}'" if name else "an MCP tool import")
    for kind in ("http", "mcp"):
        spec = tool.get(kind) if isinstance(tool, dict) else getattr(tool, kind, None)
        found = refusal(label, kind, spec)
        if found:
            return found
    return None


def catalog_refusal(data: Any) -> str | None:
    """The first of a catalog's live tools (raw data or a parsed ``Catalog``) this process may not use,
    as one line naming its scenario; None if every one is allowed."""
    for scenario, tools in tool_lists(data):
        for number, tool in enumerate(tools, 1):
            name = tool.get("name") if isinstance(tool, dict) else getattr(tool, "name", None)
            found = tool_refusal(tool, f"{scenario}: tool " + (f"'{name}'" if name else f"#{number}"))
            if found:
                return found
    return None


def check_tools(tools: Any) -> None:
    """Raise :class:`ToolNotAllowed` for the first of ``tools`` this process may not use."""
    for tool in tools or ():
        found = tool_refusal(tool)
        if found:
            raise ToolNotAllowed(found)


__all__ = ["ENV_REF", "ToolNotAllowed", "allowance", "catalog_refusal", "check_tools", "references",
           "refusal", "sends_to", "tool_refusal", "tool_variables"]
