"""``evaljobs worker``: Dramatiq workers with evaljobs' broker and middleware, or an elastic pool.

A fixed worker becomes ``dramatiq evaljobs.workers.boot`` (``exec``, so
supervisord's signals reach it) with its settings passed in the child's
environment (:func:`evaljobs.config.child_environment`); ``--min/--max`` serve
an elastic pool in this process (:func:`evaljobs.workers.serve.run_pool`),
imported inside the command (start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import click

from evaljobs.cli._options import (db_option, health_port_option, log_format_option, metrics_host_option,
                                   metrics_port_option, ping_redis, providers_option)
from evaljobs import config
from evaljobs.capacity import check_workers
from evaljobs.config import REDIS_SCHEMES, child_environment


@click.command()
@click.option("--threads", type=click.IntRange(min=1), default=8, show_default=True, help="Threads per process.")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("-Q", "--queues", multiple=True, help="Queues to consume (default: agents).")
@click.option("--recover-every", type=click.FloatRange(min=0), default=0, show_default=True,
              help="Also check every N seconds for runs whose messages were lost (0: off).")
@click.option("--min", "min_", type=int, default=None, help="Elastic pool: fewest members (with --max).")
@click.option("--max", "max_", type=int, default=None, help="Elastic pool: most members (default: 8, or --min).")
@click.option("--idle-seconds", type=float, default=30.0, show_default=True,
              help="Elastic pool: retire members idle this long.")
@click.option("--lane", envvar="EVALJOBS_LANE", default="bulk", show_default=True,
              help="Governor lane for this worker's provider calls: interactive or bulk.")
@click.option("-v", "--verbose", is_flag=True,
              help="Debug logs: Dramatiq's, the database's, and a line for every provider call.")
@db_option
@click.option("--broker", envvar="EVALJOBS_BROKER_URL", required=True, help="redis://host:port/db")
@click.option("--middleware", "middleware", multiple=True, metavar="MODULE:CLASS",
              help="A host Dramatiq middleware to add after evaljobs' own (repeatable; entry-point group "
                   "evaljobs.middleware adds them too).")
@providers_option
@metrics_port_option
@metrics_host_option
@health_port_option
@log_format_option
def worker(threads, processes, queues, recover_every, min_, max_, idle_seconds, lane, verbose, db, broker,
           middleware, providers, metrics_port, metrics_host, health_port, log_format) -> None:
    """Run Dramatiq workers with evaljobs' broker and middleware (Ctrl-C / SIGTERM stops gracefully).

    With --min/--max the worker is an elastic pool that follows the queue's backlog.
    """
    if min_ is not None or max_ is not None:
        ctx = click.get_current_context()
        for name in ("threads", "processes"):  # an elastic pool sizes itself: never ignore what was asked
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
                raise click.UsageError(
                    f"--{name} does not apply to an elastic pool (--min/--max): its members "
                    f"are its threads, from --min to --max; drop --{name}, or drop "
                    f"--min/--max for a fixed worker"
                )
    if not broker.startswith(REDIS_SCHEMES):
        raise click.BadParameter("workers need a shared broker: --broker redis://host:port/db", param_hint="--broker")
    if lane not in ("interactive", "bulk"):
        raise click.BadParameter(f"'{lane}' is not a lane: use interactive or bulk", param_hint="--lane")
    # One line now, not a traceback from every worker process (nan passes click's FloatRange).
    config.check_number("--recover-every", recover_every, 0, config.MAX_SECONDS)
    if min_ is None and max_ is None:
        check_workers(threads, processes)
    else:
        from evaljobs.workers.serve import check_pool_arguments  # start-up time (module docstring)

        check_pool_arguments(min_ if min_ is not None else 1, max_ if max_ is not None else max(min_ or 1, 8),
                             idle_seconds, lane, broker, recover_every)
    ping_redis(broker)  # one line now, rather than Dramatiq retrying the connection forever
    config.settings()  # a bad setting (a short EVALJOBS_CONTEXT_KEY) is one line here, not a traceback per process
    middleware_refs = _host_middleware(middleware)
    if min_ is not None or max_ is not None:
        from evaljobs.workers.serve import configure_logging, run_pool  # start-up time (module docstring)

        low = min_ if min_ is not None else 1
        if metrics_port:
            from evaljobs import extras

            extras.require("metrics")
        configure_logging(log_format)
        run_pool(min=low, max=max_ if max_ is not None else max(low, 8), idle_seconds=idle_seconds,
                 lane=lane, broker=broker, db=db, queues=queues, providers=providers,
                 recover_every=recover_every, metrics_port=metrics_port, metrics_host=metrics_host,
                 health_port=health_port, log_format=log_format)
        return
    extra = {"EVALJOBS_BROKER_URL": broker, "EVALJOBS_LANE": lane,
             **_ops_settings(metrics_port, metrics_host, health_port, log_format, processes)}
    if recover_every:
        extra["EVALJOBS_RECOVER_EVERY"] = str(recover_every)
    if db:
        extra["EVALJOBS_DATABASE_URL"] = db
    if providers:
        extra["EVALJOBS_PROVIDERS"] = str(Path(providers).resolve())
    if middleware_refs:
        extra["EVALJOBS_MIDDLEWARE"] = middleware_refs
    if verbose:
        extra["EVALJOBS_VERBOSE"] = "1"
    env = child_environment(extra)
    # Dramatiq's idle consumer polls up to worker_timeout apart (default 1 s): that delays start_run,
    # finalize_run and every delayed re-send (governor Busy, Retry-After) by up to a second.
    env.setdefault("dramatiq_worker_timeout", "100")
    # JSON logs: Dramatiq's CLI behind a shim that formats its main process's lines as JSON too.
    runner = ["evaljobs.workers.logs", "--skip-logging"] if log_format == "json" else ["dramatiq"]
    args = [sys.executable, "-m", runner[0], "evaljobs.workers.boot", *runner[1:],
            "--processes", str(processes), "--threads", str(threads)]
    for queue in queues:
        args += ["--queues", queue]
    if metrics_port:  # a Dramatiq fork process sums the worker processes' values and serves them
        args += ["--fork-function", "evaljobs.workers.metrics:serve"]
    if health_port:
        args += ["--fork-function", "evaljobs.workers.health:serve"]
    if verbose:
        args.append("--verbose")
    os.execve(sys.executable, args, env)


def _ops_settings(metrics_port: int | None, metrics_host: str, health_port: int | None,
                  log_format: str, processes: int) -> dict[str, str]:
    """The worker processes' variables for metrics, probes and logs; checks the ports are free now."""
    out = {"EVALJOBS_LOG_FORMAT": log_format, "EVALJOBS_METRICS_HOST": metrics_host}
    if metrics_port:
        from evaljobs import extras

        extras.require("metrics")
        _check_port(metrics_host, metrics_port, "--metrics-port")
        # prometheus_client's multiprocess mode: every worker process writes its values here and
        # the exposition process sums them (a restarted worker must not add the previous one's counts).
        out.update({"EVALJOBS_METRICS_PORT": str(metrics_port),
                    "PROMETHEUS_MULTIPROC_DIR": _fresh_folder(f"evaljobs-metrics-{metrics_port}")})
    if health_port:
        _check_port(metrics_host, health_port, "--health-port")
        # Each worker process writes its consumers' status here; the probe server reads them.
        out.update({"EVALJOBS_HEALTH_PORT": str(health_port), "EVALJOBS_HEALTH_PROCESSES": str(processes),
                    "EVALJOBS_HEALTH_DIR": _fresh_folder(f"evaljobs-health-{health_port}")})
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
            raise click.BadParameter(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                                     param_hint=option) from None


def _host_middleware(given: tuple[str, ...]) -> str | None:
    """``--middleware`` references, each loaded once now (a bad one is one line here, not in every process)."""
    from evaljobs.pipeline.host_middleware import MiddlewareError, load, references  # start-up time

    refs = references(config.settings().middleware) + [r.strip() for r in given if r.strip()]
    for reference in refs:
        try:
            load(reference)
        except MiddlewareError as exc:
            raise click.BadParameter(str(exc), param_hint="--middleware") from None
    joined = ",".join(refs) or None
    config.configure(config.settings(), middleware=joined)  # the in-process pool's brokers use them too
    return joined


__all__ = ["worker"]
