"""Prometheus metrics: what the workers did (pairs, provider calls, tokens, cost) and what the fleet holds.

Two kinds, served together on ``--metrics-port`` (and by ``evaljobs view`` at ``/metrics``):

* **counted where it happens** — :class:`PrometheusObserver` is a :mod:`evaljobs.telemetry`
  observer: each recorded pair and each provider request adds to counters and histograms. A fixed
  worker runs several Dramatiq processes, so these use ``prometheus_client``'s multiprocess mode,
  as Dramatiq's own Prometheus middleware does: each process writes its values to memory-mapped
  files in ``PROMETHEUS_MULTIPROC_DIR`` (``evaljobs worker`` makes one per metrics port and hands
  it to the processes), and the exposition process — a Dramatiq fork process, :func:`serve` — sums
  them at every scrape. An elastic pool is one process and keeps them in memory.
* **read at scrape time** — :class:`FleetCollector` reads the queues' depth, the active runs and
  the governor's budgets from Redis and the database (known keys and indexed counts, never a scan:
  the same reads as ``evaljobs status``). Every exposition reports them; aggregate with ``max``.

Labels are bounded: model specs, provider names, governor budgets, queues, statuses and outcomes —
never a run id or a scenario key. Model specs, (provider, model) pairs and governor budgets are each
capped at :data:`MAX_MODEL_LABELS` distinct values a process (the first seen keep their name, later
ones are counted under ``other``): a run with 1,500 ``@label`` variants made 28,537 series, 2.4 MB a
scrape, kept for the process's life. ``prometheus_client`` is imported only here, and this module only
when metrics are asked for (the ``metrics`` extra).
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any, TypeVar

import prometheus_client as prom
from prometheus_client import multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from evaljobs import config, store, telemetry
from evaljobs.config import REDIS_SCHEMES, Settings
from evaljobs.pipeline.broker import queue_name
from evaljobs.workers import status
from evaljobs.workers.routes_http import Answer, route_server, serve_until_stopped

logger = logging.getLogger("evaljobs.workers.metrics")
T = TypeVar("T")

#: Seconds; a pair is one conversation (several provider calls, tools, graders).
PAIR_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: Seconds; one provider request (or the time to its first streamed token).
CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
QUEUE_STATES = ("ready", "in_flight", "delayed", "dead_lettered")
ACTIVE_RUN_STATUSES = ("pending", "running")
#: Distinct model labels (and governor budgets) a process reports by name; the rest are ``other``.
MAX_MODEL_LABELS = 100
#: The label value every model (or budget) beyond :data:`MAX_MODEL_LABELS` is counted under.
OTHER = "other"


class LabelFold:
    """The first ``cap`` distinct values keep their name; any later one is :data:`OTHER`.

    Why: a Prometheus series lives as long as the process, and every label value is one more
    series per metric (a histogram: 17). First come keeps a value's history continuous: a model
    counted by name stays counted by name.
    """

    def __init__(self, cap: int = MAX_MODEL_LABELS) -> None:
        self.cap = cap
        self._seen: set[Any] = set()
        self._lock = threading.Lock()

    def __call__(self, value: T, other: T) -> T:
        """``value`` if it is (or may become) one of the named ones, else ``other``."""
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) < self.cap:
                self._seen.add(value)
                return value
        return other


def _provider_and_model(spec: str) -> tuple[str, str]:
    """``provider/model[@label]`` as the ``provider`` and ``model`` labels the provider-call metrics use.

    Why: ``evaljobs_cost_dollars_total`` and ``evaljobs_tokens_total`` share the label names
    ``provider, model``; with the spec's ``sim/fast`` in one and ``fast`` in the other, a PromQL
    join (cost per token, by model) matched nothing.
    """
    base = spec.rsplit("@", 1)[0] if "@" in spec else spec
    provider, _, model = base.partition("/")
    return (provider, model) if model else ("unknown", base)


class PrometheusObserver:
    """Counts recorded pairs and provider requests (a :class:`evaljobs.telemetry.Observer`)."""

    def __init__(self, registry: prom.CollectorRegistry | None = None) -> None:
        def counter(name: str, doc: str, labels: tuple[str, ...]) -> prom.Counter:
            return prom.Counter(name, doc, labels, registry=registry)

        def histogram(name: str, doc: str, labels: tuple[str, ...],
                      buckets: tuple[float, ...]) -> prom.Histogram:
            return prom.Histogram(name, doc, labels, buckets=buckets, registry=registry)

        self.pairs = counter("evaljobs_pairs_total", "Pairs recorded, by result status and model.",
                             ("status", "model"))
        self.pair_duration = histogram("evaljobs_pair_duration_seconds", "Time one pair's evaluation took.",
                                       ("model",), PAIR_BUCKETS)
        self.requests = counter("evaljobs_provider_requests_total",
                                "Provider requests, by outcome (ok, 429, 5xx, 4xx, timeout, network, error).",
                                ("provider", "model", "outcome"))
        self.latency = histogram("evaljobs_provider_latency_seconds", "Provider request latency (answered).",
                                 ("provider", "model"), CALL_BUCKETS)
        self.ttft = histogram("evaljobs_provider_ttft_seconds", "Time to the first streamed token.",
                              ("provider", "model"), CALL_BUCKETS)
        self.tokens = counter("evaljobs_tokens_total", "Tokens sent (input) and received (output).",
                              ("provider", "model", "direction"))
        self.cost = counter("evaljobs_cost_dollars_total", "Known cost of recorded pairs, USD.",
                            ("provider", "model"))
        self.cost_unknown = counter("evaljobs_pairs_cost_unknown_total",
                                    "Recorded pairs whose cost is unknown (no price for the model): not in "
                                    "evaljobs_cost_dollars_total.", ("provider", "model"))
        self._specs = LabelFold()
        self._providers = LabelFold()
        self._models = LabelFold()

    def _deployment(self, provider: str, model: str) -> tuple[str, str]:
        """The (provider, model) labels, folded: the same pair for cost and tokens (a join matches)."""
        provider = self._providers(provider, OTHER)
        return self._models((provider, model), (provider, OTHER))

    def provider_call(self, call: telemetry.ProviderCall) -> None:
        provider, model = self._deployment(call.provider, call.model)
        self.requests.labels(provider, model, call.outcome).inc()
        if call.outcome != "ok":
            return
        self.latency.labels(provider, model).observe(call.latency)
        if call.ttft is not None:
            self.ttft.labels(provider, model).observe(call.ttft)
        if call.input_tokens:
            self.tokens.labels(provider, model, "input").inc(call.input_tokens)
        if call.output_tokens:
            self.tokens.labels(provider, model, "output").inc(call.output_tokens)

    def pair_recorded(self, pair: telemetry.PairRecorded) -> None:
        spec = self._specs(pair.model, OTHER)
        self.pairs.labels(pair.status, spec).inc()
        self.pair_duration.labels(spec).observe(pair.duration)
        provider, model = self._deployment(*_provider_and_model(pair.model))
        if pair.cost is None:
            self.cost_unknown.labels(provider, model).inc()
        else:
            self.cost.labels(provider, model).inc(pair.cost)


class FleetCollector(Collector):
    """Queue depth, active runs and governor budgets, read at each scrape (no scan: as `evaljobs status`)."""

    def __init__(self, settings: Settings, *, queues: tuple[str, ...] = (),
                 broker_url: str | None = None) -> None:
        self.settings = settings
        self.queues = queues
        self.broker_url = broker_url or settings.broker_url or ""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        runs = GaugeMetricFamily("evaljobs_runs", "Runs pending or running (from the database).",
                                 labels=["status"])
        try:
            # a scrape answers now, with the other metrics, while the database is down
            with store.without_waiting():
                counts = store.count_runs(ACTIVE_RUN_STATUSES)
            for name, count in counts.items():
                runs.add_metric([name], count)
        except Exception as exc:  # noqa: BLE001 - a lost connection (any driver error) must not fail the scrape
            logger.warning("metrics: cannot count runs: %s", store.redact(str(exc)))
        yield runs
        url = self.broker_url
        if not url.startswith(REDIS_SCHEMES):
            return
        queue_gauge = GaugeMetricFamily("evaljobs_queue_messages", "Messages on each queue, by state.",
                                        labels=["queue", "state"])
        backlog = GaugeMetricFamily("evaljobs_queue_backlog",
                                    "Work a queue's workers still have to do: messages ready, delayed "
                                    "(rate-limit and retry waits) and in flight (fetched, not acked).",
                                    labels=["queue"])
        import redis

        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        try:
            names = list(dict.fromkeys([queue_name(), *self.queues]))
            for depth in status.read_queues(client, names):
                for state in QUEUE_STATES:
                    queue_gauge.add_metric([depth.name, state], getattr(depth, state))
                backlog.add_metric([depth.name], backlog_of(depth))
        except redis.RedisError as exc:
            logger.warning("metrics: cannot read the queues: %s", store.redact(str(exc)))
        finally:
            client.close()
        yield queue_gauge
        yield backlog
        yield from self._governor(status, self.settings.governor_url or url)

    def _governor(self, status: Any, url: str) -> Iterator[GaugeMetricFamily]:
        limit = GaugeMetricFamily("evaljobs_governor_limit", "Concurrent provider calls a budget allows now.",
                                  labels=["budget"])
        in_flight = GaugeMetricFamily("evaljobs_governor_in_flight", "Provider calls holding a permit.",
                                      labels=["budget", "lane"])
        waiting = GaugeMetricFamily("evaljobs_governor_waiting", "Calls waiting for a permit.",
                                    labels=["budget", "lane"])
        try:
            rows = status.read_governor(url) or []
        except Exception as exc:  # noqa: BLE001 - one bad section must not fail the scrape
            logger.warning("metrics: cannot read the governor: %s", store.redact(str(exc)))
            rows = []
        for budget, values in _fold_budgets(rows).items():
            limit.add_metric([budget], values["limit"])
            for lane in ("interactive", "bulk"):
                in_flight.add_metric([budget, lane], values[f"in_flight_{lane}"])
                waiting.add_metric([budget, lane], values[f"waiting_{lane}"])
        yield limit
        yield in_flight
        yield waiting


def backlog_of(depth: Any) -> int:
    """Ready + delayed + in flight: what an autoscaler must see (issue 44).

    Why all three: scaling on the ready list alone (Dramatiq's ``dramatiq:QUEUE``) missed the pairs a
    capped provider sent back to wait in the delay queue — they come back on their own, to a fleet that
    may have scaled to its minimum meanwhile — and the work in flight, so a busy fleet with an empty
    ready list looked idle and was scaled down under its running pairs. With ``pairs_per_message`` 1
    (the default) a message is a pair; ``start_run`` and ``finalize_run`` are one message each per run.
    """
    return int(depth.ready) + int(depth.delayed) + int(depth.in_flight)


_BUDGET_FIGURES = ("limit", "in_flight_interactive", "in_flight_bulk", "waiting_interactive", "waiting_bulk")


def _fold_budgets(rows: list[dict[str, Any]], cap: int = MAX_MODEL_LABELS) -> dict[str, dict[str, float]]:
    """Budget name -> its gauges; beyond ``cap`` budgets, the rest summed under :data:`OTHER`.

    The governor keeps a budget per deployment it ever saw (one per ``provider:model``), so a fleet
    that ran 1,500 models has 1,500 of them. Busy ones (calls in flight or waiting) are named first.
    """
    def busy(row: dict[str, Any]) -> bool:
        return any(row.get(name, 0) for name in _BUDGET_FIGURES[1:])

    ordered = sorted(rows, key=lambda row: (not busy(row), str(row["budget"])))
    out: dict[str, dict[str, float]] = {}
    for index, row in enumerate(ordered):
        name = str(row["budget"]) if index < cap else OTHER
        into = out.setdefault(name, dict.fromkeys(_BUDGET_FIGURES, 0.0))
        for figure in _BUDGET_FIGURES:
            into[figure] += row.get(figure, 0) or 0
    return out


# -- recording --------------------------------------------------------------------------------------

_observer: PrometheusObserver | None = None
_lock = threading.Lock()


def start_recording(registry: prom.CollectorRegistry | None = None) -> PrometheusObserver:
    """Count this process's pairs and provider requests (once per process).

    ``registry`` None: multiprocess mode (the values go to ``PROMETHEUS_MULTIPROC_DIR``, which must
    be in the environment before this module is imported).
    """
    global _observer
    with _lock:
        if _observer is None:
            _observer = PrometheusObserver(registry)
            telemetry.observe(_observer)
        return _observer


def stop_recording() -> None:
    global _observer
    with _lock:
        if _observer is not None:
            telemetry.unobserve(_observer)
            _observer = None


def registry_for(settings: Settings, *, queues: tuple[str, ...] = ()) -> prom.CollectorRegistry:
    """What one scrape of a fixed worker reports: its processes' summed values and the fleet."""
    registry = prom.CollectorRegistry()
    if settings.metrics_dir:
        multiprocess.MultiProcessCollector(registry, path=settings.metrics_dir)
    registry.register(FleetCollector(settings, queues=queues))
    return registry


def fleet_registry(settings: Settings, *, broker_url: str | None = None) -> prom.CollectorRegistry:
    """The fleet's gauges only (``evaljobs view``'s ``/metrics``: it evaluates no pairs)."""
    registry = prom.CollectorRegistry()
    registry.register(FleetCollector(settings, broker_url=broker_url))
    return registry


def in_process_registry(settings: Settings, *, queues: tuple[str, ...] = (),
                        broker_url: str | None = None) -> prom.CollectorRegistry:
    """One process's own values (an elastic pool: its members are threads) and the fleet."""
    registry = prom.CollectorRegistry()
    stop_recording()  # a pool served before in this process (tests) counted into its own registry
    start_recording(registry)
    registry.register(FleetCollector(settings, queues=queues, broker_url=broker_url))
    return registry


def exposition(registry: prom.CollectorRegistry) -> tuple[bytes, str]:
    """(body, content type) of one scrape."""
    return prom.generate_latest(registry), prom.CONTENT_TYPE_LATEST


# -- serving ----------------------------------------------------------------------------------------

def make_server(host: str, port: int, registry_factory: Callable[[], prom.CollectorRegistry],
                routes: dict[str, Callable[[], tuple[int, bytes, str]]] | None = None) -> ThreadingHTTPServer:
    """An HTTP server answering ``/metrics`` (and ``routes``: path -> (status, body, type))."""
    table: dict[str, Callable[[], Answer]] = {
        "/metrics": lambda: (200, *exposition(registry_factory())), **(routes or {})}
    return route_server(host, port, table, logger=logger, name="metrics")


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="evaljobs-metrics", daemon=True)
    thread.start()
    return thread


def serve() -> int:
    """Dramatiq fork process of ``evaljobs worker --metrics-port``: serve the workers' summed metrics.

    Runs until Dramatiq's main process stops it (SIGTERM). Everything comes from the settings
    (``EVALJOBS_METRICS_PORT``, ``EVALJOBS_METRICS_HOST``, ``PROMETHEUS_MULTIPROC_DIR``, the broker and
    database URLs).
    """
    settings = config.settings()
    if settings.metrics_port is None or not settings.metrics_dir:
        logger.error("metrics: EVALJOBS_METRICS_PORT and PROMETHEUS_MULTIPROC_DIR must both be set")
        return 2
    store.connect(settings=settings)
    registry = registry_for(settings)
    server = make_server(settings.metrics_host, settings.metrics_port, lambda: registry)
    logger.info("metrics: serving http://%s:%d/metrics", settings.metrics_host, settings.metrics_port)
    return serve_until_stopped(server)


__all__ = ["MAX_MODEL_LABELS", "OTHER", "FleetCollector", "LabelFold", "PrometheusObserver", "backlog_of",
           "exposition",
           "fleet_registry", "in_process_registry",
           "make_server", "registry_for", "serve", "serve_in_thread", "start_recording", "stop_recording"]
