"""The per-process caller of live tools, and the adapter's hook that routes tool calls to it.

A :class:`LiveTools` keeps one ``httpx.Client`` and one MCP session per server
for the life of the process (see :mod:`.mcp`); failures (timeouts, refused
connections, error statuses, tool errors) are recorded on the ``ToolCall``
(``error=...``, graded as ``tool_error``), never raised: one broken tool must
not abort the conversation. A tool this process's operator does not allow
(:mod:`.allowance`) is the exception: :class:`ToolNotAllowed` is raised, so the
pair errors with its one line and nothing is sent.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evaljobs.catalog.model import Scenario, Tool
from evaljobs.catalog.toolspec import validate_live_spec
from evaljobs.network import deadline
from evaljobs.tools._common import (CONNECT_TIMEOUT, DEFAULT_TIMEOUT, LiveToolError, ToolFailed,
                                                  describe, exception_text)
from evaljobs.tools.allowance import ToolNotAllowed, refusal, tool_refusal
from evaljobs.tools.http import call_http
from evaljobs.tools.roots import rooted
from evaljobs.providers.toolcall import ToolCall
from evaljobs.extras import MissingExtra

if TYPE_CHECKING:  # the mcp extra is optional: imported at run time only on the first MCP call
    from evaljobs.tools.mcp import LoopThread, McpSession


class LiveTools:
    """Calls live tools, reusing connections; one per process (see :func:`get_live_tools`).

    Thread-safe: Dramatiq worker threads call :meth:`call` concurrently.
    """

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT, connect_timeout: float = CONNECT_TIMEOUT):
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._http: Any = None  # httpx.Client, created on first use
        self._loop: LoopThread | None = None
        self._sessions: dict[str, McpSession] = {}
        self._closed = False
        self._pid = os.getpid()
        #: How many MCP sessions this instance opened (stdio spawns or HTTP connects), for tests and stats.
        self.sessions_opened = 0

    # -- public

    def call(self, tool: Tool, arguments: dict[str, Any]) -> ToolCall:
        """Run one tool call against the tool's endpoint; failures are recorded on the ToolCall."""
        refused = tool_refusal(tool)
        if refused:  # not a tool error the model may work around: the operator's rule, the pair's error
            raise ToolNotAllowed(refused)
        if tool.mcp is not None:
            rooted(tool.mcp)  # the catalog's folder missing here: the pair's error too, nothing started
        started = time.perf_counter()
        result, error = None, None
        try:
            if tool.http is not None:
                result = self._call_http(tool, arguments)
            elif tool.mcp is not None:
                result = self._call_mcp(tool, arguments)
            else:
                error = f"tool '{tool.name}' has neither 'http' nor 'mcp'; it is not a live tool"
        except ToolNotAllowed:
            raise
        except ToolFailed as exc:
            error = exc.message
        except LiveToolError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a tool must never take the conversation down with it
            error = f"tool '{tool.name}' failed unexpectedly: {exception_text(exc)}"
        return ToolCall(name=tool.name, arguments=arguments, result=result, error=error,
                        duration_ms=(time.perf_counter() - started) * 1000.0)

    def list_mcp_tools(self, spec: dict[str, Any]) -> list[dict[str, Any]]:
        """The server's tools as ``{name, description, parameters}`` (raises :class:`LiveToolError`)."""
        problems = validate_live_spec("mcp", spec)
        if problems:
            raise LiveToolError("; ".join(problems))
        spec = rooted(spec)
        timeout = float(spec.get("timeout") or self.timeout)
        session = self._session(spec)
        try:
            listed = session.run(session.list_tools(), timeout)
        except ToolFailed as exc:
            raise LiveToolError(f"cannot list the tools of MCP server {describe(spec)}: "
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
                # Bounded: a tool server that trickles or hangs ends by the pair's deadline.
                self._http = deadline.bounded_client(follow_redirects=True)
            return self._http

    def _call_http(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        return call_http(self._client(), tool, arguments, self.timeout)

    # -- mcp

    def _session(self, spec: dict[str, Any]) -> McpSession:
        refused = refusal("a catalog's tool", "mcp", spec)
        if refused:  # before the server is started or connected to, also when only listing its tools
            raise ToolNotAllowed(refused)
        mcp = _mcp_module()
        LoopThread, McpSession, server_key = mcp.LoopThread, mcp.McpSession, mcp.server_key
        key = server_key(spec)
        with self._lock:
            if self._closed:
                raise LiveToolError("live tools are closed")
            session = self._sessions.get(key)
            if session is None or session.dead:
                if self._loop is None:
                    self._loop = LoopThread()
                session = McpSession(self._loop, spec, self.connect_timeout, self._opened)
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
        spec = rooted(spec)  # relative paths: the catalog's folder (.roots), not this process's cwd
        # The tool's own timeout, cut to what is left of the pair's deadline (the session runs
        # on its own event loop thread, out of reach of this thread's network wall).
        timeout = deadline.remaining(float(spec.get("timeout") or self.timeout))
        remote = spec.get("tool") or tool.name
        session = self._session(spec)
        return session.run(session.call_tool(remote, arguments, timeout), timeout)


_mcp_import: concurrent.futures.Future | None = None
_mcp_import_lock = threading.Lock()


def _import_mcp(done: concurrent.futures.Future) -> None:
    try:
        # the optional 'mcp' extra
        import evaljobs.tools.mcp as module
    except ImportError:
        done.set_exception(LiveToolError(str(MissingExtra("mcp"))))
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
        done.set_exception(exc)
    else:
        done.set_result(module)


def _mcp_module() -> Any:
    """``evaljobs.tools.mcp``, imported on the first MCP call, never past the pair's deadline.

    The SDK (pydantic models, anyio) took 3-4 s to import on a busy 2-core machine: on the calling
    thread that overran a 3 s time limit by as much, and an import cannot be interrupted. So it is
    imported on its own thread; a pair whose deadline comes first gives up waiting (a tool error)
    and the import finishes for the next call.
    """
    global _mcp_import
    with _mcp_import_lock:
        if _mcp_import is None:
            _mcp_import = concurrent.futures.Future()
            threading.Thread(target=_import_mcp, args=(_mcp_import,), name="evaljobs-mcp-import",
                             daemon=True).start()
        pending = _mcp_import
    try:
        return pending.result(timeout=deadline.remaining())
    except concurrent.futures.TimeoutError:
        raise LiveToolError(
            "the MCP client library was still loading when the pair's time limit ran out"
        ) from None


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


__all__ = ["LiveTools", "get_live_tools", "is_live", "live_tool_runner"]
