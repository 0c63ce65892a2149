"""Live tools: answer a scenario's tool calls from a real endpoint instead of canned data.

A catalog tool may name an endpoint instead of ``returns``::

    tools:
      - name: lookup_order
        parameters: {type: object, properties: {order_id: {type: string}}}
        http: {url: "https://shop.example/api/orders/lookup", method: POST,
               headers: {Authorization: "Bearer ${SHOP_TOKEN}"}, timeout: 10}
      - name: check_stock
        mcp: {url: "http://127.0.0.1:8765/mcp"}                # streamable HTTP
      - mcp: {command: [python, ../mcp_tools/server.py, --stdio]}
        only: [lookup_order]        # import these tools' schemas from the server

* ``http``: the model's arguments are sent as a JSON body (``GET``/``DELETE``:
  as query parameters); the response body (JSON if it parses, else text)
  goes back to the model. A 4xx/5xx status is a tool error.
* ``mcp``: the call goes to the MCP server's tool of the same name (or
  ``tool:``), through the official ``mcp`` SDK. ``command`` starts the
  server as a subprocess over stdio (a leading ``python``/``python3`` means
  the interpreter running evaljobs, so the server sees the same packages);
  relative paths are relative to the catalog file's folder (:mod:`.roots`).
* ``${NAME}`` in header (and ``env``) values is read from the environment at
  call time, only if the operator allows it, and sent only to an endpoint it
  allows; ``command`` servers start only with ``--allow-code``, in a child that
  holds no secret (:mod:`.allowance`). Secrets are never recorded: a :class:`ToolCall` holds the name,
  arguments, result or error, and the duration — never headers — and error
  messages never show header values or URL query strings.

Failures (timeouts, refused connections, error statuses, tool errors) are
recorded on the ``ToolCall`` (``error=...``, graded as ``tool_error``), never
raised: one broken tool must not abort the conversation.

Connections are reused for the life of the process: one ``httpx.Client``, and
one MCP session per server kept open on a background event-loop thread that
the synchronous worker threads call into with
``asyncio.run_coroutine_threadsafe``. Opening an MCP session (let alone
spawning a stdio server) per call would cost more than the call.
The package: :mod:`.live` (the per-process caller and the adapter's hook),
:mod:`.http`, :mod:`.mcp` (the ``mcp`` SDK, an optional extra, imported on the
first MCP call), :mod:`.expansion` (MCP tool imports, an explicit step before
catalog validation); the pure spec checks are :mod:`evaljobs.catalog.toolspec`.
"""
from __future__ import annotations

from evaljobs.catalog.toolspec import HTTP_KEYS, HTTP_METHODS, MCP_IMPORT_KEYS, MCP_KEYS, validate_live_spec
from evaljobs.tools._common import DEFAULT_TIMEOUT, LiveToolError, resolve_env
from evaljobs.tools.allowance import ToolNotAllowed, catalog_refusal, check_tools
from evaljobs.tools.expansion import expand_catalog_tools, expand_mcp_tools, expand_source
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time they load on first use (below)
    from evaljobs.tools.live import LiveTools, get_live_tools, is_live, live_tool_runner

#: The live caller (its HTTP client and deadline wall: httpx), loaded on first use: a submit refuses and
#: expands a catalog's tools without calling one (a Redis submit runs no pair; issue 42, item 3).
_LIVE = ("LiveTools", "get_live_tools", "is_live", "live_tool_runner")
_submodules = submodules(__name__, ("live",))


def __getattr__(name: str) -> object:
    if name in _LIVE:
        value = getattr(_submodules("live"), name)
        globals()[name] = value  # once: later look-ups are plain attributes
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_TIMEOUT",
    "HTTP_KEYS",
    "HTTP_METHODS",
    "LiveToolError",
    "LiveTools",
    "MCP_IMPORT_KEYS",
    "MCP_KEYS",
    "ToolNotAllowed",
    "catalog_refusal",
    "check_tools",
    "expand_catalog_tools",
    "expand_mcp_tools",
    "expand_source",
    "get_live_tools",
    "is_live",
    "live_tool_runner",
    "resolve_env",
    "validate_live_spec",
]
