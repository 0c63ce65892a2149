"""Optional extras: say at once, in one line, which one a feature needs.

Why: a feature whose library is missing must not fail late and obscurely. A
catalog with MCP tools run without the ``mcp`` extra used to wait for each MCP
connection to time out (30 s a server) and then blame the server; instead the
catalog is checked before anything starts, and the message names the extra to
install. Pure checks (no imports of the optional libraries themselves), so any
layer may call them.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any

from evaljobs.errors import UsageError

#: extra -> (the module it provides, what needs it: the start of the message)
EXTRAS: dict[str, tuple[str, str]] = {
    "mcp": ("mcp", "MCP tools need"),
    "postgres": ("psycopg2", "a postgresql:// database needs"),
    "rabbitmq": ("pika", "an amqp:// broker (RabbitMQ) needs"),
    "plot": ("matplotlib", "the benchmark plot needs"),
    "metrics": ("prometheus_client", "--metrics-port needs"),
    "otel": ("opentelemetry.sdk", "OTEL_EXPORTER_OTLP_ENDPOINT (tracing) needs"),
}


class MissingExtra(UsageError):
    """A feature was asked for whose optional extra is not installed."""

    def __init__(self, extra: str, what: str | None = None, where: str = ""):
        self.extra = extra
        need = what or EXTRAS[extra][1]
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{need} the '{extra}' extra: install evaljobs[{extra}] "
                         f"(pip install 'evaljobs[{extra}]')")


def installed(extra: str) -> bool:
    """Whether the library of ``extra`` can be imported (without importing it)."""
    module = EXTRAS[extra][0]
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed installation
        return False


def require(extra: str, what: str | None = None, where: str = "") -> None:
    """Raise :class:`MissingExtra` unless ``extra`` is installed."""
    if not installed(extra):
        raise MissingExtra(extra, what, where)


def tool_lists(data: Any) -> Iterable[tuple[str, list[Any]]]:
    """(scenario label, tools) for raw catalog data or a parsed ``Catalog``."""
    scenarios = getattr(data, "scenarios", None)
    if scenarios is not None and not isinstance(data, dict):  # a parsed Catalog
        for scenario in scenarios:
            yield f"scenario '{scenario.key}'", list(scenario.tools)
        return
    if not isinstance(data, dict):
        return
    lists = [data.get("scenarios")] + [
        g.get("scenarios") for g in data.get("groups") or [] if isinstance(g, dict)
    ]
    for items in lists:
        for scenario in items if isinstance(items, list) else []:
            if isinstance(scenario, dict) and isinstance(scenario.get("tools"), list):
                yield f"scenario '{scenario.get('key')}'", scenario["tools"]


def mcp_tool_users(data: Any) -> list[str]:
    """The scenarios of a catalog (raw data or parsed) that use MCP tools, as labels."""
    users: list[str] = []
    for label, tools in tool_lists(data):
        for tool in tools:
            spec = tool.get("mcp") if isinstance(tool, dict) else getattr(tool, "mcp", None)
            if spec is not None:
                users.append(label)
                break
    return users


def require_for_catalog(data: Any, source: str = "<catalog>") -> None:
    """Raise :class:`MissingExtra` if the catalog uses a feature whose extra is missing (MCP tools)."""
    users = mcp_tool_users(data)
    if users and not installed("mcp"):
        more = f" and {len(users) - 1} more" if len(users) > 1 else ""
        raise MissingExtra("mcp", f"{users[0]}{more} use MCP tools, which need", where=source)


__all__ = ["EXTRAS", "MissingExtra", "installed", "mcp_tool_users", "require", "require_for_catalog",
           "tool_lists"]
