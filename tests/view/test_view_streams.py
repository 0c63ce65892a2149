"""Viewer live streams stay bounded (issue 29 item 5): the mechanism, against the real ASGI server.

The viewer's app runs under uvicorn on a loopback socket whose send buffer is small and fixed
(so the kernel cannot absorb a stream: what a client does not read stays in the server), and the
clients are raw sockets that send their request and never read. Nothing here is timed: each test
waits for a state the server reports at ``/live/stats`` (a stream dropped, streams open, bytes
queued). How much memory that saves is measured by ``scripts/bench_view_streams`` (BENCHMARKS.md).
"""
from __future__ import annotations

import asyncio
import socket
import threading

import httpx
import pytest
from helpers import wait_until

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report
from evaljobs.view.config import ViewConfig
from evaljobs.view.live import ROWS_PER_EVENT
from evaljobs.view.streams import StreamLimits

pytest.importorskip("uvicorn", reason="the 'view' extra")


class Server:
    """``create_app(config)`` under uvicorn on 127.0.0.1, on a socket with a 4 KiB send buffer."""

    def __init__(self, limits: StreamLimits) -> None:
        import uvicorn

        from evaljobs.view.app import create_app

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # inherited by accepted sockets
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = ViewConfig(port=self.port, poll_seconds=0.2, stream_limits=limits)
        self.server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning", access_log=False,
                                                    lifespan="off", timeout_graceful_shutdown=1))
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])),
                                       daemon=True)
        self.thread.start()
        assert wait_until(lambda: self.server.started, 30, 0.01), "the viewer did not start"
        self.url = f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict:
        return httpx.get(f"{self.url}/live/stats", timeout=10).json()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()


def silent_client(port: int, path: str) -> socket.socket:
    """A client that asks for ``path`` and then never reads (a 4 KiB receive window)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    return sock


def read_all(sock: socket.socket) -> bytes:
    sock.settimeout(60)
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return data


def big_run(results: int, *, finished: bool = False) -> str:
    """A run with ``results`` stored rows, each with a 240-character answer (what the stream sends)."""
    catalog = loads_catalog("name: big\nscenarios:\n" + "".join(
        f"  - {{key: s{i:05d}, prompt: q}}\n" for i in range(results)), source="big.yaml")
    run = store.create_run(catalog, ["m"], strategy="sequential")
    store.mark_running(run.id)
    rows = [
        Result(f"s{i:05d}", "m", "passed", 1.0, output=f"answer {i} " + "x" * 240) for i in range(results)
    ]
    for start in range(0, results, 1000):
        store.record_results(run.id, rows[start:start + 1000])
    if finished:
        store.finalize(run.id, build_report)
    return run.id


@pytest.fixture
def db(tmp_path):
    store.connect(f"sqlite:///{tmp_path}/view.db")


def test_a_client_that_never_reads_is_dropped_with_a_final_event_and_its_memory_released(db):
    run_id = big_run(3000)
    server = Server(StreamLimits(max_streams=8, client_bytes=20_000, slow_seconds=0.5, farewell_seconds=60))
    try:
        client = silent_client(server.port, f"/live/runs/{run_id}?after=0")
        # It takes the first pieces into its socket, then nothing: its queue fills and stays full.
        assert wait_until(lambda: server.stats()["dropped"] == 1, 60, 0.05), server.stats()
        held = server.stats()
        assert held["open"] == 1 and held["queued_bytes"] <= 20_000  # only the farewell is left for it
        data = read_all(client)  # now it reads: what reached its socket, the farewell, and the end
        client.close()
        assert wait_until(lambda: server.stats()["open"] == 0, 30, 0.05), server.stats()
        after = server.stats()
    finally:
        server.close()
    text = data.decode("utf-8", "replace")
    assert text.count("event: update") < 3000 // ROWS_PER_EVENT  # dropped before the end of the backlog
    # the last event is the farewell, and the response ends properly (chunked: the zero-length chunk)
    assert text.endswith('event: dropped\ndata: {"reason":"this page took too long to read its updates; '
                         'reload it to follow the run again"}\n\n\r\n0\r\n\r\n'), text[-300:]
    assert "event: dropped" in text and after["queued_bytes"] == 0 and after["dropped"] == 1


def test_a_client_that_reads_gets_the_whole_backlog_in_pieces_and_is_never_dropped(db):
    run_id = big_run(1200, finished=True)
    server = Server(StreamLimits(max_streams=8, client_bytes=20_000, slow_seconds=30, farewell_seconds=5))
    try:
        with (
            httpx.Client(timeout=60) as client,
            client.stream("GET", f"{server.url}/live/runs/{run_id}?after=0") as r,
        ):
            body = "".join(r.iter_text())
        stats = server.stats()
    finally:
        server.close()
    # in pieces
    assert body.count("event: update") == 1200 // ROWS_PER_EVENT and body.count('"key":"s') == 1200
    assert body.rstrip().endswith('event: done\ndata: {"status":"complete"}')
    assert stats["dropped"] == 0 and stats["open"] == 0 and stats["queued_bytes"] == 0


def test_streams_beyond_the_maximum_are_refused_in_one_line_and_counted_back_down(db):
    run_id = big_run(3)
    server = Server(StreamLimits(max_streams=2, client_bytes=20_000, slow_seconds=60, farewell_seconds=5))
    try:
        first, second = (silent_client(server.port, f"/live/runs/{run_id}") for _ in range(2))
        assert wait_until(lambda: server.stats()["open"] == 2, 30, 0.05), server.stats()
        refused = httpx.get(f"{server.url}/live/runs/{run_id}", timeout=10)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
        assert refused.text.count("\n") == 1 and "2 live streams are open" in refused.text
        first.close()
        second.close()  # leaving: the server hears the disconnect and closes the stream
        assert wait_until(lambda: server.stats()["open"] == 0, 30, 0.05), server.stats()
        with (
            httpx.Client(timeout=10) as client,
            client.stream("GET", f"{server.url}/live/runs/{run_id}") as again,
        ):
            assert again.status_code == 200  # room again
        stats = server.stats()
    finally:
        server.close()
    assert stats["refused"] == 1 and stats["opened"] == 3
