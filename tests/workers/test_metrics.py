"""Prometheus metrics: a real Prometheus scrapes real worker processes during a run with 429s.

``evaljobs worker --metrics-port`` serves the sum of its Dramatiq processes' values (prometheus_client's
multiprocess mode) and the fleet's gauges; the test asks Prometheus itself, over its HTTP API, for the
run's pair count, the 429s the simulated provider served and the latency histogram.
"""
from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from helpers import (ROOT, Fleet, PrometheusServer, fleet_run, free_port, numbered_catalog, pool_thread,
                     wait_until)

from evaljobs import store, telemetry
from evaljobs.providers.calls import outcome_of
from evaljobs.network.errors import PermanentError, RateLimited, TransientError

PAIRS_MODELS = ["stormy/a", "stormy/b"]


@pytest.mark.redis
def test_prometheus_scrapes_two_workers_during_a_run_with_429s(redis_url, sqlite_url, tmp_path, monkeypatch,
                                                               simulated_provider):
    # Every pair's first call is a 429 with Retry-After (the simulated provider's fail-first): 200 of them.
    stormy = simulated_provider(latency=0.01, jitter=0.0, retry_after=0.05, export=False)
    providers = tmp_path / "providers.yaml"
    providers.write_text(f"providers:\n  stormy:\n    base_url: {stormy.url}\n")
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(providers))
    catalog = numbered_catalog(100, "metrics", prompt="[sim: fail-first 1 429] [sim: say answer {i}]")
    ports = [free_port(), free_port()]
    # No governor: a 429 does not pause a budget; the pair waits out its Retry-After and asks again.
    fleet = Fleet(redis_url, sqlite_url, tmp_path / "logs", count=0, threads=4,
                  env={"EVALJOBS_GOVERNOR": "off", "EVALJOBS_MAX_RATE_LIMIT_WAITS": "1000"})
    for index, port in enumerate(ports):
        worker = fleet.make()
        worker.env["EVALJOBS_METRICS_PORT"] = str(port)
        if index == 0:  # two Dramatiq processes behind one exposition: their values are summed
            worker.args[worker.args.index("--processes") + 1] = "2"
        fleet.workers.append(worker)
    targets = [f"127.0.0.1:{port}" for port in ports]
    with PrometheusServer(targets, interval=0.5) as prometheus, \
            fleet_run(fleet, catalog, PAIRS_MODELS, db=sqlite_url, broker=redis_url) as run:
        info = run.session.wait(run.id, timeout=240, poll=0.5)
        assert info.status == "complete", info.status
        served_429 = stormy.stats()["rate_limited"]
        assert served_429 == 200  # one per pair

        up = prometheus.wait_for("up", lambda r: len(r) == 2 and all(s["value"][1] == "1" for s in r))
        assert sorted(s["metric"]["instance"] for s in up) == sorted(targets), prometheus.log_tail()
        pairs = prometheus.wait_for("sum(evaljobs_pairs_total)", lambda r: r and r[0]["value"][1] == "200")
        assert pairs and float(pairs[0]["value"][1]) == 200, (pairs, fleet.log_text())
        by_model = prometheus.query("sum by (model, status) (evaljobs_pairs_total)")
        assert {(s["metric"]["model"], s["metric"]["status"], s["value"][1]) for s in by_model} == \
            {("stormy/a", "passed", "100"), ("stormy/b", "passed", "100")}
        limited = prometheus.wait_for('sum(evaljobs_provider_requests_total{outcome="429"})',
                                      lambda r: r and float(r[0]["value"][1]) == served_429)
        assert limited and float(limited[0]["value"][1]) == served_429, (limited, served_429)
        # The latency histogram: one observation per answered request, in buckets.
        answered = prometheus.value('sum(evaljobs_provider_requests_total{outcome="ok"})')
        assert answered == 200
        count = prometheus.value("sum(evaljobs_provider_latency_seconds_count)")
        assert count == answered
        buckets = prometheus.query("sum by (le) (evaljobs_provider_latency_seconds_bucket)")
        assert len(buckets) > 1
        assert max(float(s["value"][1]) for s in buckets) == answered  # the +Inf bucket holds them all
        tokens = prometheus.query("sum by (direction) (evaljobs_tokens_total)")
        assert {s["metric"]["direction"] for s in tokens} == {"input", "output"}
        # Read at scrape time from Redis: the run's queue is known to every exposition.
        queues = prometheus.query('evaljobs_queue_messages{queue="agents"}')
        assert {s["metric"]["state"] for s in queues} == {"ready", "in_flight", "delayed", "dead_lettered"}
        # No run id or scenario key is ever a label value.
        labels = prometheus.query('{__name__=~"evaljobs_.*"}')
        values = {v for s in labels for v in s["metric"].values()}
        assert run.id not in values and not any(v.startswith("s00") for v in values)
    assert len(store.list_results(run.id)) == 200


def test_outcome_labels_are_bounded():
    assert outcome_of(RateLimited("slow down")) == "429"
    assert outcome_of(TransientError("HTTP 503 from provider: busy", status=503)) == "5xx"
    assert outcome_of(PermanentError("HTTP 400 from provider: bad", status=400)) == "4xx"
    assert outcome_of(TransientError("timed out after 5 s waiting for the response")) == "timeout"
    assert outcome_of(TransientError("connection reset before a response")) == "network"
    assert outcome_of(PermanentError("undecodable response body")) == "error"


def test_cost_and_tokens_carry_the_same_provider_and_model_labels():
    """A PromQL join of cost and tokens by (provider, model) matches: the cost's model is not the spec."""
    import prometheus_client as prom

    from evaljobs.workers.metrics import PrometheusObserver

    registry = prom.CollectorRegistry()
    observer = PrometheusObserver(registry)
    observer.provider_call(telemetry.ProviderCall("vllm", "meta-llama/Llama-3-8B", "ok", 0.1, input_tokens=7))
    observer.pair_recorded(telemetry.PairRecorded("vllm/meta-llama/Llama-3-8B@base", "passed", 0.2, 0.5))
    observer.pair_recorded(telemetry.PairRecorded("vllm/meta-llama/Llama-3-8B", "failed", 0.2, None))
    labels = {"provider": "vllm", "model": "meta-llama/Llama-3-8B"}
    assert registry.get_sample_value("evaljobs_tokens_total", {**labels, "direction": "input"}) == 7
    assert registry.get_sample_value("evaljobs_cost_dollars_total", labels) == 0.5
    assert registry.get_sample_value("evaljobs_pairs_cost_unknown_total", labels) == 1


def test_a_pool_serves_its_metrics_in_process(redis_url, sqlite_url, simulated_provider):
    """An elastic pool is one process: its members' counts are served from memory, with the fleet gauges."""
    from evaljobs.api import Session

    simulated_provider(latency=0.01)
    port = free_port()
    with pool_thread(redis_url, sqlite_url, metrics_port=port):
        with Session(db=sqlite_url, broker=redis_url) as session:
            info = session.submit(numbered_catalog(3, "pool-metrics"), ["sim/a"])
            assert session.wait(info.id, timeout=120, poll=0.2).status == "complete"

        def scrape() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    return response.read().decode()
            except OSError:
                return ""

        counted = 'evaljobs_pairs_total{model="sim/a",status="passed"} 3.0'
        assert wait_until(lambda: counted in scrape(), 30), scrape()
        text = scrape()
        assert 'evaljobs_runs{status="running"}' in text and "evaljobs_governor_limit" in text
    assert not telemetry.watched()  # the pool stopped counting when it stopped


def test_nothing_is_imported_or_observed_without_metrics():
    """A worker without --metrics-port imports no prometheus_client and reports to no one."""
    code = ("import sys, evaljobs.pipeline.actors, evaljobs.providers.calls, evaljobs.pipeline.barrier\n"
            "from evaljobs import telemetry\n"
            "assert 'prometheus_client' not in sys.modules and 'opentelemetry' not in sys.modules\n"
            "assert not telemetry.watched() and telemetry.span('x') is telemetry.NO_SPAN\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


@pytest.mark.redis
def test_the_viewer_serves_the_fleet_gauges_behind_its_token(redis_url, sqlite_url, tmp_path):
    """``evaljobs view --token`` answers /metrics only with the token; Prometheus sends it as a bearer."""
    from helpers import Viewer

    token = "metrics-token-0123456789abcdef"
    store.connect(sqlite_url)  # the viewer reads an existing database; it creates none
    viewer = Viewer(sqlite_url, redis_url, tmp_path / "view.log", extra=["--token", token])
    try:
        request = urllib.request.Request(f"{viewer.url}/metrics")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
        with PrometheusServer([f"127.0.0.1:{viewer.port}"], interval=0.5, authorization=token) as prometheus:
            ready = prometheus.wait_for('evaljobs_queue_messages{queue="agents",state="ready"}',
                                        lambda r: len(r) == 1)
            assert len(ready) == 1, prometheus.query("up")
            runs = prometheus.query("evaljobs_runs")
            assert {s["metric"]["status"] for s in runs} == {"pending", "running"}
    finally:
        viewer.close()


@pytest.mark.redis
@pytest.mark.parametrize("command", [["worker"], ["pool"], ["worker", "--min", "1", "--max", "2"]])
def test_a_taken_port_is_one_line_before_anything_starts(redis_url, sqlite_url, command):
    """Every command that binds says so in one line (``pool`` printed a traceback, issue 40.14)."""
    import socket

    from helpers import evaljobs_cli

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for option in ("--metrics-port", "--health-port"):
            done = evaljobs_cli(*command, "--broker", redis_url, "--db", sqlite_url, option, str(port))
            assert done.returncode == 2, done.stderr
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0] and option in lines[0]


@pytest.mark.redis
@pytest.mark.parametrize("option", ["metrics_port", "health_port"])
def test_a_pool_whose_port_is_taken_after_the_check_is_one_line_and_starts_nothing(redis_url, sqlite_url,
                                                                                    option):
    """The bind itself (a port taken between the check and the listen) is the same one line."""
    import socket

    from evaljobs.errors import OptionError
    from evaljobs.workers.serve import run_pool

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OptionError) as caught:
            run_pool(min=1, max=2, idle_seconds=5, lane="bulk", broker=redis_url, db=sqlite_url,
                     recover_every=60, **{option: port})
    assert str(caught.value) == (f"--{option.replace('_', '-')}: cannot listen on 127.0.0.1:{port}: "
                                 "Address already in use")
    assert not telemetry.watched()  # nothing left counting for a server that never listened


def test_model_labels_are_folded_beyond_the_cap():
    """1,500 ``@label`` variants made 28,537 series (2.4 MB a scrape) for the process's life: beyond
    MAX_MODEL_LABELS distinct models, the rest count under ``other``, and nothing counted is lost."""
    import prometheus_client as prom

    from evaljobs.workers.metrics import MAX_MODEL_LABELS, OTHER, PrometheusObserver

    registry = prom.CollectorRegistry()
    observer = PrometheusObserver(registry)
    for index in range(1500):
        observer.provider_call(telemetry.ProviderCall("sim", f"m{index}", "ok", 0.1, input_tokens=2))
        observer.pair_recorded(telemetry.PairRecorded(f"sim/m{index}@variant-{index}", "passed", 0.2, 0.5))
    body = prom.generate_latest(registry).decode()
    series = [line for line in body.splitlines() if line and not line.startswith("#")]
    specs = {s.labels["model"] for f in registry.collect() if f.name == "evaljobs_pairs"
             for s in f.samples}
    assert len(specs) == MAX_MODEL_LABELS + 1 and OTHER in specs
    assert "sim/m0@variant-0" in specs and "sim/m1499@variant-1499" not in specs
    assert len(series) < 25 * (MAX_MODEL_LABELS + 1) * 2, len(series)
    assert registry.get_sample_value("evaljobs_pairs_total", {"status": "passed", "model": OTHER}) == 1400
    # cost and tokens fold to the same (provider, model), so a join by those labels still matches
    other = {"provider": "sim", "model": OTHER}
    assert registry.get_sample_value("evaljobs_tokens_total", {**other, "direction": "input"}) == 2800
    assert registry.get_sample_value("evaljobs_cost_dollars_total", other) == 700
    assert registry.get_sample_value("evaljobs_cost_dollars_total", {"provider": "sim", "model": "m7"}) == 0.5


def test_governor_budgets_are_folded_beyond_the_cap_busy_ones_first():
    from evaljobs.workers.metrics import MAX_MODEL_LABELS, OTHER, _fold_budgets

    rows = [{"budget": f"sim:m{i:04d}", "limit": 4, "in_flight_interactive": 0, "in_flight_bulk": 0,
             "waiting_interactive": 0, "waiting_bulk": 0} for i in range(1500)]
    rows[1499]["in_flight_bulk"] = 3
    folded = _fold_budgets(rows)
    assert len(folded) == MAX_MODEL_LABELS + 1
    assert folded["sim:m1499"]["in_flight_bulk"] == 3  # a busy budget is named, whatever its place
    assert folded[OTHER]["limit"] == 4 * (1500 - MAX_MODEL_LABELS)
