"""Starting workers the way ``evaljobs worker`` and ``evaljobs pool`` do: checked first, then served.

Every argument is checked before anything is contacted or forked, each problem one line (a
:class:`~evaljobs.errors.UsageError`): the options a pool would ignore, the broker, the lane, the
sizes the machine can start, the ports, the host middleware. Then a fixed worker becomes
``dramatiq evaljobs.workers.boot`` (``exec``, so a supervisor's signals reach it) with its
settings in the child's environment (:func:`evaljobs.config.child_environment`), and an elastic
pool is served in this process (:func:`evaljobs.workers.serve.run_pool`) until it is stopped.
"""
from __future__ import annotations

import builtins
import os
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Sequence

from evaljobs import config, extras, pipeline
from evaljobs.capacity import check_workers
from evaljobs.config import AMQP_SCHEMES, SHARED_BROKER_SCHEMES, child_environment, state_redis
from evaljobs.errors import OptionError, cannot_listen
from evaljobs.pipeline.host_middleware import MiddlewareError, load, references
from evaljobs.workers.serve import check_pool_arguments, configure_logging, run_pool

#: A fixed worker's threads and processes when they are not given.
DEFAULT_THREADS = 8
DEFAULT_PROCESSES = 1
#: An elastic pool's most members when only --min is given (or neither).
DEFAULT_POOL_MAX = 8


@dataclass(frozen=True)
class Serving:
    """What the process serves: metrics, probes and log lines (``--metrics-port`` … ``--log-format``)."""

    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    health_port: int | None = None
    log_format: str = "text"


def ping_redis(url: str) -> None:
    """Fail now, in one line, when the Redis at ``url`` does not answer (rather than retrying forever).

    Raises redis' own ``ConnectionError``: the CLI reports it as a server it cannot reach.
    """
    import redis  # only the commands that talk to Redis load the client

    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        client.ping()
    finally:
        client.close()


def ping_broker(url: str) -> None:
    """:func:`ping_redis` for a Redis broker; for RabbitMQ, the server and the state Redis beside it
    (``EVALJOBS_REDIS_URL``: without one, the settings refused to build already)."""
    if not url.startswith(AMQP_SCHEMES):
        ping_redis(url)
        return
    state = state_redis(url)
    if state is None:  # fail closed (a --broker amqp://… flag, no EVALJOBS_REDIS_URL), before connecting
        raise OptionError("an amqp:// broker carries only the messages: set EVALJOBS_REDIS_URL="
                          "redis://host:port/db for the governor's budgets and the run events", "--broker")
    extras.require("rabbitmq")
    pipeline.rabbitmq.ping(url)  # only an amqp:// worker loads pika
    ping_redis(state)


def serve_pool(*, min: int, max: int, idle_seconds: float, lane: str, broker: str | None,
               db: str | None = None, queues: Sequence[str] = (), providers: str | None = None,
               recover_every: float = 0.0, serving: Serving = Serving()) -> dict[str, Any]:
    """Check the arguments, then serve an elastic pool with its logs until SIGTERM/SIGINT.

    Returns the pool's final state (:meth:`evaljobs.workers.pool.Pool.state`).
    """
    check_pool_arguments(min, max, idle_seconds, lane, broker, recover_every)
    if serving.metrics_port:
        extras.require("metrics")
        _check_port(serving.metrics_host, serving.metrics_port, "--metrics-port")
    if serving.health_port:
        _check_port(serving.metrics_host, serving.health_port, "--health-port")
    configure_logging(serving.log_format)
    return run_pool(min=min, max=max, idle_seconds=idle_seconds, lane=lane, broker=broker or "", db=db,
                    queues=queues, providers=providers, recover_every=recover_every,
                    metrics_port=serving.metrics_port, metrics_host=serving.metrics_host,
                    health_port=serving.health_port, log_format=serving.log_format)


def work(*, broker: str, threads: int | None = None, processes: int | None = None,
         min: int | None = None, max: int | None = None, idle_seconds: float = 30.0, lane: str = "bulk",
         queues: Sequence[str] = (), recover_every: float = 0.0, db: str | None = None,
         providers: str | None = None, middleware: Sequence[str] = (), verbose: bool = False,
         serving: Serving = Serving()) -> dict[str, Any]:
    """Serve Dramatiq workers with evaljobs' broker and middleware until they are stopped.

    With ``min`` or ``max`` an elastic pool is served in this process and its final state returned;
    otherwise this process becomes ``threads`` × ``processes`` Dramatiq workers and never returns.
    ``threads`` and ``processes`` are None when not asked for: a pool sizes itself, and is refused
    rather than silently ignoring them.
    """
    elastic = min is not None or max is not None
    if elastic:
        for name, value in (("threads", threads), ("processes", processes)):
            if value is not None:
                raise OptionError(f"--{name} does not apply to an elastic pool (--min/--max): its members "
                                  f"are its threads, from --min to --max; drop --{name}, or drop "
                                  f"--min/--max for a fixed worker")
    if not broker.startswith(SHARED_BROKER_SCHEMES):
        raise OptionError("workers need a shared broker: --broker redis://host:port/db or "
                          "amqp://host:port/vhost", "--broker")
    if lane not in ("interactive", "bulk"):
        raise OptionError(f"'{lane}' is not a lane: use interactive or bulk", "--lane")
    # One line now, not a traceback from every worker process (nan passes click's FloatRange).
    config.check_number("--recover-every", recover_every, 0, config.MAX_SECONDS)
    low = min if min is not None else 1
    high = max if max is not None else builtins.max(low, DEFAULT_POOL_MAX)
    threads = threads if threads is not None else DEFAULT_THREADS
    processes = processes if processes is not None else DEFAULT_PROCESSES
    if elastic:
        check_pool_arguments(low, high, idle_seconds, lane, broker, recover_every)
    else:
        check_workers(threads, processes)
    ping_broker(broker)  # one line now, rather than Dramatiq retrying the connection forever
    # a bad setting (a short EVALJOBS_CONTEXT_KEY): one line here, not a traceback per process
    config.settings()
    middleware_refs = host_middleware(middleware)
    if elastic:
        return serve_pool(min=low, max=high, idle_seconds=idle_seconds, lane=lane, broker=broker, db=db,
                          queues=queues, providers=providers, recover_every=recover_every, serving=serving)
    exec_worker(broker=broker, threads=threads, processes=processes, lane=lane, queues=queues,
                recover_every=recover_every, db=db, providers=providers, middleware=middleware_refs,
                verbose=verbose, serving=serving)


def exec_worker(*, broker: str, threads: int, processes: int, lane: str, queues: Sequence[str],
                recover_every: float, db: str | None, providers: str | None, middleware: str | None,
                verbose: bool, serving: Serving) -> NoReturn:
    """Replace this process with Dramatiq's CLI over :mod:`evaljobs.workers.boot`, its settings in the
    children's environment (the only way to hand them to processes Dramatiq forks)."""
    extra = {"EVALJOBS_BROKER_URL": broker, "EVALJOBS_LANE": lane, **_ops_settings(serving, processes)}
    if recover_every:
        extra["EVALJOBS_RECOVER_EVERY"] = str(recover_every)
    if db:
        extra["EVALJOBS_DATABASE_URL"] = db
    if providers:
        extra["EVALJOBS_PROVIDERS"] = str(Path(providers).resolve())
    if middleware:
        extra["EVALJOBS_MIDDLEWARE"] = middleware
    if verbose:
        extra["EVALJOBS_VERBOSE"] = "1"
    env = child_environment(extra)
    # Dramatiq's idle consumer polls up to worker_timeout apart (default 1 s): that delays start_run,
    # finalize_run and every delayed re-send (governor Busy, Retry-After) by up to a second.
    env.setdefault("dramatiq_worker_timeout", "100")
    # JSON logs: Dramatiq's CLI behind a shim that formats its main process's lines as JSON too.
    runner = ["evaljobs.workers.logs", "--skip-logging"] if serving.log_format == "json" else ["dramatiq"]
    args = [sys.executable, "-m", runner[0], "evaljobs.workers.boot", *runner[1:],
            "--processes", str(processes), "--threads", str(threads)]
    for queue in queues:
        args += ["--queues", queue]
    if serving.metrics_port:  # a Dramatiq fork process sums the worker processes' values and serves them
        args += ["--fork-function", "evaljobs.workers.metrics:serve"]
    if serving.health_port:
        args += ["--fork-function", "evaljobs.workers.health:serve"]
    if verbose:
        args.append("--verbose")
    os.execve(sys.executable, args, env)


def _ops_settings(serving: Serving, processes: int) -> dict[str, str]:
    """The worker processes' variables for metrics, probes and logs; checks the ports are free now."""
    out = {"EVALJOBS_LOG_FORMAT": serving.log_format, "EVALJOBS_METRICS_HOST": serving.metrics_host}
    if serving.metrics_port:
        extras.require("metrics")
        _check_port(serving.metrics_host, serving.metrics_port, "--metrics-port")
        # prometheus_client's multiprocess mode: every worker process writes its values here and
        # the exposition process sums them (a restarted worker must not add the previous one's counts).
        out.update({"EVALJOBS_METRICS_PORT": str(serving.metrics_port),
                    "PROMETHEUS_MULTIPROC_DIR": _fresh_folder(f"evaljobs-metrics-{serving.metrics_port}")})
    if serving.health_port:
        _check_port(serving.metrics_host, serving.health_port, "--health-port")
        # Each worker process writes its consumers' status here; the probe server reads them.
        out.update({"EVALJOBS_HEALTH_PORT": str(serving.health_port),
                    "EVALJOBS_HEALTH_PROCESSES": str(processes),
                    "EVALJOBS_HEALTH_DIR": _fresh_folder(f"evaljobs-health-{serving.health_port}")})
    return out


def _fresh_folder(name: str) -> str:
    """An empty folder under the temp directory, one per port (a restarted worker starts clean)."""
    folder = Path(tempfile.gettempdir()) / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return str(folder)


def _check_port(host: str, port: int, option: str) -> None:
    """One line now if the port is taken, rather than a traceback in a fork process later."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise cannot_listen(host, port, exc, option) from None


def host_middleware(given: Sequence[str]) -> str | None:
    """``--middleware`` references and the configured ones, each loaded once now (a bad one is one line
    here, not in every process); they become this process's settings (an in-process pool uses them)."""
    refs = references(config.settings().middleware) + [r.strip() for r in given if r.strip()]
    for reference in refs:
        try:
            load(reference)
        except MiddlewareError as exc:
            raise OptionError(str(exc), "--middleware") from None
    joined = ",".join(refs) or None
    config.configure(config.settings(), middleware=joined)  # the in-process pool's brokers use them too
    return joined


__all__ = ["Serving", "work", "serve_pool", "exec_worker", "host_middleware", "ping_redis",
           "DEFAULT_THREADS", "DEFAULT_PROCESSES", "DEFAULT_POOL_MAX"]
