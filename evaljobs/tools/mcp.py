"""MCP tool servers through the official ``mcp`` SDK: one long-lived session per server.

Each session lives on a background event-loop thread (:class:`LoopThread`),
held open by a task between calls; the synchronous worker threads call into it
with ``asyncio.run_coroutine_threadsafe``. Opening a session (let alone
spawning a stdio server) per call would cost more than the call. ``command``
starts the server as a subprocess over stdio (a leading ``python``/``python3``
means the interpreter running evaljobs), only with ``--allow-code`` and in a
child holding no secret (:mod:`.allowance`); ``url`` speaks streamable HTTP.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from evaljobs.config import code_environment
from evaljobs.errors import one_line
from evaljobs.isolation import isolated
from evaljobs.network import deadline
from evaljobs.tools._common import ToolFailed, decoded, describe, exception_text, resolve_env
from evaljobs.tools.allowance import ToolNotAllowed, refusal


def server_key(spec: dict[str, Any]) -> str:
    """Which MCP server a spec talks to (one session each); ``tool`` and ``timeout`` do not matter."""
    ident = {k: spec[k] for k in ("url", "command", "env", "cwd", "headers") if spec.get(k) is not None}
    return json.dumps(ident, sort_keys=True)


class LoopThread:
    """An asyncio loop on a daemon thread: MCP sessions live here between calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="evaljobs-live-tools", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Any) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class McpSession:
    """One open MCP client session, held by a task on the loop thread until closed.

    anyio requires a session's context to be entered and exited by the same
    task, so a dedicated task holds it open; calls from other tasks use it.
    """

    def __init__(self, loop: LoopThread, spec: dict[str, Any], connect_timeout: float,
                 on_open: Callable[[], None]):
        self.loop = loop
        self.spec = spec
        self.connect_timeout = connect_timeout
        self.on_open = on_open
        self.client: Any = None
        self.dead = False
        self._connect_lock = threading.Lock()
        self._stop: asyncio.Event | None = None
        self._holder: concurrent.futures.Future | None = None
        self._ready: concurrent.futures.Future | None = None
        self._connect_by = 0.0

    def run(self, coro: Any, timeout: float) -> Any:
        """Run a coroutine on the session (connecting first if needed); failures as ``ToolFailed``."""
        try:
            self._connect()
        except ToolFailed:
            coro.close()
            raise
        future = self.loop.submit(coro)
        # The SDK's own read timeout should fire first; this thread never waits past the pair's deadline.
        limit = timeout + 5.0
        wait = deadline.remaining(limit)
        try:
            return future.result(timeout=wait)
        except concurrent.futures.TimeoutError:
            future.cancel()
            if wait < limit:
                raise ToolFailed(f"MCP server {describe(self.spec)} was still answering when the pair's "
                                  f"time limit ran out") from None
            raise ToolFailed(f"MCP server {describe(self.spec)} did not answer within "
                              f"{timeout:g}s") from None
        except ToolFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - any transport failure: reconnect next time
            self.dead = True
            self.close()
            raise ToolFailed(f"MCP server {describe(self.spec)} failed: {exception_text(exc)}") from None

    def _connect(self) -> None:
        """Open the session, waiting at most ``connect_timeout`` — and never past the pair's deadline.

        A wait cut short by the pair's deadline leaves the server starting (a stdio server can take
        seconds to boot on a busy machine) for the next call, instead of killing it and booting
        another; only ``connect_timeout`` itself gives up on it. The wait holds no lock, so one
        pair's wait never adds to another's.
        """
        with self._connect_lock:
            if self.dead:
                raise ToolFailed(f"MCP server {describe(self.spec)} connection was closed")
            if self.client is not None:
                return
            if self._ready is None:
                self._ready = concurrent.futures.Future()
                self._connect_by = time.monotonic() + self.connect_timeout
                self._holder = self.loop.submit(self._hold(self._ready))
            ready, holder = self._ready, self._holder
        assert holder is not None  # submitted with _ready
        full = max(0.0, self._connect_by - time.monotonic())
        wait = deadline.remaining(full)
        try:
            ready.result(timeout=wait)
        except concurrent.futures.TimeoutError:
            if wait < full:
                raise ToolFailed(f"MCP server {describe(self.spec)} was still starting when the pair's time "
                                  f"limit ran out") from None
            self.dead = True
            holder.cancel()
            raise ToolFailed(f"could not connect to MCP server {describe(self.spec)} within "
                              f"{self.connect_timeout:g}s") from None
        except Exception as exc:  # noqa: BLE001
            self.dead = True
            raise ToolFailed(f"could not connect to MCP server {describe(self.spec)}: "
                              f"{exception_text(exc)}") from None
        with self._connect_lock:
            opened, self._ready = self._ready is ready, None
        if opened:
            self.on_open()

    async def _hold(self, ready: concurrent.futures.Future) -> None:
        self._stop = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                target = await mcp_target(self.spec, stack)
                self.client = await stack.enter_async_context(Client(target, read_timeout_seconds=None))
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - report connect failures to the waiting thread
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            self.dead = True
            self.client = None

    async def list_tools(self) -> list[dict[str, Any]]:
        client = self._require()
        tools: list[dict[str, Any]] = []
        cursor = None
        for _ in range(100):  # pages; a server that never stops paginating cannot hang us
            page = await client.list_tools(cursor=cursor)
            tools.extend({"name": t.name, "description": t.description or "",
                          "parameters": t.input_schema or {"type": "object", "properties": {}}}
                         for t in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any], timeout: float) -> Any:
        client = self._require()
        try:
            result = await client.call_tool(name, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:  # a protocol-level error (timeout, unknown method): the session lives on...
            if exc.code == REQUEST_TIMEOUT:
                raise ToolFailed(f"MCP tool '{name}' timed out after {timeout:g}s") from None
            if exc.code == CONNECTION_CLOSED:  # ...unless the server went away: reconnect on the next call
                self.dead = True
                if self._stop is not None:
                    self._stop.set()
                raise ToolFailed(f"MCP tool '{name}': the server {describe(self.spec)} closed the "
                                  f"connection (it reconnects on the next call)") from None
            raise ToolFailed(f"MCP tool '{name}': error {exc.code}: {one_line(exc.message, 200)}") from None
        texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
        if result.is_error:
            raise ToolFailed(f"MCP tool '{name}' failed: {one_line(' '.join(texts) or 'error', 500)}")
        return mcp_value(result, texts)

    def _require(self) -> Any:
        client = self.client
        if client is None:
            raise ToolFailed(f"MCP server {describe(self.spec)} connection was closed")
        return client

    def close(self) -> None:
        """Leave the session (a stdio server is terminated); waits a few seconds at most."""
        self.dead = True
        stop, holder = self._stop, self._holder
        if stop is not None:
            try:
                self.loop.loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop is already closed
                return
        if holder is not None and threading.current_thread() is not self.loop.thread:
            with contextlib.suppress(Exception):  # closing: nothing left to report to
                holder.result(timeout=5)


async def mcp_target(spec: dict[str, Any], stack: Any) -> Any:
    """What ``mcp.Client`` connects to: a URL (with headers, a transport) or stdio parameters."""
    if spec.get("command"):
        refused = refusal("a catalog's tool", "mcp", spec)
        if refused:  # the caller checked; a program the catalog names never starts without the opt-in
            raise ToolNotAllowed(refused)
        command = list(spec["command"])
        if command[0] in ("python", "python3"):
            command[0] = sys.executable
        program = command[0]
        found = (shutil.which(program) if os.sep not in program
                 else os.path.join(spec.get("cwd") or "", program))
        if not found or not os.path.exists(found):  # said here: behind `unshare` it is only "closed"
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", command[0])
        # The server is the catalog's code: a child of basics only, a home of its own, and of this
        # process's variables just the allowed ones its `env` names (SDK defaults are overridden or
        # hold no secret); in a PID namespace of its own where the system allows (evaljobs.isolation).
        home = tempfile.mkdtemp(prefix="evaljobs-mcp-")
        stack.callback(shutil.rmtree, home, True)
        env = code_environment(home, {k: resolve_env(v, f"mcp.env {k!r}")
                                      for k, v in (spec.get("env") or {}).items()})
        command = isolated(command)
        return StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=spec.get("cwd"))
    url = spec["url"]
    headers = {k: resolve_env(v, f"mcp.headers {k!r}") for k, v in (spec.get("headers") or {}).items()}
    if not headers:
        return url
    http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
    return streamable_http_client(url, http_client=http)


def mcp_value(result: Any, texts: list[str]) -> Any:
    """What the model gets back: text (JSON-decoded when it is JSON), else structured data."""
    if texts and len(texts) == len(result.content):
        return decoded("\n".join(texts))
    if result.structured_content is not None:
        return result.structured_content
    return [c.model_dump(mode="json", exclude_none=True) for c in result.content]


__all__ = ["LoopThread", "McpSession", "server_key"]
