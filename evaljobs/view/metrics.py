"""``/metrics`` of ``evaljobs view``: the fleet's gauges (queues, active runs, governor) for Prometheus.

The viewer evaluates no pairs, so it serves what is read at scrape time
(:class:`evaljobs.workers.metrics.FleetCollector`), not the workers' counters. It sits behind the
viewer's guard like every page: on loopback without a token, elsewhere with the viewer's token
(Prometheus' ``authorization: {credentials: TOKEN}`` sends it as a bearer token).
``prometheus_client`` (the ``metrics`` extra) is imported on the first scrape, never at start.
"""
from __future__ import annotations

import threading
from typing import Any

from evaljobs import config, extras, workers
from evaljobs.view.config import ViewConfig


class MetricsPage:
    def __init__(self, view: ViewConfig) -> None:
        self.view = view
        self._registry: Any = None
        self._lock = threading.Lock()

    def serve(self, request: Any) -> Any:  # a sync endpoint: Starlette runs it in its thread pool
        from starlette.responses import PlainTextResponse, Response

        if not extras.installed("metrics"):
            return PlainTextResponse("/metrics needs the 'metrics' extra: pip install 'evaljobs[metrics]'\n",
                                     status_code=404)
        metrics = workers.metrics  # the optional 'metrics' extra (checked just above)
        with self._lock:
            if self._registry is None:
                self._registry = metrics.fleet_registry(config.settings(), broker_url=self.view.redis_url)
        body, kind = metrics.exposition(self._registry)
        return Response(body, media_type=kind)


__all__ = ["MetricsPage"]
