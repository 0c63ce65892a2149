"""What the provider governor learned, kept in the database (the embedded SQLite default too).

The governor's state lives in Redis when there is one, and Redis keeps it; an
embedded run (``--broker memory``, no Redis) had nowhere to keep it, so every run
started from scratch and paid the same 429s again. The governor writes a budget's
learned limit here (a decrease at once, growth at most once a second) and reads it
once per process, so the next run on the machine starts at the provider's limit.

Plain values only: the pipeline adapts them to the governor's ``LearnedStore`` (the
store does not import the providers layer). One primary-key row per budget; the
table is created the first time a process uses it, like the response cache's.
"""
from __future__ import annotations

import peewee
from peewee import CharField, DateTimeField, IntegerField

from evaljobs.store.connections import _bound, _connection, _transaction
from evaljobs.store.schema import PG_SCHEMA_LOCK, _now, _Table

#: The learned values of one budget, by name: limit, ssthresh, hold, plateau.
FIELDS = ("limit", "ssthresh", "hold", "plateau")


class GovernorLimit(_Table):
    """One budget's learned concurrency (see :mod:`evaljobs.governor`)."""

    budget = CharField(max_length=255, primary_key=True)
    limit = IntegerField()
    ssthresh = IntegerField()
    hold = IntegerField(default=0)
    plateau = IntegerField()
    updated_at = DateTimeField()

    class Meta:
        table_name = "governor_limit"


def _ensure() -> None:
    db = _bound()
    if db.evaljobs_governor_limits_ready:
        return
    with _transaction():
        if isinstance(db, peewee.PostgresqlDatabase):
            db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (PG_SCHEMA_LOCK,))
        db.create_tables([GovernorLimit], safe=True)
    db.evaljobs_governor_limits_ready = True


def load(budget: str) -> dict[str, int] | None:
    """The learned values of ``budget`` (``FIELDS``), or None when nothing was learned."""
    _ensure()
    with _connection():
        row = (GovernorLimit.select(GovernorLimit.limit, GovernorLimit.ssthresh, GovernorLimit.hold,
                                    GovernorLimit.plateau)
               .where(GovernorLimit.budget == budget).tuples().first())
    return None if row is None else dict(zip(FIELDS, (int(v) for v in row)))


def save(budget: str, *, limit: int, ssthresh: int, hold: int, plateau: int) -> None:
    """Keep (or replace) what ``budget`` learned: one upsert."""
    _ensure()
    row = dict(budget=budget, limit=int(limit), ssthresh=int(ssthresh), hold=int(hold), plateau=int(plateau),
               updated_at=_now())
    with _connection():
        (GovernorLimit.insert(**row)
         .on_conflict(conflict_target=[GovernorLimit.budget],
                      preserve=[GovernorLimit.limit, GovernorLimit.ssthresh, GovernorLimit.hold,
                                GovernorLimit.plateau, GovernorLimit.updated_at])
         .as_rowcount().execute())


def clear() -> int:
    """Forget every learned limit (a benchmark's cleared state); returns how many rows went."""
    _ensure()
    with _transaction():
        return GovernorLimit.delete().execute()


__all__ = ["GovernorLimit", "FIELDS", "load", "save", "clear"]
