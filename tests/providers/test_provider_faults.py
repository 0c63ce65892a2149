"""The provider misbehaving, end to end: every fault ends as passed/failed after retries, or errored with
a reason that names it.

The simulated provider injects the faults (``status CODE``, ``sleep S``, ``reset``, ``malformed``,
``truncate``, ``huge BYTES``, ``ratelimit S``, ``fail-first N CODE``); a real ``evaljobs worker``
process evaluates the pairs through Redis, and the same catalog runs through the in-process
``sequential`` strategy, whose retry loop is separate code. Both end with every pair exactly once and
one report (see ``helpers.fleet.assert_every_pair_once``).
"""
from __future__ import annotations

import socket
import threading
import time
import tracemalloc

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.providers.client import DEFAULT_MAX_RESPONSE_BYTES, ChatClient
from evaljobs.network.errors import PermanentError
from evaljobs.evaluation.result import OUTPUT_CAP
from helpers import Fleet, fleet_run, observe

pytestmark = [pytest.mark.redis]

RETRIES = 2  # EVALJOBS_MAX_RETRIES for these runs: a transient fault is tried 1 + 2 = 3 times
WAITS = 3    # EVALJOBS_MAX_RATE_LIMIT_WAITS
SETTINGS = {"EVALJOBS_MAX_RETRIES": str(RETRIES), "EVALJOBS_MAX_RATE_LIMIT_WAITS": str(WAITS),
            "EVALJOBS_MIN_BACKOFF": "0.05", "EVALJOBS_MAX_BACKOFF": "0.2"}

#: key -> (prompt, expected status, expected attempts, what the error must start with / contain)
FAULTS = {
    "ok": ("[sim: say fine]", "passed", 1, None),
    "wrong-answer": ("[sim: say nope]", "failed", 1, None),
    "500-then-ok": ("[sim: fail-first 2 500] [sim: say fine]", "passed", 3, None),
    "503-then-ok": ("[sim: fail-first 1 503] [sim: say fine]", "passed", 2, None),
    "429-then-ok": ("[sim: fail-first 2 429] [sim: say fine]", "passed", 1, None),  # a 429 is not a retry
    "500-always": (
        "[sim: status 500 upstream exploded]",
        "errored",
        3,
        "HTTP 500 from provider: upstream exploded (gave up after 3 attempts)",
    ),
    "timeout": (
        "[sim: sleep 5] [sim: say too late]",
        "errored",
        3,
        "timed out after 1 s waiting for the response (gave up after 3 attempts)",
    ),
    "reset": ("[sim: reset]", "errored", 3, "connection reset before a response (gave up after 3 attempts)"),
    "truncated": ("[sim: truncate] [sim: say fine]", "errored", 3, "response body truncated ("),
    "malformed": ("[sim: malformed]", "errored", 1, "malformed JSON in response body ("),
    "huge": (
        "[sim: huge 50MB]",
        "errored",
        1,
        f"response too large (> {DEFAULT_MAX_RESPONSE_BYTES} bytes; Content-Length 5000",
    ),
    "bad-request": (
        "[sim: status 400 unknown parameter]",
        "errored",
        1,
        "HTTP 400 from provider: unknown parameter",
    ),
    "429-storm": (
        "[sim: ratelimit 0.1]",
        "errored",
        1,
        f"still rate limited after {WAITS} waits: HTTP 429 from provider: simulated rate limit",
    ),
    "big-but-allowed": ("[sim: huge 5MB]", "passed", 1, None),
}


def faults_catalog():
    lines = ["name: provider-faults", "scenarios:"]
    for key, (prompt, status, _, _) in FAULTS.items():
        lines += [f"  - key: {key}", f"    prompt: {prompt!r}"]
        if key in ("ok", "wrong-answer", "500-then-ok", "503-then-ok", "429-then-ok"):
            lines.append("    expect: {contains: [fine]}")
    return loads_catalog("\n".join(lines) + "\n", source="provider-faults.yaml")


@pytest.fixture
def flaky(tmp_path, monkeypatch, simulated_provider):
    """A provider entry 'flaky' on the simulated provider, with a 1-second timeout."""
    sim = simulated_provider(latency=0.02, retry_after=0.1, export=False)
    path = tmp_path / "providers.yaml"
    path.write_text(f"providers:\n  flaky:\n    base_url: {sim.url}\n    timeout: 1\n")
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(path))
    for name, value in SETTINGS.items():
        monkeypatch.setenv(name, value)
    return sim


def check_outcomes(run_id: str) -> dict[str, str]:
    results = {r.scenario_key: r for r in store.list_results(run_id)}
    for key, (_, status, attempts, reason) in FAULTS.items():
        result = results[key]
        assert result.status == status, (key, result.status, result.error)
        assert result.attempts == attempts, (key, result.attempts, result.error)
        if reason is None:
            assert result.error is None, (key, result.error)
        else:
            assert result.error.startswith(reason), (key, result.error)
            assert "\n" not in result.error and len(result.error) < 600
    # A 5 MB answer is accepted but stored capped: the output column and the transcript in details.
    big = results["big-but-allowed"]
    assert len(big.output) <= OUTPUT_CAP + len("…[truncated]")
    assert len(repr(big.details)) < 4 * OUTPUT_CAP
    return {key: results[key].status for key in FAULTS}


def test_every_provider_fault_on_a_worker_process(redis_url, sqlite_url, flaky, tmp_path):
    catalog = faults_catalog()
    fleet = Fleet(redis_url, sqlite_url, tmp_path / "logs", count=1, threads=8, env=SETTINGS)
    with fleet_run(fleet, catalog, ["flaky/m"], db=sqlite_url, broker=redis_url) as run:
        info = run.session.wait(run.id, timeout=120, poll=0.5)
    check_outcomes(run.id)
    assert info.status == "partial"
    observe("provider-faults-fanout", **run.observed)


def test_every_provider_fault_in_process(sqlite_url, flaky):
    """The ``sequential`` strategy's retry loop (evaluate_with_retries) ends each fault the same way."""
    catalog = faults_catalog()
    with Session(db=sqlite_url) as session:
        info = session.submit(catalog, ["flaky/m"], strategy="sequential")
    assert info.report is not None and info.report["summary"]["results"] == len(FAULTS)
    assert len({(r.scenario_key, r.model) for r in store.list_results(info.id)}) == len(FAULTS)
    check_outcomes(info.id)


def test_a_429_storm_is_waited_out_and_every_pair_passes(redis_url, sqlite_url, tmp_path, monkeypatch,
                                                         simulated_provider):
    """16 worker threads against a provider that admits 2 calls at a time: every refused call is a 429
    with Retry-After. Rate limits are not faults: every pair passes on its first attempt."""
    stormy = simulated_provider(latency=0.05, max_concurrent=2, retry_after=0.2, export=False)
    path = tmp_path / "providers.yaml"
    path.write_text(f"providers:\n  stormy:\n    base_url: {stormy.url}\n")
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(path))
    lines = ["name: storm", "scenarios:"] + [
        f"  - {{key: s{i:02d}, prompt: '[sim: say calm {i}]', expect: {{contains: ['calm {i}']}}}}"
        for i in range(40)]
    catalog = loads_catalog("\n".join(lines) + "\n", source="storm.yaml")
    # No governor: the workers hit the provider's limit head-on, as a fleet without one would.
    fleet = Fleet(redis_url, sqlite_url, tmp_path / "logs", count=2, threads=8,
                  env={"EVALJOBS_GOVERNOR": "off", "EVALJOBS_MAX_RATE_LIMIT_WAITS": "200"})
    with fleet_run(fleet, catalog, ["stormy/m"], db=sqlite_url, broker=redis_url) as run:
        info = run.session.wait(run.id, timeout=120, poll=0.5)
    stats = stormy.stats()
    results = store.list_results(run.id)
    assert info.status == "complete"
    assert all(r.status == "passed" and r.attempts == 1 for r in results)
    assert stats["rate_limited"] >= 10, stats  # it was a storm
    observe("429-storm", rate_limited=stats["rate_limited"], calls=stats["requests"], **run.observed)


def _chunked_flood(total: int) -> tuple[str, threading.Thread]:
    """A one-shot HTTP server answering 200 with ``total`` bytes, chunked (no Content-Length to refuse)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            chunk = b"x" * 65536
            sent = 0
            try:
                while sent < total:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    sent += len(chunk)
                conn.sendall(b"0\r\n\r\n")
            except OSError:
                pass  # the client hung up once it had enough: the point
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/v1", thread


def test_a_50_mb_answer_without_content_length_is_refused_in_bounded_memory():
    url, server = _chunked_flood(50_000_000)
    client = ChatClient(url, timeout=30)
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(PermanentError) as info:
            client.complete("m", [{"role": "user", "content": "flood me"}])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        client.close()
    assert info.value.reason == f"response too large (> {DEFAULT_MAX_RESPONSE_BYTES} bytes)"
    assert peak < 3 * DEFAULT_MAX_RESPONSE_BYTES, f"peak {peak / 1e6:.1f} MB for a 50 MB answer"
    assert time.monotonic() - started < 20
    server.join(10)
