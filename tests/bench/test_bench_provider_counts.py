"""`evaljobs bench` against a provider evaljobs did not write: its figures are the provider's own counts.

The provider is ``tests/helpers/counting_provider.py`` in a process of its own: an OpenAI-compatible
server that serves 4 requests at once, answers 429 beyond that, and counts every request and every
429 itself. Each cell's requests, 429s and error rate must equal what that server counted while the
cell's run was submitted and finished (the benchmark's warm-up runs and the pre-flight check happen
outside any measured run: pre-flight sends no request, and a warm-up is a run of its own that the
counting below attributes to its own run id, not to a cell).
"""
from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers.servers import send_json, serving, url_of

from evaljobs import bench
from evaljobs.api import Session
from evaljobs.providers import ChatClient, ProviderError, attempts
from helpers import CountingServer, counting_files


def counted_sessions(server: CountingServer, seen: dict[str, dict[str, int]]) -> type[Session]:
    """Session as the benchmark uses it, noting what the server counted from each run's submission to
    the session's close (after the run finished)."""

    class Counted(Session):
        _run: tuple[str, dict[str, int]] | None = None

        def submit(self, *args: Any, **kwargs: Any):
            before = server.counts()
            info = super().submit(*args, **kwargs)
            self._run = (info.id, before)
            return info

        def close(self) -> None:
            if self._run is not None:
                run_id, before = self._run
                after = server.counts()
                seen[run_id] = {name: after[name] - before[name] for name in ("requests", "rate_limited")}
                self._run = None
            super().close()

    return Counted


def _bench(sessions: type[Session], catalog: Path, providers: Path, out: Path, **options: Any):
    values: dict[str, Any] = dict(strategies="threads,fanout", widths="2,16", repeat=1, cell_timeout=120.0,
                                  governor=False)
    values.update(options)
    return bench.benchmark(str(catalog), ["counted/m1"], sessions=sessions, providers=str(providers),
                           out=str(out), **values)


def _assert_cells_are_the_servers_counts(run, seen: dict[str, dict[str, int]]) -> None:
    for m in run.result.measurements:
        server = seen[m.run_id]
        assert (m.requests, m.rate_limited) == (server["requests"], server["rate_limited"]), (m, server)
        assert m.errors == 0  # the server answers nothing but 200 and 429
        assert m.error_rate == pytest.approx(server["rate_limited"] / server["requests"])
    by_cell = {(c.strategy, c.width): c for c in run.result.cells}
    for m in run.result.measurements:  # one repeat: the cell is its measurement
        c = by_cell[(m.strategy, m.width)]
        assert (c.requests, c.rate_limited, c.error_rate) == (m.requests, m.rate_limited,
                                                              pytest.approx(m.error_rate, abs=1e-5))
    rec = run.result.recommendation
    if rec.width is not None:
        chosen = by_cell[(rec.strategy, rec.width)]
        assert chosen.error_rate <= 0.01, (chosen, rec.reason)
    else:
        assert all(c.error_rate > 0.01 for c in run.result.cells)
    data = json.loads(run.paths["json"].read_text())
    assert [c["requests"] for c in data["cells"]] == [c.requests for c in run.result.cells]


def test_each_cell_counts_the_requests_and_429s_the_provider_counted(tmp_path, counting_server, monkeypatch):
    """Governor off, width 16 against a provider serving 4 at once: the 429s it sent are in the cell."""
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.01")
    server = counting_server(cap=4, latency=0.05)
    catalog, providers = counting_files(tmp_path, server, scenarios=12)
    seen: dict[str, dict[str, int]] = {}
    run = _bench(counted_sessions(server, seen), catalog, providers, tmp_path / "out")
    _assert_cells_are_the_servers_counts(run, seen)
    wide = [m for m in run.result.measurements if m.width == 16]
    # 12 pairs at once against 4 slots: the provider refused some (its own count, not a timing)
    assert all(seen[m.run_id]["rate_limited"] >= 1 for m in wide)
    assert "requests" in run.table.splitlines()[0]


@pytest.mark.redis
def test_worker_processes_report_the_requests_they_made_through_the_store(tmp_path, counting_server,
                                                                          monkeypatch, redis_url):
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.01")
    server = counting_server(cap=4, latency=0.05)
    catalog, providers = counting_files(tmp_path, server, scenarios=12)
    seen: dict[str, dict[str, int]] = {}
    run = _bench(counted_sessions(server, seen), catalog, providers, tmp_path / "out", strategies="fanout",
                 widths="16", broker=redis_url)
    _assert_cells_are_the_servers_counts(run, seen)
    (m,) = run.result.measurements
    assert seen[m.run_id]["rate_limited"] >= 1


@pytest.fixture
def scripted_provider():
    """A loopback server answering each request as its prompt says: ok, 429, 500, reset (the connection
    closed without an answer) or slow (an answer after 1 s)."""
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            what = body["messages"][-1]["content"]
            if what == "reset":
                self.close_connection = True
                return
            if what == "slow":
                time.sleep(1.0)
            status = {"429": 429, "500": 500}.get(what, 200)
            answer = ({"choices": [{"message": {"role": "assistant", "content": "ok"}}]} if status == 200
                      else {"error": {"message": what}})
            send_json(self, status, answer)

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            pass  # the slow answer's client gave up: its broken pipe is expected

    with serving(Handler, Server) as server:
        yield url_of(server)


def test_the_attempt_log_counts_every_kind_of_answer(scripted_provider):
    """2xx, 429, 5xx, a reset and a timeout: each one request, each counted by its outcome."""
    counts: dict[str, int] = {}
    with ChatClient(scripted_provider, timeout=0.3) as client, attempts.recording(counts):
        for what in ("ok", "429", "500", "reset", "slow"):
            try:
                client.complete("m", [{"role": "user", "content": what}])
            except ProviderError:
                pass
    assert counts == {"ok": 1, "429": 1, "5xx": 1, "network": 1, "timeout": 1}
    seen = attempts.totals([counts])
    assert (seen.requests, seen.rate_limited, seen.errors) == (5, 1, 3)
    assert seen.error_rate == pytest.approx(0.8)
