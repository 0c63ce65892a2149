"""Health probes: ``/livez`` (the worker is up) and ``/readyz`` (it can do work) on ``--health-port``.

For supervisord, systemd and Kubernetes: ``/livez`` answers 200 while the worker runs (restart it
when it stops answering); ``/readyz`` answers 200 only when the broker answers PING, the database
answers a query, and the worker's consumers are running — 503 otherwise, with one line per failed
check in the JSON body (``{"ready": false, "checks": {"broker": "...", ...}}``), every URL redacted.

A fixed worker runs several Dramatiq processes: each one, once its worker has booted, writes a small
status file (its consumer threads alive, a timestamp) every second into a folder the processes
share (``EVALJOBS_HEALTH_DIR``, made per port by ``evaljobs worker``), and removes it at shutdown
(:class:`ConsumerBeacon`); the probe server is a Dramatiq fork process (:func:`serve`) that counts
the fresh files. An elastic pool answers from its own state (members alive, at least ``--min``).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dramatiq

from evaljobs import config, pipeline, store
from evaljobs.config import AMQP_SCHEMES, state_redis
from evaljobs.errors import UsageError, one_line
from evaljobs.redact import redact_text
from evaljobs.workers.routes_http import route_server, serve_until_stopped

logger = logging.getLogger("evaljobs.workers.health")
#: A process's status file older than this (seconds) counts as a process that stopped consuming.
STALE_SECONDS = 5.0
BEACON_SECONDS = 1.0

Check = Callable[[], "str | None"]  # None: fine; else the one-line reason


def broker_check(url: str) -> Check:
    state = state_redis(url) or url  # beside RabbitMQ, its state Redis; RabbitMQ itself is pinged too

    def check() -> str | None:
        import redis

        if url.startswith(AMQP_SCHEMES):
            try:
                pipeline.rabbitmq.ping(url)  # pika only beside RabbitMQ
            except UsageError as exc:
                return one_line(str(exc))
        client = redis.Redis.from_url(state, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.ping()
        except redis.RedisError as exc:
            return f"broker {redact_text(state)}: {one_line(redact_text(str(exc)) or type(exc).__name__)}"
        finally:
            client.close()
        return None

    return check


def database_check() -> str | None:
    try:
        with store.without_waiting():  # a probe answers now: not after the 60 s reconnect window
            store.count_runs(("running",))
    except Exception as exc:  # noqa: BLE001 - any driver error means "not ready", said in one line
        return f"database: {one_line(redact_text(str(exc)) or type(exc).__name__)}"
    return None


def consumers_check(folder: str, processes: int) -> Check:
    """Every one of ``processes`` Dramatiq processes has a fresh status file with its consumers alive."""
    def check() -> str | None:
        fresh = []
        now = time.time()
        for path in Path(folder).glob("*.json"):
            try:
                status = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if now - status.get("time", 0) <= STALE_SECONDS and status.get("consumers_alive") \
                    and status.get("consumers_alive") == status.get("consumers"):
                fresh.append(status)
        if len(fresh) < processes:
            return f"consumers: {len(fresh)} of {processes} worker processes consuming"
        return None

    return check


def readiness(checks: dict[str, Check]) -> tuple[int, bytes, str]:
    results = {name: check() for name, check in checks.items()}
    ready = all(result is None for result in results.values())
    body = {"ready": ready, "checks": {name: result or "ok" for name, result in results.items()}}
    return (200 if ready else 503), (json.dumps(body) + "\n").encode(), "application/json"


def make_server(host: str, port: int, checks: dict[str, Check]) -> ThreadingHTTPServer:
    """``/livez`` and ``/readyz`` on ``host:port``."""
    routes = {"/livez": lambda: (200, b"ok\n", "text/plain; charset=utf-8"),
              "/readyz": lambda: readiness(checks)}
    return route_server(host, port, routes, logger=logger, name="health")


class ConsumerBeacon(dramatiq.Middleware):
    """In each Dramatiq worker process: write this process's consumer status for the probe server."""

    def __init__(self, folder: str) -> None:
        self.path = Path(folder) / f"{os.getpid()}.json"
        self._stop = threading.Event()

    def after_worker_boot(self, broker: dramatiq.Broker, worker: Any) -> None:
        self.path = self.path.with_name(f"{os.getpid()}.json")
        threading.Thread(target=self._beat, args=(worker,), name="evaljobs-health", daemon=True).start()

    def _beat(self, worker: Any) -> None:
        while not self._stop.is_set():
            consumers = list(getattr(worker, "consumers", {}).values())
            status = {"pid": os.getpid(), "time": time.time(), "consumers": len(consumers),
                      "consumers_alive": sum(1 for c in consumers if c.is_alive()),
                      "workers_alive": sum(1 for w in getattr(worker, "workers", []) if w.is_alive())}
            temporary = self.path.with_suffix(".tmp")
            try:
                temporary.write_text(json.dumps(status))
                temporary.replace(self.path)
            except OSError as exc:
                logger.warning("health: cannot write %s: %s", self.path, exc)
            self._stop.wait(BEACON_SECONDS)

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        self._stop.set()
        try:
            self.path.unlink()
        except OSError:
            pass


def serve() -> int:
    """Dramatiq fork process of ``evaljobs worker --health-port``: answer the probes until stopped."""
    settings = config.settings()
    if settings.health_port is None or not settings.health_dir or not settings.broker_url:
        logger.error("health: EVALJOBS_HEALTH_PORT, EVALJOBS_HEALTH_DIR and EVALJOBS_BROKER_URL must be set")
        return 2
    store.connect(settings=settings)
    checks = {"broker": broker_check(settings.broker_url), "database": database_check,
              "consumers": consumers_check(settings.health_dir, settings.health_processes)}
    server = make_server(settings.metrics_host, settings.health_port, checks)
    logger.info("health: serving http://%s:%d/livez and /readyz", settings.metrics_host, settings.health_port)
    return serve_until_stopped(server)


__all__ = ["ConsumerBeacon", "broker_check", "consumers_check", "database_check", "make_server", "readiness",
           "serve"]
