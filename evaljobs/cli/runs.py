"""``evaljobs runs`` and ``evaljobs show``: list runs, and one run with each result.

The API is imported inside the commands: ``evaljobs --help`` must not load
the store (start-up time).
"""
from __future__ import annotations

import datetime
import json
from typing import Any

import click

from evaljobs.cli._options import db_option, echo


@click.command()
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@db_option
def runs(limit, as_json, db) -> None:
    """List recent runs."""
    from evaljobs.api import Session  # start-up time (see the module docstring)

    with Session(db=db, create=False) as session:
        items = session.runs(limit=limit)
    if as_json:
        click.echo(json.dumps([run_summary(r) for r in items], indent=2))
        return
    if not items:
        click.echo("no runs yet: try `evaljobs demo`", err=True)
        return
    click.echo(f"{'RUN':<16} {'STATUS':<9} {'PAIRS':>9} {'PASS':>6}  {'STRATEGY':<10} {'CATALOG':<20} "
               "CREATED")
    for r in items:
        rate = f"{r.report['summary']['pass_rate']:.0%}" if r.report else "-"
        echo(f"{r.id:<16} {r.status:<9} {r.persisted:>4}/{r.expected:<4} {rate:>6}  {r.strategy:<10} "
             f"{r.catalog_name[:20]:<20} {when(r.created_at)}")


def when(moment: Any, now: datetime.datetime | None = None) -> str:
    """A run's time as a person reads it: "just now", "12 min ago", "3 h ago", else the UTC minute.

    The store keeps microseconds (the JSON keeps them too); a table of runs needs the minute.
    """
    if moment is None:
        return "-"
    if not isinstance(moment, datetime.datetime):
        try:
            moment = datetime.datetime.fromisoformat(str(moment))
        except ValueError:
            return str(moment)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    seconds = (now - moment).total_seconds()
    if 0 <= seconds < 60:
        return "just now"
    if 0 <= seconds < 3600:
        return f"{seconds // 60:.0f} min ago"
    if 0 <= seconds < 86400:
        return f"{seconds // 3600:.0f} h ago"
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def run_summary(r: Any) -> dict:
    """One run as the JSON of ``runs --json`` and ``show --json``."""
    return {"id": r.id, "status": r.status, "catalog": r.catalog_name, "digest": r.digest, "models": r.models,
            "strategy": r.strategy, "expected": r.expected, "persisted": r.persisted,
            "created_at": str(r.created_at), "finished_at": str(r.finished_at) if r.finished_at else None,
            "pass_rate": r.report["summary"]["pass_rate"] if r.report else None}


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
@db_option
def show(run_id, as_json, db) -> None:
    """Show one run: status, progress and each result."""
    from evaljobs.api import Session  # start-up time (see the module docstring)

    with Session(db=db, create=False) as session:
        detail = session.show(run_id)
    info, results, missing = detail.run, detail.results, detail.missing
    if as_json:
        echo(json.dumps({**run_summary(info), "results": [r.to_dict() for r in results]}, indent=2,
                              default=str))
        return
    echo(
        f"run {info.id}  {info.status}  {info.persisted}/{info.expected} pairs  catalog {info.catalog_name}"
        f" ({info.digest[:19]})  strategy {info.strategy}"
    )
    echo(f"models: {', '.join(info.models)}")
    if info.context:
        echo(f"context: {json.dumps(info.context)}")
    for r in results:
        extra = f"  [{r.fault}]" if r.fault else ""
        error = f"  {r.error[:100]}" if r.error else ""
        epoch = f" #{r.epoch}" if info.epochs > 1 else ""
        echo(f"  {r.status:<7} {r.score:4.2f}  {r.scenario_key} × {r.model}{epoch}{extra}{error}")
    if missing:
        epoch = f" #{missing[0][2]}" if info.epochs > 1 else ""
        echo(f"missing {len(missing)} pairs (e.g. {missing[0][0]} × {missing[0][1]}{epoch})")


__all__ = ["run_summary", "runs", "show"]
