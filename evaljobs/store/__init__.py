"""Persistence: catalog snapshots, runs, one result row per (run, scenario, model), and the barrier.

SQLite (WAL, the embedded default) and PostgreSQL (several machines) through peewee.
Every public function opens a connection for one short statement or transaction
and hands it back before returning, so no connection is ever held across a
provider call and a worker's connections track the work in flight, not its
thread count. Every public function is safe to call from many threads and
several processes at once: correctness rests on the database (a unique
constraint, a locked run row), never on Python-side bookkeeping.

The package, from the bottom up:

- :mod:`~evaljobs.store.errors` — the store's one-line errors.
- :mod:`~evaljobs.store.schema` — the tables, column encoding, creating/upgrading them.
- :mod:`~evaljobs.store.connections` — binding a database URL, per-call connections, reconnecting.
- :mod:`~evaljobs.store.snapshots` — catalog snapshots by digest.
- :mod:`~evaljobs.store.runs` — creating, reading and changing the status of runs.
- :mod:`~evaljobs.store.results` — result rows, the barrier (``record_result``) and ``finalize``.
- :mod:`~evaljobs.store.cache` — the response-cache table, the backend of ``providers.cache``.
- :mod:`~evaljobs.store.governor_limits` — what the provider governor learned, kept across runs.

``from evaljobs import store; store.X`` works for every public name below.
"""
from __future__ import annotations

# First, before any module of the package imports peewee: peewee without psycopg2 until a
# PostgreSQL URL is opened (start-up time of every SQLite command; see evaljobs.store.drivers).
from evaljobs.store.drivers import import_peewee as _import_peewee

_import_peewee()

from evaljobs.store import cache, governor_limits  # noqa: E402 - after peewee is imported without its PostgreSQL driver
from evaljobs.store.cache import CacheEntry
from evaljobs.store.connections import (DEFAULT_URL, PG_CONNECT_TIMEOUT, RECONNECT_SECONDS,
                                        SQLITE_BUSY_SECONDS, connect, hold_connection, holding,
                                        release_connection, upgrade, without_waiting)
from evaljobs.store.errors import (DatabaseUnavailable, StorageFailed, Incomplete, StoreError, UnexpectedPair, UnknownRun,
                                   UnknownSnapshot, redact)
from evaljobs.store.results import (Finalized, Recorded, expected_pairs, finalize, is_recorded, list_results,
                                    missing_pairs, pair_state, pair_statuses, progress, record_result,
                                    record_results, recorded_among)
from evaljobs.store.runs import (RunInfo, cancel, count_runs, create_run, get_run, list_runs, mark_running,
                                 set_status, take_judge_call)
from evaljobs.store.schema import (CANCELLED, COMPLETE, FAILED_RUN, FINISHED_STATUSES, PARTIAL, PENDING,
                                   RUN_STATUSES, RUNNING, SCHEMA_VERSION, ResultRow, Run, SchemaVersion, Snapshot,
                                   database)
from evaljobs.store.snapshots import load_snapshot, save_snapshot

# Private helpers that tests still reach for (being replaced by public functions; see issue 15).
from evaljobs.store.connections import _bound, _connection, _reconnecting, _transaction  # noqa: E402,F401
from evaljobs.store.results import (_hot, _insert_result, _pairs_query, _progress_query,  # noqa: E402,F401
                                    _results_query)
from evaljobs.store.schema import _now  # noqa: E402,F401
from evaljobs.store.snapshots import _forget_snapshots  # noqa: E402,F401

#: The response-cache table's functions under their former names (``evaljobs.store.cache`` is the backend).
cache_get = cache.get
cache_put = cache.put
cache_clear = cache.clear

__all__ = [
    "DEFAULT_URL", "PG_CONNECT_TIMEOUT", "RECONNECT_SECONDS", "SQLITE_BUSY_SECONDS", "SCHEMA_VERSION",
    "PENDING", "RUNNING", "COMPLETE", "PARTIAL", "FAILED_RUN", "CANCELLED", "RUN_STATUSES", "FINISHED_STATUSES",
    "StoreError", "StorageFailed", "DatabaseUnavailable", "UnknownRun", "UnknownSnapshot", "UnexpectedPair", "Incomplete",
    "RunInfo", "Recorded", "Finalized", "SchemaVersion", "Snapshot", "Run", "ResultRow", "CacheEntry", "database",
    "connect", "upgrade", "hold_connection", "holding", "release_connection", "redact", "without_waiting",
    "save_snapshot", "load_snapshot",
    "count_runs", "create_run", "get_run", "list_runs", "mark_running", "set_status", "cancel", "take_judge_call",
    "pair_state", "record_result", "record_results", "recorded_among", "is_recorded", "list_results", "missing_pairs", "expected_pairs",
    "pair_statuses", "progress", "finalize",
    "cache", "cache_get", "cache_put", "cache_clear", "governor_limits",
]
