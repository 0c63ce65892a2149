"""The response-cache table (``evaljobs run --cache``): a backend for :mod:`evaljobs.providers.cache`.

The provider-side cache computes keys and encodes answers; this module only
stores them, so the providers layer never imports the store: the pipeline
hands this module (``get``/``put``/``clear``) down as the cache's backend.
Each lookup and write is one short statement, nothing is held across a call.
"""
from __future__ import annotations

from datetime import timedelta

import peewee
from peewee import CharField, DateTimeField, TextField

from evaljobs.store.connections import _bound, _connection, _transaction
from evaljobs.store.schema import PG_SCHEMA_LOCK, _now, _Table


class CacheEntry(_Table):
    """One cached provider answer, shared by every worker through the database.

    ``key`` is a sha256 of (provider, model, request body, adapter version) computed by
    :mod:`evaljobs.providers.cache`; only successful answers are ever written.
    """

    key = CharField(max_length=64, primary_key=True)
    provider = TextField()
    model = TextField()
    value = TextField()
    created_at = DateTimeField(index=True)

    class Meta:
        table_name = "cache"


def _ensure_cache() -> None:
    """Create the ``cache`` table the first time this process (and database) uses the cache.

    The cache is optional, so its table is not part of the schema every run needs
    (``connect``/``db upgrade``): a database where nobody ever passed ``--cache`` has none.
    """
    db = _bound()
    if db.evaljobs_cache_ready:
        return
    with _transaction():
        if isinstance(db, peewee.PostgresqlDatabase):
            db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (PG_SCHEMA_LOCK,))
        db.create_tables([CacheEntry], safe=True)
    db.evaljobs_cache_ready = True


def get(key: str, ttl: float) -> str | None:
    """The cached value under ``key`` if it was written less than ``ttl`` seconds ago (primary-key lookup)."""
    _ensure_cache()
    cutoff = _now() - timedelta(seconds=ttl)
    query = (CacheEntry.select(CacheEntry.value)
             .where((CacheEntry.key == key) & (CacheEntry.created_at >= cutoff)))
    with _connection():
        return query.scalar()


def put(key: str, value: str, *, provider: str, model: str) -> None:
    """Store (or refresh) ``value`` under ``key``; concurrent writers of the same key are harmless."""
    _ensure_cache()
    row = dict(key=key, provider=provider, model=model, value=value, created_at=_now())
    with _connection():
        (CacheEntry.insert(**row)
         .on_conflict(conflict_target=[CacheEntry.key],
                      preserve=[CacheEntry.value, CacheEntry.created_at, CacheEntry.provider,
                                CacheEntry.model])
         .as_rowcount().execute())


def clear(older_than: float | None = None) -> int:
    """Delete cached answers written more than ``older_than`` seconds ago (all with None).

    Returns how many were deleted.
    """
    _ensure_cache()
    query = CacheEntry.delete()
    if older_than is not None:
        query = query.where(CacheEntry.created_at < _now() - timedelta(seconds=older_than))
    with _transaction():
        return query.execute()


__all__ = ["CacheEntry", "get", "put", "clear"]
