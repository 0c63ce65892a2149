"""Live tools: answer a scenario's tool calls from a real endpoint instead of canned data.

A catalog tool may name an endpoint instead of ``returns``::

    tools:
      - name: lookup_order
        parameters: {type: object, properties: {order_id: {type: string}}}
        http: {url: "https://shop.example/api/orders/lookup", method: POST,
               headers: {Authorization: "Bearer ${SHOP_TOKEN}"}, timeout: 10}
      - name: check_stock
        mcp: {url: "http://127.0.0.1:8765/mcp"}                # streamable HTTP
      - mcp: {command: [python, examples/mcp_tools/server.py, --stdio]}
        only: [lookup_order]        # import these tools' schemas from the server

* ``http``: the model's arguments are sent as a JSON body (``GET``/``DELETE``:
  as query parameters); the response body (JSON if it parses, else text)
  goes back to the model. A 4xx/5xx status is a tool error.
* ``mcp``: the call goes to the MCP server's tool of the same name (or
  ``tool:``), through the official ``mcp`` SDK. ``command`` starts the
  server as a subprocess over stdio (a leading ``python``/``python3`` means
  the interpreter running evaljobs, so the server sees the same packages);
  relative paths are relative to the working directory.
* ``${NAME}`` in header (and ``env``) values is read from the environment at
  call time. Secrets are never recorded: a :class:`ToolCall` holds the name,
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
"""
from __future__ import annotations

from evaljobs.errors import UsageError
import asyncio
import atexit
import concurrent.futures
import contextlib
import copy
import difflib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evaljobs.evaluation.replay import ToolCall
from evaljobs.evaluation.result import OUTPUT_CAP

if TYPE_CHECKING:  # no runtime import: catalog.py may import validate_live_spec from here
    from evaljobs.catalog import Scenario, Tool

DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 30.0
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
HTTP_KEYS = ("url", "method", "headers", "timeout")
MCP_KEYS = ("url", "command", "env", "cwd", "headers", "timeout", "tool")
#: Keys of a catalog tool entry that imports tools from an MCP server (it has no ``name``).
MCP_IMPORT_KEYS = ("mcp", "only")

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TOOL_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")


class LiveToolError(UsageError):
    """A live tool spec that cannot be used (one line, names the value and the fix)."""


# --------------------------------------------------------------------------- specs


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
    problems = [f"{kind}: unknown key {key!r}{_suggest(str(key), valid)}" for key in spec if key not in valid]
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


def resolve_env(value: str, what: str) -> str:
    """``${NAME}`` references replaced from the environment (raises naming a missing variable)."""

    def sub(match: re.Match) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise LiveToolError(f"{what} needs the environment variable {name}, which is not set; export it")
        return os.environ[name]

    return _ENV_REF.sub(sub, value)


def _server_key(spec: dict[str, Any]) -> str:
    """Which MCP server a spec talks to (one session each); ``tool`` and ``timeout`` do not matter."""
    ident = {k: spec[k] for k in ("url", "command", "env", "cwd", "headers") if spec.get(k) is not None}
    return json.dumps(ident, sort_keys=True)


# --------------------------------------------------------------------------- the per-process caller


class LiveTools:
    """Calls live tools, reusing connections; one per process (see :func:`get_live_tools`).

    Thread-safe: Dramatiq worker threads call :meth:`call` concurrently.
    """

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT, connect_timeout: float = CONNECT_TIMEOUT):
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._http: Any = None  # httpx.Client, created on first use
        self._loop: _LoopThread | None = None
        self._sessions: dict[str, _McpSession] = {}
        self._closed = False
        self._pid = os.getpid()
        #: How many MCP sessions this instance opened (stdio spawns or HTTP connects), for tests and stats.
        self.sessions_opened = 0

    # -- public

    def call(self, tool: Tool, arguments: dict[str, Any]) -> ToolCall:
        """Run one tool call against the tool's endpoint; failures are recorded on the ToolCall."""
        started = time.perf_counter()
        result, error = None, None
        try:
            if tool.http is not None:
                result = self._call_http(tool, arguments)
            elif tool.mcp is not None:
                result = self._call_mcp(tool, arguments)
            else:
                error = f"tool '{tool.name}' has neither 'http' nor 'mcp'; it is not a live tool"
        except _ToolFailed as exc:
            error = exc.message
        except LiveToolError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a tool must never take the conversation down with it
            error = f"tool '{tool.name}' failed unexpectedly: {_exception_text(exc)}"
        return ToolCall(name=tool.name, arguments=arguments, result=result, error=error,
                        duration_ms=(time.perf_counter() - started) * 1000.0)

    def list_mcp_tools(self, spec: dict[str, Any]) -> list[dict[str, Any]]:
        """The server's tools as ``{name, description, parameters}`` (raises :class:`LiveToolError`)."""
        problems = validate_live_spec("mcp", spec)
        if problems:
            raise LiveToolError("; ".join(problems))
        timeout = float(spec.get("timeout") or self.timeout)
        session = self._session(spec)
        try:
            listed = session.run(session.list_tools(), timeout)
        except _ToolFailed as exc:
            raise LiveToolError(f"cannot list the tools of MCP server {_describe(spec)}: "
                                f"{exc.message}") from None
        return listed

    def close(self) -> None:
        """Close every session (stopping stdio servers) and the HTTP client. Idempotent."""
        with self._lock:
            self._closed = True
            sessions, self._sessions = list(self._sessions.values()), {}
            http, self._http = self._http, None
            loop, self._loop = self._loop, None
        if os.getpid() != self._pid:  # a forked child: the loop thread and sessions belong to the parent
            return
        for session in sessions:
            session.close()
        if http is not None:
            http.close()
        if loop is not None:
            loop.stop()

    def __enter__(self) -> LiveTools:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- http

    def _client(self) -> Any:
        with self._lock:
            if self._closed:
                raise LiveToolError("live tools are closed")
            if self._http is None:
                import httpx

                self._http = httpx.Client(follow_redirects=True)
            return self._http

    def _call_http(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        import httpx

        spec = tool.http or {}
        problems = validate_live_spec("http", spec)
        if problems:
            raise LiveToolError(f"tool '{tool.name}': " + "; ".join(problems))
        url, method = spec["url"], str(spec.get("method") or "POST").upper()
        headers = {name: resolve_env(value, f"tool '{tool.name}': header {name!r}")
                   for name, value in (spec.get("headers") or {}).items()}
        timeout = float(spec.get("timeout") or self.timeout)
        where = f"{method} {_public_url(url)}"
        if method in ("GET", "DELETE"):
            request: dict[str, Any] = {"params": {k: _query_value(v) for k, v in arguments.items()}}
        else:
            request = {"json": arguments}
        try:
            response = self._client().request(method, url, headers=headers, timeout=timeout, **request)
        except httpx.TimeoutException:
            raise _ToolFailed(f"{where} timed out after {timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise _ToolFailed(f"{where} failed: {type(exc).__name__}: {_first_line(exc)}") from None
        body = _body(response)
        if response.status_code >= 400:
            shown = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
            raise _ToolFailed(f"{where} answered HTTP {response.status_code}: {_first_line(shown, 300)}")
        return body

    # -- mcp

    def _loop_thread(self) -> _LoopThread:
        # Called with self._lock held.
        if self._loop is None:
            self._loop = _LoopThread()
        return self._loop

    def _session(self, spec: dict[str, Any]) -> _McpSession:
        key = _server_key(spec)
        with self._lock:
            if self._closed:
                raise LiveToolError("live tools are closed")
            session = self._sessions.get(key)
            if session is None or session.dead:
                session = _McpSession(self._loop_thread(), spec, self.connect_timeout, self._opened)
                self._sessions[key] = session
            return session

    def _opened(self) -> None:
        with self._lock:
            self.sessions_opened += 1

    def _call_mcp(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        spec = tool.mcp or {}
        problems = validate_live_spec("mcp", spec)
        if problems:
            raise LiveToolError(f"tool '{tool.name}': " + "; ".join(problems))
        timeout = float(spec.get("timeout") or self.timeout)
        remote = spec.get("tool") or tool.name
        session = self._session(spec)
        return session.run(session.call_tool(remote, arguments, timeout), timeout)


class _ToolFailed(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _LoopThread:
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


class _McpSession:
    """One open MCP client session, held by a task on the loop thread until closed.

    anyio requires a session's context to be entered and exited by the same
    task, so a dedicated task holds it open; calls from other tasks use it.
    """

    def __init__(self, loop: _LoopThread, spec: dict[str, Any], connect_timeout: float,
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

    def run(self, coro: Any, timeout: float) -> Any:
        """Run a coroutine on the session (connecting first if needed); failures as ``_ToolFailed``."""
        try:
            self._connect()
        except _ToolFailed:
            coro.close()
            raise
        future = self.loop.submit(coro)
        try:
            return future.result(timeout=timeout + 5.0)  # the SDK's own read timeout fires first
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise _ToolFailed(f"MCP server {_describe(self.spec)} did not answer within "
                              f"{timeout:g}s") from None
        except _ToolFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - any transport failure: reconnect next time
            self.dead = True
            self.close()
            raise _ToolFailed(f"MCP server {_describe(self.spec)} failed: {_exception_text(exc)}") from None

    def _connect(self) -> None:
        with self._connect_lock:
            if self.dead:
                raise _ToolFailed(f"MCP server {_describe(self.spec)} connection was closed")
            if self.client is not None:
                return
            ready: concurrent.futures.Future = concurrent.futures.Future()
            self._holder = self.loop.submit(self._hold(ready))
            try:
                ready.result(timeout=self.connect_timeout)
            except concurrent.futures.TimeoutError:
                self.dead = True
                self._holder.cancel()
                raise _ToolFailed(f"could not connect to MCP server {_describe(self.spec)} within "
                                  f"{self.connect_timeout:g}s") from None
            except Exception as exc:  # noqa: BLE001
                self.dead = True
                raise _ToolFailed(f"could not connect to MCP server {_describe(self.spec)}: "
                                  f"{_exception_text(exc)}") from None
            self.on_open()

    async def _hold(self, ready: concurrent.futures.Future) -> None:
        from contextlib import AsyncExitStack

        from mcp import Client

        self._stop = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                target = await _mcp_target(self.spec, stack)
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
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        client = self._require()
        try:
            result = await client.call_tool(name, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:  # a protocol-level error (timeout, unknown method): the session lives on...
            if exc.code == REQUEST_TIMEOUT:
                raise _ToolFailed(f"MCP tool '{name}' timed out after {timeout:g}s") from None
            if exc.code == CONNECTION_CLOSED:  # ...unless the server went away: reconnect on the next call
                self.dead = True
                if self._stop is not None:
                    self._stop.set()
                raise _ToolFailed(f"MCP tool '{name}': the server {_describe(self.spec)} closed the "
                                  f"connection (it reconnects on the next call)") from None
            raise _ToolFailed(f"MCP tool '{name}': error {exc.code}: {_first_line(exc.message)}") from None
        texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
        if result.is_error:
            raise _ToolFailed(f"MCP tool '{name}' failed: {_first_line(' '.join(texts) or 'error', 500)}")
        return _mcp_value(result, texts)

    def _require(self) -> Any:
        client = self.client
        if client is None:
            raise _ToolFailed(f"MCP server {_describe(self.spec)} connection was closed")
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


async def _mcp_target(spec: dict[str, Any], stack: Any) -> Any:
    """What ``mcp.Client`` connects to: a URL (with headers, a transport) or stdio parameters."""
    from mcp import StdioServerParameters

    if spec.get("command"):
        command = list(spec["command"])
        if command[0] in ("python", "python3"):
            command[0] = sys.executable
        env = {k: resolve_env(v, f"mcp.env {k!r}") for k, v in (spec.get("env") or {}).items()}
        return StdioServerParameters(command=command[0], args=command[1:], env=env or None,
                                     cwd=spec.get("cwd"))
    url = spec["url"]
    headers = {k: resolve_env(v, f"mcp.headers {k!r}") for k, v in (spec.get("headers") or {}).items()}
    if not headers:
        return url
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
    return streamable_http_client(url, http_client=http)


def _mcp_value(result: Any, texts: list[str]) -> Any:
    """What the model gets back: text (JSON-decoded when it is JSON), else structured data."""
    if texts and len(texts) == len(result.content):
        return _decoded("\n".join(texts))
    if result.structured_content is not None:
        return result.structured_content
    return [c.model_dump(mode="json", exclude_none=True) for c in result.content]


# --------------------------------------------------------------------------- catalog expansion


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
        hint = _suggest(unknown[0], MCP_IMPORT_KEYS)
        raise LiveToolError(f"unknown key {unknown[0]!r} in an MCP tool import{hint}; to declare one tool "
                            f"give it a 'name'")
    server = spec["mcp"]
    problems = validate_live_spec("mcp", server)
    if problems:
        raise LiveToolError("; ".join(problems))
    if server.get("tool") is not None:
        raise LiveToolError("mcp.tool names one tool: give the entry a 'name' to declare it, or use 'only' "
                            "to import several")
    only = spec.get("only")
    if only is not None and (not isinstance(only, list) or not all(isinstance(n, str) and n for n in only)):
        raise LiveToolError(f"'only' must be a list of the server's tool names, not {only!r}")
    owned = live is None
    live = live or LiveTools()
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
            raise LiveToolError(f"MCP server {_describe(server)} has no tool {missing[0]!r} "
                                f"(it offers: {offered}){_suggest(missing[0], list(by_name))}")
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
               if isinstance(entry, dict) and "mcp" in entry and "name" not in entry]
    if not imports:
        return out
    problems: list[str] = []
    cache: dict[str, list[dict[str, Any]] | LiveToolError] = {}
    owned = live is None
    live = live or LiveTools()
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
        from evaljobs.catalog import CatalogError

        raise CatalogError(problems)
    for _, scenario, _, _ in imports:
        tools = []
        for entry in scenario["tools"]:
            if isinstance(entry, dict) and "mcp" in entry and "name" not in entry:
                tools.extend(copy.deepcopy(cache[json.dumps(entry, sort_keys=True, default=str)]))
            else:
                tools.append(entry)
        scenario["tools"] = tools
    return out


# --------------------------------------------------------------------------- the adapter hook

_shared: LiveTools | None = None
_shared_pid: int | None = None
_shared_lock = threading.Lock()


def get_live_tools() -> LiveTools:
    """This process's :class:`LiveTools` (made on first use, closed at exit; a forked child makes its own)."""
    global _shared, _shared_pid
    with _shared_lock:
        if _shared is None or _shared_pid != os.getpid():
            _shared, _shared_pid = LiveTools(), os.getpid()
            atexit.register(_shared.close)
        return _shared


def is_live(tool: Tool) -> bool:
    return tool.http is not None or tool.mcp is not None


def live_tool_runner(fallback: Callable[[Scenario, str, dict[str, Any]], ToolCall],
                     live: LiveTools | None = None) -> Callable[[Scenario, str, dict[str, Any]], ToolCall]:
    """A ``ConversationAdapter`` ``tool_runner``: live tools via ``live``, canned ones via ``fallback``."""

    def run(scenario: Scenario, name: str, arguments: dict[str, Any]) -> ToolCall:
        tool = scenario.tool(name)
        if tool is None or not is_live(tool):
            return fallback(scenario, name, arguments)
        if "_raw" in arguments and len(arguments) == 1:  # the model's arguments were not JSON: do not send
            return ToolCall(name=name, arguments=arguments, error="arguments are not valid JSON")
        return (live or get_live_tools()).call(tool, arguments)

    return run


# --------------------------------------------------------------------------- small helpers


def _body(response: Any) -> Any:
    return _decoded(response.text)


def _decoded(text: str) -> Any:
    """JSON if the text is JSON, else the text; oversized answers are cut (they are stored with results)."""
    if len(text) > OUTPUT_CAP:
        return _cap(text)
    try:
        return json.loads(text)
    except ValueError:
        return text


def _cap(text: str) -> str:
    return text if len(text) <= OUTPUT_CAP else text[:OUTPUT_CAP] + "…[truncated]"


def _query_value(value: Any) -> str:
    from evaljobs.catalog.importers import text_of  # one rule for "a JSON value as text", shared with the importers

    return text_of(value)


def _public_url(url: str) -> str:
    """The URL without query string or credentials, for messages."""
    url = url.split("?", 1)[0].split("#", 1)[0]
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        host, _, path = rest.partition("/")
        rest = host.rpartition("@")[2] + ("/" + path if path else "")
    return f"{scheme}{sep}{rest}"


def _describe(spec: dict[str, Any]) -> str:
    if spec.get("url"):
        return _public_url(str(spec["url"]))
    command = spec.get("command") or []
    return "'" + " ".join(str(c) for c in command) + "'"


def _first_line(value: Any, limit: int = 200) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _exception_text(exc: BaseException) -> str:
    """The innermost useful message, also inside anyio's exception groups."""
    while isinstance(getattr(exc, "exceptions", None), (list, tuple)) and exc.exceptions:  # a group
        exc = exc.exceptions[0]
    text = _first_line(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _suggest(key: str, valid: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


__all__ = [
    "DEFAULT_TIMEOUT", "HTTP_METHODS", "LiveToolError", "LiveTools", "expand_catalog_tools",
    "expand_mcp_tools", "get_live_tools", "is_live", "live_tool_runner", "resolve_env", "validate_live_spec",
]
