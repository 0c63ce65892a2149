"""Operating runs: ``evaljobs watch``, ``status``, ``rerun`` and ``cache clear``.

The lead registers them on the main group::

    from .commands.ops import cache, rerun, status, watch
    for command in (watch, status, rerun, cache):
        main.add_command(command)

Exit codes follow the rest of the CLI: 2 for anything the user can fix (one
line on stderr), 1 for a failed ``--fail-under`` gate.
"""
from __future__ import annotations

import json
import sys

import click

from evaljobs import store

EXIT_GATE = 1
EXIT_USAGE = 2
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class OpsError(click.ClickException):
    """A one-line error a user can fix; exit 2 like every other usage error of the CLI."""

    exit_code = EXIT_USAGE

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


db_option = click.option("--db", envvar="EVALJOBS_DATABASE_URL", default=None,
                         help="Database URL: sqlite:///path.db (default .evaljobs/evaljobs.db) "
                              "or postgresql://…")
broker_option = click.option("--broker", envvar="EVALJOBS_BROKER_URL", default="memory", show_default=True,
                             help="'memory' (in-process workers) or redis://host:port/db.")


def _rate(ctx, param, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a pass rate: use 0.9 or 90%") from None
    if not 0.0 <= value <= 1.0:
        raise click.BadParameter(f"{text!r} is not a pass rate between 0 and 1 (or 0% and 100%)")
    return value


fail_under_option = click.option("--fail-under", "gate", default=None, callback=_rate, metavar="RATE",
                                 help="Exit 1 when the pass rate is under RATE (0.9 or 90%).")


def _connect(db: str | None) -> None:
    try:
        store.connect(db)
    except store.StoreError as exc:
        raise OpsError(str(exc)) from None


def _get_run(run_id: str) -> store.RunInfo:
    try:
        return store.get_run(run_id)
    except store.StoreError as exc:
        raise OpsError(str(exc)) from None


def _bind_events(broker: str | None) -> None:
    """Live events come through Redis when the run's broker is Redis; in-process otherwise."""
    from evaljobs.pipeline import events

    if broker and broker.startswith(_REDIS_SCHEMES):
        events.bind_redis(broker)


def _finish(info: store.RunInfo, gate: float | None) -> None:
    """Print the run's table (stdout) and apply the gate: exit 1 under it, or with no report to judge."""
    from evaljobs.reports.build import render_table

    if info.report is None:
        click.echo(f"run {info.id} is {info.status} with {info.persisted}/{info.expected} pairs; no report",
                   err=True)
        if gate is not None:
            click.echo(f"FAIL: run {info.id} has no report to hold to --fail-under {gate:.1%}", err=True)
            sys.exit(EXIT_GATE)
        return
    from evaljobs.cli import _gate  # one gate for run, report and watch

    click.echo(render_table(info.report), nl=False)
    _gate(info, gate)


def _follow(info: store.RunInfo, timeout: float | None, poll: float) -> store.RunInfo:
    from evaljobs.pipeline.progress import Progress, follow

    progress = Progress(info.expected)
    return follow(info.id, progress=progress, poll=poll, timeout=timeout)


# -- watch ------------------------------------------------------------------------------------


@click.command("watch")
@click.argument("run_id")
@fail_under_option
@click.option("--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Stop following after SECONDS.")
@click.option("--poll", type=click.FloatRange(min=0.05), default=5.0, show_default=True, hidden=True,
              help="Seconds between database reads (the fallback for missed events).")
@db_option
@broker_option
def watch(run_id, gate, timeout, poll, db, broker) -> None:
    """Follow RUN_ID to its report: a live bar on a terminal, a line per result otherwise, then the table.

    Woken by the run's events (Redis pub/sub with --broker redis://…); the
    database is read every few seconds as well, which also catches events
    missed while disconnected. A run that is already finished just prints.
    """
    _connect(db)
    info = _get_run(run_id)
    if info.report is None and info.status != store.CANCELLED:
        _bind_events(broker)
        info = _follow(info, timeout, poll)
    _finish(info, gate)


# -- status -----------------------------------------------------------------------------------


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("-Q", "--queue", "queues", multiple=True, help="Also show this queue (repeatable).")
@click.option("--window", type=click.FloatRange(min=0), default=None,
              help="Seconds a worker counts as seen (default: the broker's heartbeat timeout, 60).")
@db_option
@broker_option
def status(as_json, queues, window, db, broker) -> None:
    """Active runs with progress, queue depths, workers seen recently, governor budgets and pools."""
    from evaljobs.workers.status import collect, render

    _connect(db)
    info = collect(broker, queues=queues, window=window)
    if as_json:
        click.echo(json.dumps(info.to_dict(), indent=2))
    else:
        click.echo(render(info), nl=False)
    unreadable = [note for note in info.notes if note.startswith("cannot read ")]
    if unreadable:  # what it could read is shown above; a monitoring script must still see the outage
        click.echo(f"error: {unreadable[0]}", err=True)
        sys.exit(2)


# -- rerun ------------------------------------------------------------------------------------


@click.command("rerun")
@click.argument("run_id")
@click.option("--errored", is_flag=True, help="Rerun the pairs whose result is errored.")
@click.option("--failed", is_flag=True, help="Rerun the pairs whose result is failed.")
@click.option("--all", "every", is_flag=True, help="Rerun every pair of the run.")
@click.option("--width", type=click.IntRange(min=1), default=8, show_default=True,
              help="Worker threads for --broker memory and the threads strategy.")
@click.option("--wait/--no-wait", default=None,
              help="Follow the new run to its report (default: yes, except queued strategies on Redis).")
@fail_under_option
@db_option
@broker_option
def rerun(run_id, errored, failed, every, width, wait, gate, db, broker) -> None:
    """Create a NEW run over RUN_ID's errored, failed or all pairs, with its catalog, context and options."""
    from evaljobs.pipeline import events
    from evaljobs.pipeline.rerun import RerunError, create_rerun, start
    from evaljobs.pipeline.strategies import QUEUED

    select = [name for name, on in (("errored", errored), ("failed", failed), ("all", every)) if on]
    if not select:
        raise OpsError("say what to rerun: --errored, --failed (both may be given) or --all")
    if every and len(select) > 1:
        raise OpsError("--all already includes every pair: give it alone")
    _connect(db)
    _get_run(run_id)
    try:
        new = create_rerun(run_id, select)
    except (RerunError, ValueError) as exc:
        raise OpsError(str(exc)) from None
    queued = new.strategy in QUEUED
    click.echo(f"run {new.id}: rerun of {run_id} ({'+'.join(select)}), {new.expected} pairs "
               f"({new.strategy}, broker {broker if queued else 'none'})", err=True)
    if not queued:
        from evaljobs.pipeline.progress import Progress
        from evaljobs.pipeline.broker import CONTEXT_PROVIDER_GROUP
        from evaljobs_middleware.context import discover_providers

        progress = Progress(new.expected)
        events.add_listener(progress)
        try:
            info = start(new, width=width, context_providers=discover_providers(CONTEXT_PROVIDER_GROUP))
        finally:
            events.remove_listener(progress)
        _finish(info, gate)
        return
    from evaljobs.pipeline.broker import BrokerError, configure, start_memory_worker

    try:
        binding = configure(broker)
    except BrokerError as exc:
        raise OpsError(str(exc)) from None
    worker = start_memory_worker(binding, width) if binding.is_memory else None
    try:
        start(new, binding=binding)
        if not (wait if wait is not None else binding.is_memory):
            click.echo(new.id)
            return
        _finish(_follow(new, None, 5.0), gate)
    finally:
        if worker is not None:
            worker.stop()
        binding.broker.close()


# -- cache ------------------------------------------------------------------------------------


@click.group("cache")
def cache() -> None:
    """The response cache shared by all workers (runs started with --cache)."""


@cache.command("clear")
@click.option("--older-than", "older_than", default=None, metavar="AGE",
              help="Only entries written more than AGE ago (seconds, or 30m, 12h, 7d…).")
@db_option
def cache_clear(older_than, db) -> None:
    """Delete cached provider answers (all of them, or those older than --older-than)."""
    from evaljobs import store
    from evaljobs.providers.cache import CacheConfigError, parse_duration

    try:
        age = parse_duration(older_than, what="--older-than") if older_than is not None else None
    except CacheConfigError as exc:
        raise OpsError(str(exc)) from None
    _connect(db)
    removed = store.cache_clear(age)
    scope = f" older than {older_than}" if older_than is not None else ""
    click.echo(f"removed {removed} cached answer{'s' if removed != 1 else ''}{scope}")


__all__ = ["watch", "status", "rerun", "cache"]
