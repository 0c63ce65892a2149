"""Run leases: which live process evaluates an in-process run, so ``recover`` never takes its pairs.

An in-process run (the embedded broker, or the ``sequential``/``threads`` strategies) keeps its
messages in one process's memory; nothing in the database said they exist, so ``evaljobs recover``
from another shell re-sent every missing pair of a run whose own ``evaljobs run`` was still at work
(26 provider calls for 20 pairs). The process running it now holds a lease, one row per run
(``run_lease``, created the first time a process takes one), and renews it while it lives. A holder
is live while its lease is fresh (:data:`LEASE_SECONDS`) and, on this host, while its process
exists: a ``kill -9``-ed ``evaljobs run`` is taken over at once, one on another host once its lease
lapses. Runs on a shared broker (Redis) take no lease: their messages are in the broker.

Every function is one short statement or transaction, like the rest of the store.
"""
from __future__ import annotations

import os
import socket
import uuid
from datetime import datetime, timedelta
from typing import Iterable, NamedTuple

import peewee
from peewee import CharField, DateTimeField, IntegerField, TextField

from evaljobs.store.connections import _bound, _connection, _reconnecting, _transaction
from evaljobs.store.schema import PG_SCHEMA_LOCK, _aware, _datetime, _now, _Table

#: A holder that has not renewed its lease for this long is taken for dead (another host's process).
LEASE_SECONDS = 30.0
#: How often a holder renews its leases (:mod:`evaljobs.pipeline.ownership`).
RENEW_SECONDS = 5.0


class RunLeaseRow(_Table):
    run_id = CharField(max_length=32, primary_key=True)
    host = TextField()
    pid = IntegerField()
    #: This process's own (random): a pid reused by another process after a crash is not the holder.
    token = CharField(max_length=32)
    renewed_at = DateTimeField()

    class Meta:
        table_name = "run_lease"


class Holder(NamedTuple):
    """The process holding a run's lease."""

    host: str
    pid: int
    token: str
    renewed_at: datetime | None = None

    def describe(self) -> str:
        """``process 4242 on build-7 (lease renewed 1.2 s ago)``, for a one-line refusal."""
        age = "" if self.renewed_at is None else \
            f" (lease renewed {max(0.0, (_aware(_now()) - self.renewed_at).total_seconds()):.1f} s ago)"
        return f"process {self.pid} on {self.host}{age}"


_me: Holder | None = None


def me() -> Holder:
    """This process (a forked child is a new one: its own pid and token)."""
    global _me
    if _me is None or _me.pid != os.getpid():
        _me = Holder(socket.gethostname(), os.getpid(), uuid.uuid4().hex)
    return _me


def _alive(holder: Holder, now: datetime) -> bool:
    """Fresh lease, and on this host a process with its pid: else it is dead (it renews no more)."""
    if holder.renewed_at is None or now - holder.renewed_at > timedelta(seconds=LEASE_SECONDS):
        return False
    if holder.host != me().host:
        return True
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def _holder(row: RunLeaseRow) -> Holder:
    return Holder(row.host, row.pid, row.token, _datetime(row.renewed_at))


def _ensure() -> None:
    db = _bound()
    if db.evaljobs_leases_ready:
        return
    with _transaction():
        if isinstance(db, peewee.PostgresqlDatabase):
            db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (PG_SCHEMA_LOCK,))
        db.create_tables([RunLeaseRow], safe=True)
    db.evaljobs_leases_ready = True


def _exists() -> bool:
    """Whether the lease table exists (a reader creates nothing)."""
    db = _bound()
    if db.evaljobs_leases_ready:
        return True
    with _connection():
        return db.table_exists(RunLeaseRow._meta.table_name)


@_reconnecting
def claim(run_id: str) -> Holder | None:
    """Take ``run_id``'s lease for this process unless another live process holds it.

    Returns that live holder (nothing taken), or None: the lease is this process's now. One
    transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: the row locked), so of two processes claiming
    together one wins.
    """
    _ensure()
    mine = me()
    with _transaction() as db:
        query = RunLeaseRow.select().where(RunLeaseRow.run_id == run_id)
        row = (query.for_update() if db.for_update else query).first()
        now = _aware(_now())
        if row is not None and row.token != mine.token and _alive(_holder(row), now):
            return _holder(row)
        (RunLeaseRow.insert(run_id=run_id, host=mine.host, pid=mine.pid, token=mine.token, renewed_at=_now())
         .on_conflict(conflict_target=[RunLeaseRow.run_id],
                      update={RunLeaseRow.host: mine.host, RunLeaseRow.pid: mine.pid,
                              RunLeaseRow.token: mine.token, RunLeaseRow.renewed_at: _now()})
         .execute())
    return None


@_reconnecting
def live_holder(run_id: str) -> Holder | None:
    """The live process other than this one holding ``run_id``'s lease, if any (creates nothing)."""
    if not _exists():
        return None
    with _connection():
        row = RunLeaseRow.get_or_none(RunLeaseRow.run_id == run_id)
    if row is None or row.token == me().token:
        return None
    holder = _holder(row)
    return holder if _alive(holder, _aware(_now())) else None


@_reconnecting
def renew(run_ids: Iterable[str]) -> int:
    """Renew this process's leases of ``run_ids``; how many it still held."""
    ids = list(run_ids)
    if not ids or not _exists():
        return 0
    with _transaction():
        return (RunLeaseRow.update(renewed_at=_now())
                .where(RunLeaseRow.run_id.in_(ids) & (RunLeaseRow.token == me().token)).execute())


@_reconnecting
def release(run_ids: Iterable[str]) -> None:
    """Give up this process's leases of ``run_ids`` (its run ended, or it stops)."""
    ids = list(run_ids)
    if not ids or not _exists():
        return
    with _transaction():
        RunLeaseRow.delete().where(RunLeaseRow.run_id.in_(ids) & (RunLeaseRow.token == me().token)).execute()


__all__ = ["LEASE_SECONDS", "RENEW_SECONDS", "Holder", "RunLeaseRow", "claim", "live_holder", "me", "release",
           "renew"]
