"""Live tools against real endpoints: a stdlib HTTP server, and the example MCP server over stdio and HTTP."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from evaljobs.evaluation.adapters import ConversationAdapter, run_canned_tool
from evaljobs.catalog import CatalogError, Scenario, Tool, parse_catalog
from evaljobs.evaluation.grading import grade
from evaljobs.catalog.modelspec import load_providers, parse_model_spec
from evaljobs.evaluation.result import OUTPUT_CAP
from evaljobs.tools import (LiveToolError,
                                          LiveTools,
                                          expand_catalog_tools,
                                          expand_mcp_tools,
                                          live_tool_runner,
                                          validate_live_spec)
from helpers import serving, url_of

#: MCP ``command`` servers are a catalog's code: this module's operator opts in (evaljobs.tools.allowance).
pytestmark = pytest.mark.usefixtures("allow_code")

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(ROOT / "examples" / "mcp_tools" / "server.py")
STDIO = {"command": ["python", SERVER, "--stdio", "--test-tools"], "timeout": 5}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- a tiny HTTP tool server


#: /slow answers only once the test sets this (module teardown): "the client's timeout ended the call"
#: is then shown by the call returning at all, not by a race against a sleeping server.
SLOW_RELEASE = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is visible
    connections = 0

    def setup(self) -> None:  # once per TCP connection
        type(self).connections += 1
        super().setup()

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: str, content_type: str = "application/json") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/slow":
            # a server that never answers in time: the client's real timeout must end the call
            SLOW_RELEASE.wait(60)
        if url.path == "/text":
            return self._send(200, "plain answer", "text/plain")
        if url.path == "/big":
            return self._send(200, json.dumps(["x" * 100] * 400))
        self._send(200, json.dumps({"method": "GET", "query": parse_qs(url.query)}))

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urlsplit(self.path).path
        if path == "/fail":
            return self._send(503, "overloaded, try later", "text/plain")
        if path == "/slow":
            SLOW_RELEASE.wait(60)  # as in do_GET
        self._send(200, json.dumps({"method": "POST", "args": json.loads(body or b"null"),
                                    "auth": self.headers.get("Authorization")}))


@pytest.fixture(scope="module")
def http_url():
    with serving(_Handler) as server:
        yield url_of(server, "")
        SLOW_RELEASE.set()


def test_http_tool_posts_arguments_as_json_and_returns_the_json_body(http_url):
    with LiveTools() as live:
        call = live.call(Tool(name="lookup", http={"url": f"{http_url}/echo"}), {"order_id": "1234", "n": 2})
    assert call.error is None
    assert call.result == {"method": "POST", "args": {"order_id": "1234", "n": 2}, "auth": None}
    assert call.name == "lookup" and call.arguments == {"order_id": "1234", "n": 2}
    assert call.duration_ms > 0


def test_http_get_sends_query_parameters_and_text_bodies_come_back_as_text(http_url):
    with LiveTools() as live:
        got = live.call(Tool(name="q", http={"url": f"{http_url}/echo", "method": "get"}),
                        {"q": "kettle", "limit": 3, "exact": True, "tags": ["a", "b"]})
        text = live.call(Tool(name="t", http={"url": f"{http_url}/text", "method": "GET"}), {})
    assert got.result == {"method": "GET", "query": {"q": ["kettle"], "limit": ["3"], "exact": ["true"],
                                                     "tags": ['["a", "b"]']}}
    assert text.error is None and text.result == "plain answer"


def test_oversized_answers_are_cut_like_stored_outputs(http_url):
    with LiveTools() as live:
        big = live.call(Tool(name="big", http={"url": f"{http_url}/big", "method": "GET"}), {})
    assert isinstance(big.result, str) and big.result.endswith("…[truncated]")
    assert len(big.result) == OUTPUT_CAP + len("…[truncated]")


def test_http_error_status_is_a_tool_error_with_the_body(http_url):
    with LiveTools() as live:
        call = live.call(Tool(name="f", http={"url": f"{http_url}/fail?token=s3cret"}), {"x": 1})
    assert call.result is None
    assert call.error == f"POST {http_url}/fail answered HTTP 503: overloaded, try later"
    assert "s3cret" not in call.error  # query strings (often credentials) are not echoed


def test_http_timeout_is_recorded_not_raised(http_url):
    with LiveTools() as live:  # /slow never answers before the module ends: only the timeout can end this
        call = live.call(Tool(name="s", http={"url": f"{http_url}/slow", "timeout": 0.3}), {})
    assert call.error == f"POST {http_url}/slow timed out after 0.3s"
    assert call.duration_ms > 250  # the real time it waited


def test_http_refused_connection_is_a_tool_error():
    with LiveTools() as live:
        down = Tool(name="down", http={"url": f"http://127.0.0.1:{_free_port()}/x", "timeout": 2})
        call = live.call(down, {})
    assert call.error.startswith("POST http://127.0.0.1:") and "failed: ConnectError" in call.error


def test_env_headers_are_resolved_at_call_time_and_never_recorded(http_url, monkeypatch):
    tool = Tool(name="auth", http={"url": f"{http_url}/echo",
                                   "headers": {"Authorization": "Bearer ${SHOP_TOKEN}"}})
    failing = Tool(name="auth", http={**tool.http, "url": f"{http_url}/fail"})
    monkeypatch.setenv("EVALJOBS_ALLOWED_ENV", "SHOP_TOKEN")  # the operator lets tools send it there
    monkeypatch.setenv("EVALJOBS_ALLOWED_BASE_URLS", http_url)
    with LiveTools() as live:
        monkeypatch.delenv("SHOP_TOKEN", raising=False)
        missing = live.call(tool, {})
        monkeypatch.setenv("SHOP_TOKEN", "s3cret-1")
        first = live.call(tool, {})
        monkeypatch.setenv("SHOP_TOKEN", "s3cret-2")  # rotated: the next call uses the new value
        second = live.call(tool, {})
        failed = live.call(failing, {})
    assert missing.error == ("tool 'auth': header 'Authorization' needs the environment variable SHOP_TOKEN, "
                             "which is not set; export it")
    assert first.result["auth"] == "Bearer s3cret-1" and second.result["auth"] == "Bearer s3cret-2"
    assert "HTTP 503" in failed.error
    assert "s3cret" not in json.dumps([missing.to_dict(), failed.to_dict()])  # headers are recorded nowhere


def test_http_connections_are_reused_across_calls_and_threads(http_url):
    tool = Tool(name="echo", http={"url": f"{http_url}/echo"})
    with LiveTools() as live:
        live.call(tool, {"warm": True})
        before = _Handler.connections
        for i in range(10):
            assert live.call(tool, {"i": i}).error is None
        assert _Handler.connections == before  # ten sequential calls, no new connection
        with ThreadPoolExecutor(4) as pool:
            calls = list(pool.map(lambda i: live.call(tool, {"i": i}), range(40)))
    assert all(c.error is None for c in calls)
    assert _Handler.connections - before <= 4  # at most one per concurrent thread


def test_validate_live_spec_lists_every_problem():
    assert validate_live_spec("http", {"url": "https://x.example/api", "method": "post", "timeout": 3,
                                       "headers": {"A": "${B}"}}) == []
    assert validate_live_spec("mcp", {"url": "http://127.0.0.1:1/mcp"}) == []
    assert validate_live_spec("mcp", {"command": ["python", "s.py"], "env": {"K": "v"}, "cwd": "/tmp",
                                      "tool": "t"}) == []
    assert validate_live_spec("http", {"url": "ftp://x", "method": "FETCH", "timeout": 0, "header": {}}) == [
        "http: unknown key 'header' (did you mean 'headers'?)",
        "http.url must be an http:// or https:// URL, not 'ftp://x'",
        "http.timeout must be a positive number of seconds, not 0",
        "http.method must be one of GET, POST, PUT, PATCH, DELETE, not 'FETCH'",
    ]
    assert validate_live_spec("mcp", {"url": "http://h/mcp", "command": ["x"]}) == [
        "mcp needs exactly one of 'url' (streamable HTTP) or 'command' (a list: program and arguments, "
        "spoken to over stdio)"]
    assert validate_live_spec("mcp", {"command": "python s.py", "headers": {"A": "b"}}) == [
        "mcp.command must be a non-empty list of strings, not 'python s.py'",
        "mcp.headers apply to a 'url' server, not to a 'command'"]
    assert validate_live_spec("http", "https://x") == [
        "http must be a mapping (url, method, headers, timeout), not str"]


def test_a_bad_spec_is_a_tool_error_at_call_time():
    with LiveTools() as live:
        call = live.call(Tool(name="x", http={"method": "GET"}), {})
        canned = live.call(Tool(name="y", returns=1), {})
    assert call.error == "tool 'x': http needs 'url'"
    assert canned.error == "tool 'y' has neither 'http' nor 'mcp'; it is not a live tool"


# --------------------------------------------------------------------------- MCP over stdio


@pytest.fixture(scope="module")
def stdio_live():
    live = LiveTools()
    yield live
    live.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) is not alive
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_mcp_stdio_lists_and_imports_tool_schemas(stdio_live):
    listed = stdio_live.list_mcp_tools(STDIO)
    assert [t["name"] for t in listed] == ["lookup_order", "check_stock", "wait", "stats"]
    tools = expand_mcp_tools({"mcp": STDIO, "only": ["check_stock", "lookup_order"]}, live=stdio_live)
    assert [t["name"] for t in tools] == ["check_stock", "lookup_order"]
    assert tools[1]["description"] == 'Look up an order by its id (digits, e.g. "1234").'
    assert tools[1]["parameters"]["properties"]["order_id"]["type"] == "string"
    assert tools[1]["parameters"]["required"] == ["order_id"]
    assert tools[1]["mcp"] == STDIO
    with pytest.raises(LiveToolError, match=r"has no tool 'lookup' \(it offers: lookup_order, check_stock, "
                                            r"wait, stats\) \(did you mean 'lookup_order'\?\)"):
        expand_mcp_tools({"mcp": STDIO, "only": ["lookup"]}, live=stdio_live)
    with pytest.raises(LiveToolError, match="unknown key 'onyl' in an MCP tool import"):
        expand_mcp_tools({"mcp": STDIO, "onyl": ["x"]}, live=stdio_live)


def test_mcp_stdio_calls_tools_and_records_tool_errors(stdio_live):
    ok = stdio_live.call(Tool(name="lookup_order", mcp=STDIO), {"order_id": "1234"})
    assert ok.error is None
    assert ok.result == {"order_id": "1234", "status": "shipped", "eta": "Tuesday", "items": ["kettle"]}
    renamed = stdio_live.call(Tool(name="stock", mcp={**STDIO, "tool": "check_stock"}), {"item": "Mug"})
    assert renamed.name == "stock" and renamed.result == {"item": "mug", "in_stock": 140, "known": True}
    bad = stdio_live.call(Tool(name="lookup_order", mcp=STDIO), {"order_id": "ABC"})
    assert bad.result is None
    assert bad.error == ("MCP tool 'lookup_order' failed: Error executing tool lookup_order: order id 'ABC' "
                         "is not valid: order ids are digits")
    unknown = stdio_live.call(Tool(name="refund", mcp=STDIO), {})
    assert unknown.error == "MCP tool 'refund' failed: Unknown tool: refund"


def test_mcp_timeout_is_recorded_and_the_session_survives(stdio_live):
    before = stdio_live.call(Tool(name="stats", mcp=STDIO), {}).result
    started = time.monotonic()
    slow = stdio_live.call(Tool(name="wait", mcp={**STDIO, "timeout": 0.4}), {"seconds": 3})
    assert time.monotonic() - started < 2.5
    assert slow.error == "MCP tool 'wait' timed out after 0.4s"
    after = stdio_live.call(Tool(name="stats", mcp=STDIO), {}).result
    assert after["instance"] == before["instance"]  # same server process: not restarted by the timeout


def _servers() -> list[int]:
    """The real pids of the stdio servers this process started (each runs in a PID namespace of its own,
    where its pid is 1): the example server's processes descended from this one."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if SERVER.encode() not in command or Path(command[0].decode()).name == "unshare":
            continue
        pid = int(entry)
        while pid > 1 and pid != os.getpid():
            try:
                pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pid = 0
        if pid == os.getpid():
            found.append(int(entry))
    return found


def test_mcp_stdio_session_is_reused_and_reopened_only_when_the_server_dies():
    others = set(_servers())  # the module's shared session's server
    with LiveTools() as live:
        stats = Tool(name="stats", mcp=STDIO)
        first = live.call(stats, {}).result
        stock = Tool(name="check_stock", mcp=STDIO)
        with ThreadPoolExecutor(8) as pool:
            calls = list(pool.map(lambda i: live.call(stock, {"item": "kettle"}), range(24)))
        last = live.call(stats, {}).result
        assert all(c.error is None and c.result["in_stock"] == 12 for c in calls)
        assert last["instance"] == first["instance"]  # one server process served every call
        assert last["calls"] == first["calls"] + 25
        assert live.sessions_opened == 1

        (server,) = set(_servers()) - others
        os.kill(server, signal.SIGKILL)  # the server crashes between calls
        _wait_dead(server)
        lost = live.call(stats, {})
        assert lost.error == (f"MCP tool 'stats': the server 'python {SERVER} --stdio --test-tools' closed "
                              f"the connection (it reconnects on the next call)")
        again = live.call(stats, {}).result
        assert again["instance"] != first["instance"] and again["calls"] == 1
        assert live.sessions_opened == 2
        (restarted,) = set(_servers()) - others - {server}
        assert _alive(restarted)
    _wait_dead(restarted)
    assert not _alive(restarted)  # close() stopped the stdio server


def _wait_dead(pid: int, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_mcp_connect_failures_are_tool_errors():
    with LiveTools(connect_timeout=5) as live:
        missing = live.call(Tool(name="x", mcp={"command": ["/nonexistent/mcp-server"]}), {})
        refused = live.call(Tool(name="x", mcp={"url": f"http://127.0.0.1:{_free_port()}/mcp"}), {})
    assert missing.error.startswith("could not connect to MCP server '/nonexistent/mcp-server': "
                                    "FileNotFoundError")
    assert refused.error.startswith("could not connect to MCP server http://127.0.0.1:")
    assert "ConnectError" in refused.error


# --------------------------------------------------------------------------- MCP over streamable HTTP


class _CountingProxy:
    """A TCP proxy in front of the MCP server that counts client connections."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def mcp_http():
    port = _free_port()
    process = subprocess.Popen([sys.executable, SERVER, "--port", str(port), "--test-tools"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail("the example MCP server did not start", pytrace=False)
            time.sleep(0.05)
    proxy = _CountingProxy(port)
    yield proxy
    proxy.close()
    process.terminate()
    process.wait(timeout=10)


def test_mcp_http_lists_calls_and_reuses_one_connection(mcp_http):
    spec = {"url": f"http://127.0.0.1:{mcp_http.port}/mcp", "timeout": 5}
    with LiveTools() as live:
        names = [t["name"] for t in live.list_mcp_tools(spec)]
        lookup = Tool(name="lookup_order", mcp=spec)
        results = [live.call(lookup, {"order_id": oid}) for oid in ("1234", "4321")]
        bad = live.call(lookup, {"order_id": "x1"})
        for _ in range(10):
            assert live.call(Tool(name="check_stock", mcp=spec), {"item": "teapot"}).result["in_stock"] == 0
        assert mcp_http.connections == 1  # a listing and 13 calls over one kept-alive connection
        slow = live.call(Tool(name="wait", mcp={**spec, "timeout": 0.3}), {"seconds": 2})
        assert live.call(Tool(name="stats", mcp=spec), {}).error is None  # still usable after a timeout
        assert live.sessions_opened == 1
    assert names == ["lookup_order", "check_stock", "wait", "stats"]
    assert [r.result["status"] for r in results] == ["shipped", "packing"]
    assert bad.error.endswith("order id 'x1' is not valid: order ids are digits")
    assert slow.error == "MCP tool 'wait' timed out after 0.3s"
    assert mcp_http.connections <= 2  # the timed-out request's connection is abandoned, one more opened


def test_mcp_http_env_headers(mcp_http, monkeypatch):
    monkeypatch.setenv("MCP_TOKEN", "t0ken")
    monkeypatch.setenv("EVALJOBS_ALLOWED_ENV", "MCP_TOKEN")  # the operator lets tools send it there
    monkeypatch.setenv("EVALJOBS_ALLOWED_BASE_URLS", f"http://127.0.0.1:{mcp_http.port}")
    spec = {"url": f"http://127.0.0.1:{mcp_http.port}/mcp",
            "headers": {"Authorization": "Bearer ${MCP_TOKEN}"}}
    with LiveTools() as live:
        call = live.call(Tool(name="check_stock", mcp=spec), {"item": "kettle"})
    assert call.error is None and call.result["in_stock"] == 12


# --------------------------------------------------------------------------- catalogs and the adapter


def test_the_example_catalog_imports_its_tools_and_passes_against_the_live_server(monkeypatch):
    monkeypatch.chdir(ROOT / "examples" / "catalogs")  # given as data, not a file: the cwd is its folder
    data = yaml.safe_load((ROOT / "examples" / "catalogs" / "tools_mcp.yaml").read_text())
    providers = load_providers(None)
    with LiveTools() as live:
        out = expand_catalog_tools(data, source="tools_mcp.yaml", live=live)
        catalog = parse_catalog(out, source="tools_mcp.yaml")
        adapter = ConversationAdapter(providers, tool_runner=live_tool_runner(run_canned_tool, live))
        grades = {}
        for scenario in catalog.scenarios:
            replay = adapter(scenario, parse_model_spec("sim/sim", providers))
            grades[scenario.key] = (grade(scenario, replay), replay)
        assert live.sessions_opened == 1  # one server for the listing and every scenario's calls
    assert {key: g.status for key, (g, _) in grades.items()} == dict.fromkeys(catalog.keys, "passed")
    _, replay = grades["stock.teapot-then-order"]
    assert [(c.name, c.result) for c in replay.tool_calls] == [
        ("check_stock", {"item": "teapot", "in_stock": 0, "known": True}),
        ("lookup_order", {"order_id": "5678", "status": "delivered", "eta": None, "items": ["teapot"]})]
    assert "not valid" in grades["orders.bad-id"][1].tool_calls[0].error  # a tool error the agent passed on

    scenarios = {s["key"]: s for g in out["groups"] for s in g["scenarios"]}
    both = scenarios["stock.teapot-then-order"]["tools"]
    assert [t["name"] for t in both] == ["check_stock", "lookup_order"]
    assert scenarios["stock.kettle"]["tools"][0]["mcp"] == {
        "command": ["python", "../mcp_tools/server.py", "--stdio"], "timeout": 10}
    assert scenarios["orders.status"]["tools"] == data["groups"][0]["scenarios"][0]["tools"]  # declared: kept
    assert "only" in data["groups"][1]["scenarios"][0]["tools"][0]  # the input is not modified

    data["groups"][1]["scenarios"][0]["tools"][0]["only"] = ["check_stok"]
    data["groups"][0]["scenarios"][0]["tools"].append({"mcp": {"url": "ftp://nope"}})
    with pytest.raises(CatalogError) as err:
        expand_catalog_tools(data, source="tools_mcp.yaml")
    assert err.value.problems == [
        "tools_mcp.yaml: group 'orders': scenario 'orders.status': tool #2: mcp.url must be an http:// or "
        "https:// URL, not 'ftp://nope'",
        "tools_mcp.yaml: group 'stock': scenario 'stock.kettle': tool #1: MCP server 'python "
        "../mcp_tools/server.py --stdio' has no tool 'check_stok' (it offers: lookup_order, "
        "check_stock) (did you mean 'check_stock'?)",
    ]


def test_conversation_adapter_runs_live_tools(http_url, stdio_live):
    lookup = Tool(name="lookup_order", mcp=STDIO,
                  parameters={"type": "object", "properties": {"order_id": {"type": "string"}}})
    echo = Tool(name="echo", http={"url": f"{http_url}/echo"})
    canned = Tool(name="canned", returns={"ok": True})
    scenario = Scenario(
        key="live", tools=(lookup, echo, canned),
        messages=({"role": "user", "content": 'Where is 1234? [sim: call lookup_order {"order_id": "1234"}] '
                                              '[sim: call echo {"x": 1}] [sim: call canned {}] '
                                              '[sim: call lookup_order {"order_id": "nope"}] '
                                              '[sim: say It has shipped.]'},))
    providers = load_providers(None)
    adapter = ConversationAdapter(providers, tool_runner=live_tool_runner(run_canned_tool, stdio_live))
    replay = adapter(scenario, parse_model_spec("sim/sim", providers))
    assert replay.error is None and replay.answer == "It has shipped."
    by_name = [(c.name, c.result, c.error) for c in replay.tool_calls]
    assert by_name[0] == ("lookup_order", {"order_id": "1234", "status": "shipped", "eta": "Tuesday",
                                           "items": ["kettle"]}, None)
    assert by_name[1] == ("echo", {"method": "POST", "args": {"x": 1}, "auth": None}, None)
    assert by_name[2] == ("canned", {"ok": True}, None)
    assert by_name[3][2].endswith("order id 'nope' is not valid: order ids are digits")
    tool_messages = [m for m in replay.messages if m["role"] == "tool"]
    assert json.loads(tool_messages[0]["content"])["status"] == "shipped"  # the model saw the live result
    assert "not valid" in json.loads(tool_messages[3]["content"])["error"]
