"""``evaljobs db upgrade``: create or upgrade the schema.

The store is imported inside the command (start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import click

from evaljobs.cli._options import db_option


@click.group()
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
@db_option
def db_upgrade(db) -> None:
    """Create or upgrade the schema."""
    from evaljobs import store  # start-up time (see the module docstring)

    store.connect(db)
    done = store.upgrade()
    click.echo("\n".join(done) if done else "schema is up to date")


__all__ = ["db"]
