"""``evaljobs db upgrade``: create or upgrade the schema.

A thin shell over :func:`evaljobs.api.upgrade_schema`, imported inside the command
(start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import json

import click

from evaljobs.cli._options import db_option, json_option
from evaljobs.cli._stages import stage


@click.group()
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
@json_option
@db_option
def db_upgrade(as_json, db) -> None:
    """Create or upgrade the schema (says on stderr which database, and how long it took)."""
    from evaljobs import api  # start-up time (see the module docstring)

    done = api.upgrade_schema(db, stage=stage)
    if as_json:
        click.echo(json.dumps({"changes": done}))
        return
    click.echo("\n".join(done) if done else "schema is up to date")


__all__ = ["db"]
