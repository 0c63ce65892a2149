"""Serving an elastic pool in this process: bind the database and broker, run the pool until stopped.

``evaljobs pool``, ``evaljobs worker --min/--max`` and :meth:`evaljobs.api.Session.pool`
all come here. The pool's lane and providers file are this process's
settings for as long as it serves (:func:`evaljobs.config.configure`), and are
put back afterwards — never written to ``os.environ``.
"""
from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from evaljobs import config, extras, pipeline, store
from evaljobs.capacity import check_width
from evaljobs.config import AMQP_SCHEMES, SHARED_BROKER_SCHEMES
from evaljobs.errors import UsageError, one_line
from evaljobs.redact import redact
from evaljobs.pipeline.broker import configure as bind_broker
from evaljobs.pipeline.recovery import PeriodicRecovery
from evaljobs.workers import health, logs, on_demand
from evaljobs.workers.pool import Pool, validate

logger = logging.getLogger("evaljobs.workers.serve")


def check_pool_arguments(min: int, max: int, idle_seconds: float, lane: str, broker: str | None,
                         recover_every: float = 0.0) -> None:
    """Raise :class:`UsageError` (one line) for arguments a pool cannot run with, before connecting."""
    try:
        validate(min, max, idle_seconds, lane)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    config.check_number("--recover-every", recover_every, 0, config.MAX_SECONDS)  # nan passes `< 0`
    check_width(max, "--max")  # a member is a thread: --min/--max 100000 started ~2,000 and hung
    if not broker:
        raise UsageError(
            "a pool needs a shared broker: --broker redis://host:port/db (or EVALJOBS_BROKER_URL)"
        )
    if not broker.startswith(SHARED_BROKER_SCHEMES):
        raise UsageError(f"a pool needs a shared broker: --broker redis://host:port/db or amqp://…, "
                         f"not {redact(broker)!r}")


def run_pool(*, min: int, max: int, idle_seconds: float, lane: str, broker: str, db: str | None = None,
             queues: Sequence[str] = (), providers: str | None = None, recover_every: float = 0.0,
             poll: float = 0.05, stop: threading.Event | None = None, metrics_port: int | None = None,
             metrics_host: str | None = None, health_port: int | None = None,
             log_format: str | None = None) -> dict:
    """Bind the database and broker, run a :class:`~evaljobs.workers.pool.Pool` until ``stop`` (or
    SIGTERM/SIGINT).

    Returns the pool's final :meth:`~evaljobs.workers.pool.Pool.state`. Raises
    :class:`~evaljobs.errors.UsageError` (one line) for bad arguments before
    connecting to anything, and when the broker does not answer.
    """
    check_pool_arguments(min, max, idle_seconds, lane, broker, recover_every)
    previous = config.configured()
    config.configure(previous, lane=lane, metrics_port=metrics_port, metrics_host=metrics_host,
                     health_port=health_port, log_format=log_format,
                     providers_path=str(Path(providers).resolve()) if providers else None)
    try:
        store.connect(db)
        binding = bind_broker(broker)
        if broker.startswith(AMQP_SCHEMES):
            try:
                pipeline.rabbitmq.ping(broker)  # one line (UsageError) when RabbitMQ does not answer
            except UsageError:
                binding.broker.close()
                raise
        try:
            # a Redis broker's own client, or the state Redis beside a RabbitMQ broker
            binding.broker.client.ping()  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - connection errors: say which URL, in one line
            binding.broker.close()
            raise UsageError(f"cannot reach the broker at {redact(broker)}: {one_line(exc)}") from None
        return _serve(binding, min, max, idle_seconds, lane, queues, recover_every, poll,
                      stop or threading.Event())
    finally:
        config.restore(previous)


def _serve(binding, min: int, max: int, idle_seconds: float, lane: str, queues: Sequence[str],
           recover_every: float, poll: float, stop: threading.Event) -> dict:
    if config.settings().otlp_endpoint:
        extras.require("otel")  # the optional 'otel' extra, which on_demand.tracing loads
        binding.broker.add_middleware(on_demand.tracing.start(config.settings()))
    if config.settings().log_format == "json":
        # each line names the run and pair of its message
        binding.broker.add_middleware(logs.LogContext())
    pool = Pool(min, max, idle_seconds, lane, broker=binding.broker, queues=tuple(queues) or (binding.queue,),
                poll=poll)
    exposition = probes = recovery = None
    restore_signals = _on_signals(stop)
    try:
        # the ports first: one taken is one line (OptionError) before any member or recovery starts
        exposition = _serve_metrics(tuple(queues), binding.url)
        probes = _serve_health(pool, binding.url)
        binding.broker.emit_after("process_boot")  # starts TimeLimit's watchdog, as Dramatiq's CLI does
        recovery = PeriodicRecovery(binding, recover_every).start() if recover_every else None
        pool.start()
        logger.info("pool %s: %d..%d members on %s, lane %s, idle %gs", pool.id, min, max,
                    ", ".join(pool.queues), lane, idle_seconds)
        while not stop.wait(0.5):
            pass
    finally:
        pool.stop()
        if probes is not None:
            probes.shutdown()
            probes.server_close()
        if exposition is not None:
            exposition.shutdown()
            exposition.server_close()
            on_demand.metrics.stop_recording()
        if recovery is not None:
            recovery.stop()
        restore_signals()
        binding.broker.close()
    return pool.state()


def _serve_metrics(queues: tuple[str, ...], broker_url: str) -> Any:
    """The pool's ``/metrics`` server (a thread of this process), when a metrics port is set."""
    settings = config.settings()
    if settings.metrics_port is None:
        return None
    metrics = on_demand.metrics  # the metrics extra (prometheus_client), loaded only when asked for
    registry = metrics.in_process_registry(settings, queues=queues, broker_url=broker_url)
    try:
        server = metrics.make_server(settings.metrics_host, settings.metrics_port, lambda: registry)
    except UsageError:  # taken since the check: one line, and this process counts for no one
        metrics.stop_recording()
        raise
    metrics.serve_in_thread(server)
    logger.info("metrics: serving http://%s:%d/metrics", settings.metrics_host, server.server_address[1])
    return server


def _serve_health(pool: Pool, broker_url: str) -> Any:
    """The pool's ``/livez`` and ``/readyz`` (a thread of this process), when a health port is set."""
    settings = config.settings()
    if settings.health_port is None:
        return None
    def members() -> str | None:
        state = pool.state()
        return None if state["members"] >= state["min"] else \
            f"consumers: {state['members']} of at least {state['min']} pool members running"

    server = health.make_server(settings.metrics_host, settings.health_port,
                                {"broker": health.broker_check(broker_url), "database": health.database_check,
                                 "consumers": members})
    threading.Thread(target=server.serve_forever, name="evaljobs-health", daemon=True).start()
    logger.info("health: serving http://%s:%d/livez and /readyz", settings.metrics_host,
                server.server_address[1])
    return server


def configure_logging(log_format: str = "text") -> None:
    """Dramatiq-style log lines on stderr (or JSON), without one per member start/stop or provider call."""
    if log_format == "json":
        logs.use_json_logs(level=logging.INFO)
    else:
        logging.basicConfig(
            level=logging.INFO,
            format="[%(asctime)s] [PID %(process)d] [%(threadName)s] [%(name)s] [%(levelname)s] %(message)s",
        )
    logging.getLogger("dramatiq.worker.Worker").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _on_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM/SIGINT stop the pool gracefully (only possible from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


__all__ = ["run_pool", "check_pool_arguments", "configure_logging"]
