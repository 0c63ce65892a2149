"""Operating runs: ``evaljobs watch``, ``status``, ``cancel``, ``rerun``, ``recover`` and ``cache clear``.

Thin shells over :class:`evaljobs.api.Session` (and the status collector);
errors map to exit codes in :mod:`evaljobs.cli._options`: 2 for anything the
user can fix (one line on stderr), 1 for a failed ``--fail-under`` gate. The
API is imported inside the commands (start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import json

import click

from evaljobs.cli._options import (broker_option, conclude, db_option, echo, fail_under_option, finish,
                                   json_option, providers_option, width_option)


# -- watch ------------------------------------------------------------------------------------


@click.command("watch")
@click.argument("run_id")
@fail_under_option
@click.option("--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Stop following after SECONDS.")
@click.option("--poll", type=click.FloatRange(min=0.05), default=5.0, show_default=True, hidden=True,
              help="Seconds between database reads (the fallback for missed events).")
@json_option
@db_option
@broker_option
def watch(run_id, gate, timeout, poll, as_json, db, broker) -> None:
    """Follow RUN_ID to its report: a live bar on a terminal, a line per result otherwise, then the table.

    Woken by the run's events (Redis pub/sub with --broker redis://…); the
    database is read every few seconds as well, which also catches events
    missed while disconnected. A run that is already finished just prints.
    It says so when no worker takes the run's messages, and when events do
    not reach it (``--broker memory`` watching workers elsewhere).
    """
    from evaljobs.api import Session  # start-up time (see the module docstring)

    with Session(db=db, broker=broker, create=False) as session:
        info = session.watch(run_id, timeout=timeout, poll=poll, progress=True)
    finish(info, gate, as_json=as_json)


# -- status -----------------------------------------------------------------------------------


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("-Q", "--queue", "queues", multiple=True, help="Also show this queue (repeatable).")
@click.option("--window", type=click.FloatRange(min=0), default=None,
              help="Seconds a worker counts as seen (default: the broker's heartbeat timeout, 10).")
@db_option
@broker_option
def status(as_json, queues, window, db, broker) -> None:
    """Active runs with progress, queue depths, workers seen recently, governor budgets and pools."""
    from evaljobs.api import Session  # start-up time (see the module docstring)

    with Session(db=db, broker=broker) as session:
        info = session.status(queues=queues, window=window)
    if as_json:
        click.echo(json.dumps(info.to_dict(), indent=2))
    else:
        echo(info.render(), nl=False)
    # what it could read is shown above; a monitoring script must still see an outage
    conclude(info.verdict())


# -- cancel -----------------------------------------------------------------------------------


@click.command("cancel")
@click.argument("run_id")
@db_option
@providers_option
def cancel(run_id, db, providers) -> None:
    """Cancel RUN_ID (its pending pairs are not evaluated) and its open provider batches."""
    from evaljobs.api import Session  # start-up time (see the module docstring)

    with Session(db=db, providers=providers) as session:
        done = session.cancel(run_id)
    plural = "es" if done.batches != 1 else ""
    note = f"; {done.batches} provider batch{plural} asked to cancel" if done.batches else ""
    click.echo(f"run {done.run.id}: {done.run.status}{note}")


# -- rerun ------------------------------------------------------------------------------------


@click.command("rerun")
@click.argument("run_id")
@click.option("--errored", is_flag=True, help="Rerun the pairs whose result is errored.")
@click.option("--failed", is_flag=True, help="Rerun the pairs whose result is failed.")
@click.option("--all", "every", is_flag=True, help="Rerun every pair of the run.")
@click.option("--reuse", metavar="RUN", default=None,
              help="Copy the pairs unchanged since RUN (an id or 'latest') instead of evaluating them.")
@click.option("--batch/--no-batch", default=None,
              help="Through the providers' batch APIs, or one call at a time (default: as RUN_ID was run).")
@width_option
@click.option("--wait/--no-wait", default=None,
              help="Follow the new run to its report (default: yes, except queued strategies on Redis).")
@fail_under_option
@json_option
@db_option
@broker_option
@providers_option
def rerun(run_id, errored, failed, every, reuse, batch, width, wait, gate, as_json, db, broker,
          providers) -> None:
    """Create a NEW run over RUN_ID's errored, failed or all pairs, with its catalog, context and options.

    The models' providers are checked first (``--providers`` like ``run``); exits 1 when every
    pair of the new run errored, like ``run`` (``RunInfo.gate`` decides).
    """
    from evaljobs.api import Session, rerun_selection  # start-up time (see the module docstring)

    # checked before the database is opened: a mistyped command creates nothing
    select = rerun_selection([name for name, on in (("errored", errored), ("failed", failed), ("all", every))
                              if on])
    with Session(db=db, broker=broker, width=width, providers=providers) as session:
        info = session.rerun(run_id, select, reuse=reuse, batch=batch, wait=wait, progress=True,
                             on_note=_stderr)
    finish(info, gate, as_json=as_json)


def _stderr(line: str) -> None:
    click.echo(line, err=True)


# -- recover ----------------------------------------------------------------------------------


@click.command()
@click.argument("run_id", required=False)
@click.option("--width", type=click.IntRange(min=1), default=8, show_default=True,
              help="Worker threads that evaluate the recovered pairs with --broker memory.")
@click.option("--wait/--no-wait", default=None,
              help="Follow the recovered runs to their reports (default: yes with --broker memory).")
@json_option
@db_option
@broker_option
@providers_option
def recover(run_id, width, wait, as_json, db, broker, providers) -> None:
    """Re-enqueue lost pairs of running runs and finalize complete-but-unreported ones.

    With --broker memory nobody else would evaluate what is re-enqueued: the
    pairs are evaluated here (with --providers, as `run`), and the command
    returns once the runs have reports. Each action is printed as it is taken.
    """
    from evaljobs.api import Session  # start-up time (see the module docstring)

    def checking(count: int) -> None:
        click.echo(f"recover: checking {count} run{'s' if count != 1 else ''}", err=True)

    with Session(db=db, broker=broker, width=width, providers=providers) as session:
        done = session.recover(run_id, wait=wait, on_runs=checking, on_action=None if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(done.to_dict()))
        return
    if not done.actions:
        click.echo("nothing to recover")
    for info in done.runs:
        if info.report is not None:
            click.echo(f"{info.id}: {info.status}, {info.persisted}/{info.expected} pairs, report ready")


# -- cache ------------------------------------------------------------------------------------


@click.group("cache")
def cache() -> None:
    """The response cache shared by all workers (runs started with --cache)."""


@cache.command("clear")
@click.option("--older-than", "older_than", default=None, metavar="AGE",
              help="Only entries written more than AGE ago (seconds, or 30m, 12h, 7d…).")
@json_option
@db_option
def cache_clear(older_than, as_json, db) -> None:
    """Delete cached provider answers (all of them, or those older than --older-than)."""
    from evaljobs.api import Session  # start-up time (see the module docstring)

    with Session(db=db) as session:
        removed = session.clear_cache(older_than)
    if as_json:
        click.echo(json.dumps({"removed": removed, "older_than": older_than}))
        return
    scope = f" older than {older_than}" if older_than is not None else ""
    click.echo(f"removed {removed} cached answer{'s' if removed != 1 else ''}{scope}")


__all__ = ["cache", "cancel", "recover", "rerun", "status", "watch"]
