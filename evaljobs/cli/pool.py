"""``evaljobs pool``: an elastic worker pool (``--min --max --idle-seconds --lane``) in one process.

A thin shell over :func:`evaljobs.api.serve_pool` (imported inside the
command: start-up time of ``evaljobs --help``). Supervisors run it as ``evaljobs pool`` or
``python -m evaljobs pool``.
"""
from __future__ import annotations

import click

from evaljobs.cli._options import (
    health_port_option,
    log_format_option,
    metrics_host_option,
    metrics_port_option,
    worker_allowance_options,
)


@click.command("pool", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--min", "min_", type=int, default=1, show_default=True,
              help="Fewest members (worker threads).")
@click.option("--max", "max_", type=int, default=16, show_default=True, help="Most members.")
@click.option("--idle-seconds", type=float, default=30.0, show_default=True,
              help="Retire a member idle this long (never below --min).")
@click.option("--lane", envvar="EVALJOBS_LANE", default="bulk", show_default=True,
              help="Governor lane of the members' provider calls: interactive or bulk.")
@click.option("-Q", "--queues", multiple=True, help="Queues to serve (default: agents).")
@click.option("--recover-every", type=float, default=0.0, show_default=True,
              help="Also check every N seconds for runs whose messages were lost (0: off).")
@click.option("--db", envvar="EVALJOBS_DATABASE_URL", default=None,
              help="Database URL: sqlite:///path.db or postgresql://…")
@click.option("--broker", envvar="EVALJOBS_BROKER_URL", default=None, help="redis://host:port/db")
@click.option("--providers", envvar="EVALJOBS_PROVIDERS", default=None, type=click.Path(dir_okay=False),
              help="Providers config (YAML).")
@metrics_port_option
@metrics_host_option
@health_port_option
@log_format_option
@worker_allowance_options
def pool_worker(min_, max_, idle_seconds, lane, queues, recover_every, db, broker, providers, metrics_port,
                metrics_host, health_port, log_format) -> None:
    """Run an elastic worker pool: between --min and --max members, following the queue's backlog."""
    from evaljobs import api  # start-up time (see the module docstring)

    api.serve_pool(min=min_, max=max_, idle_seconds=idle_seconds, lane=lane, broker=broker, db=db,
                       queues=queues, providers=providers, recover_every=recover_every,
                       metrics_port=metrics_port, metrics_host=metrics_host, health_port=health_port,
                       log_format=log_format)
