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
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from evaljobs.api import Session
from helpers.servers import free_port

SERVER = Path(__file__).parent / "helpers" / "counting_provider.py"


class CountingServer:
    """The counting provider as a process on a free loopback port."""

    def __init__(self, *, cap: int, latency: float, announce: bool = False):
        self.port = free_port()
        args = [sys.executable, str(SERVER), "--port", str(self.port), "--cap", str(cap),
                "--latency", str(latency)]
        self.proc = subprocess.Popen(args + (["--announce"] if announce else []), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:  # ready once it answers (a condition, not a sleep)
            try:
                self.counts()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the counting provider did not start") from None
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def counts(self) -> dict[str, int]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/counts", timeout=5) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def counting_server():
    servers: list[CountingServer] = []

    def start(**options: Any) -> CountingServer:
        servers.append(CountingServer(**options))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


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


def _files(tmp_path: Path, server: CountingServer, scenarios: int) -> tuple[Path, Path]:
    catalog = tmp_path / "counted.yaml"
    catalog.write_text("name: counted\ndefaults: {max_turns: 1}\nscenarios:\n" + "".join(
        f"  - key: s{i:02d}\n    prompt: \"question {i}\"\n    expect: {{contains: ['ok']}}\n"
        for i in range(scenarios)))
    providers = tmp_path / "providers.yaml"
    providers.write_text(f'providers:\n  counted: {{api: openai, base_url: "{server.url}", '
                         f'api_key_env: null, stream: false}}\n')
    return catalog, providers


def _bench(sessions: type[Session], catalog: Path, providers: Path, out: Path, **options: Any):
    values: dict[str, Any] = dict(strategies="threads,fanout", widths="2,16", repeat=1, cell_timeout=120.0,
                                  governor=False)
    values.update(options)
    return sessions.benchmark(str(catalog), ["counted/m1"], providers=str(providers), out=str(out), **values)


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
    catalog, providers = _files(tmp_path, server, scenarios=12)
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
    catalog, providers = _files(tmp_path, server, scenarios=12)
    seen: dict[str, dict[str, int]] = {}
    run = _bench(counted_sessions(server, seen), catalog, providers, tmp_path / "out", strategies="fanout",
                 widths="16", broker=redis_url)
    _assert_cells_are_the_servers_counts(run, seen)
    (m,) = run.result.measurements
    assert seen[m.run_id]["rate_limited"] >= 1
