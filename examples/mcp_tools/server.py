"""A small MCP server for evaljobs' live-tool examples and tests.

Written with the official ``mcp`` SDK (2.x, where FastMCP is ``MCPServer``).
It exposes two tools of an imaginary shop:

* ``lookup_order(order_id)`` — the status of an order (ids are digits; any
  other id is a tool error the model can read and recover from);
* ``check_stock(item)`` — how many of an item are in stock.

``--test-tools`` adds two diagnostic tools that the evaljobs tests use:
``wait(seconds)`` (to exercise timeouts) and ``stats()`` (the server's pid, a token naming this
start of it, and how many calls it served, to prove a client reuses one connection).

Run it::

    python examples/mcp_tools/server.py --stdio                 # over stdin/stdout
    python examples/mcp_tools/server.py --port 8765             # streamable HTTP at http://127.0.0.1:8765/mcp
"""
from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

ORDERS: dict[str, dict[str, Any]] = {
    "1234": {"order_id": "1234", "status": "shipped", "eta": "Tuesday", "items": ["kettle"]},
    "4321": {"order_id": "4321", "status": "packing", "eta": "Friday", "items": ["mug", "mug"]},
    "5678": {"order_id": "5678", "status": "delivered", "eta": None, "items": ["teapot"]},
}
STOCK: dict[str, int] = {"kettle": 12, "mug": 140, "teapot": 0}
#: Names this start of the server (``stats``): its pid is 1 wherever it runs in a PID namespace of its own.
INSTANCE = uuid.uuid4().hex


def build_server(*, test_tools: bool = False) -> MCPServer:
    """The server with its tools registered (``test_tools`` adds ``wait`` and ``stats``)."""
    server = MCPServer("evaljobs-shop", instructions="Order and stock lookups for the Acme shop.")
    calls = {"count": 0}

    @server.tool()
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order by its id (digits, e.g. "1234")."""
        calls["count"] += 1
        if not order_id.isdigit():
            raise ToolError(f"order id {order_id!r} is not valid: order ids are digits")
        return ORDERS.get(order_id, {"order_id": order_id, "status": "not_found"})

    @server.tool()
    def check_stock(item: str) -> dict[str, Any]:
        """How many of an item are in stock."""
        calls["count"] += 1
        name = item.strip().lower()
        return {"item": name, "in_stock": STOCK.get(name, 0), "known": name in STOCK}

    if test_tools:
        @server.tool()
        def wait(seconds: float) -> str:
            """Sleep, then answer (diagnostic: exercises client timeouts)."""
            calls["count"] += 1
            time.sleep(seconds)
            return f"waited {seconds}s"

        @server.tool()
        def stats() -> dict[str, Any]:
            """This server process's id (1 in a PID namespace of its own), a token naming this start of it,
            and how many tool calls it served."""
            calls["count"] += 1
            return {"pid": os.getpid(), "instance": INSTANCE, "calls": calls["count"]}

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    transport = parser.add_mutually_exclusive_group(required=True)
    transport.add_argument("--stdio", action="store_true", help="serve over stdin/stdout")
    transport.add_argument("--port", type=int, help="serve streamable HTTP on this port (path /mcp)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--test-tools", action="store_true", help="also expose wait(seconds) and stats()")
    args = parser.parse_args(argv)
    server = build_server(test_tools=args.test_tools)
    if args.stdio:
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
