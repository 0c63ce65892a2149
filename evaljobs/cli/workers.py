"""``evaljobs worker``: Dramatiq workers with evaljobs' broker and middleware, or an elastic pool.

Options → :func:`evaljobs.api.work` (which checks everything, then execs Dramatiq or
serves a pool in this process) — imported inside the command (start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import click

from evaljobs.cli._options import (db_option, health_port_option, log_format_option, metrics_host_option,
                                   metrics_port_option, providers_option, worker_allowance_options)


@click.command()
@click.option("--threads", type=click.IntRange(min=1), default=8, show_default=True,
              help="Threads per process.")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("-Q", "--queues", multiple=True, help="Queues to consume (default: agents).")
@click.option("--recover-every", type=click.FloatRange(min=0), default=0, show_default=True,
              help="Also check every N seconds for runs whose messages were lost (0: off).")
@click.option("--min", "min_", type=int, default=None, help="Elastic pool: fewest members (with --max).")
@click.option("--max", "max_", type=int, default=None,
              help="Elastic pool: most members (default: 8, or --min).")
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
@worker_allowance_options
def worker(threads, processes, queues, recover_every, min_, max_, idle_seconds, lane, verbose, db, broker,
           middleware, providers, metrics_port, metrics_host, health_port, log_format) -> None:
    """Run Dramatiq workers with evaljobs' broker and middleware (Ctrl-C / SIGTERM stops gracefully).

    With --min/--max the worker is an elastic pool that follows the queue's backlog.
    """
    from evaljobs import api  # start-up time (see the module docstring)

    given = click.get_current_context().get_parameter_source
    explicit = {name: value if given(name) is not click.core.ParameterSource.DEFAULT else None
                for name, value in (("threads", threads), ("processes", processes))}
    api.work(broker=broker, threads=explicit["threads"], processes=explicit["processes"], min=min_,
                 max=max_, idle_seconds=idle_seconds, lane=lane, queues=queues, recover_every=recover_every,
                 db=db, providers=providers, middleware=middleware, verbose=verbose,
                 metrics_port=metrics_port, metrics_host=metrics_host, health_port=health_port,
                 log_format=log_format)


__all__ = ["worker"]
