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
- :mod:`~evaljobs.store.pair_speed` — how long a model's pairs took in its last complete run.
- :mod:`~evaljobs.store.pages` — what the viewer reads (runs and result cells, paged by id).
- :mod:`~evaljobs.store.lookup` — a run id from ``latest`` or a unique prefix.
- :mod:`~evaljobs.store.leases` — which live process evaluates an in-process run (``recover`` leaves it).
- :mod:`~evaljobs.store.labels` — reviewers' labels on pairs, carried forward to the same answer.

``from evaljobs import store; store.X`` works for every public name below. The viewer's pages and the
reviewers' labels (and their names) load on first use (:mod:`evaljobs.lazy`): a run reads neither; so
do the batch lane's tables (:mod:`~evaljobs.store.batches`), which a run that batches nothing never reads.
"""
from __future__ import annotations

from typing import Any

# First, before any module of the package imports peewee: peewee without psycopg2 until a
# PostgreSQL URL is opened (start-up time of every SQLite command; see evaljobs.store.drivers).
from evaljobs.store.drivers import import_peewee as _import_peewee

_import_peewee()

from evaljobs.store import cache, governor_limits, leases, pair_speed  # noqa: E402 - after peewee is imported without its PostgreSQL driver
from evaljobs.lazy import submodules  # noqa: E402
from evaljobs.store.cache import CacheEntry
from evaljobs.store.connections import (DEFAULT_URL, PG_CONNECT_TIMEOUT, RECONNECT_SECONDS,
                                        SQLITE_BUSY_SECONDS, connect, connection, hold_connection, holding,
                                        is_sqlite, reconnecting, refuse_a_missing_file, release_connection,
                                        upgrade, without_waiting)
from evaljobs.store.errors import (
    DatabaseUnavailable,
    NoDatabase,
    StorageFailed,
    Incomplete,
    StoreError,
    UnexpectedPair,
    UnknownRun,
    UnknownSnapshot,
    redact,
)
from evaljobs.store.results import (Finalized, Recorded, expected_pairs, finalize, is_recorded, list_results,
                                    missing_pairs, pair_state, pair_statuses, progress, record_result,
                                    record_results, recorded_among)
from evaljobs.store.runs import (RunInfo, cancel, count_runs, create_run, get_run, interrupt, list_runs,
                                 mark_running, release_judge_call, resume, resume_line, set_status,
                                 take_judge_call)
from evaljobs.store.schema import (CANCELLED, COMPLETE, FAILED_RUN, FINISHED_STATUSES, INTERRUPTED, PARTIAL,
                                   PENDING, UNFINISHED_STATUSES, RUN_STATUSES, RUNNING, SCHEMA_VERSION,
                                   LABELS_SCHEMA, Label, ResultRow, Run, SchemaVersion, Snapshot, database)
from evaljobs.store.lookup import resolve_run_id
from evaljobs.store.snapshots import (forget_snapshots, load_snapshot, run_judges, save_snapshot,
                                      verdict_digest_in)

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.store import batches as batches
    from evaljobs.store import labels as labels
    from evaljobs.store import pages as pages
    from evaljobs.store.labels import (BadLabel, LabelInfo, export_labels, import_labels, judged_labels,
                                       labelled_runs, labels_for_run, output_digest, record_label)
    from evaljobs.store.pages import Cell, RunRow
    from evaljobs.store.partial import (STOPPED_STATUSES, Unfinished, partial_report, resume_command,
                                        unfinished)

#: Names loaded with their module on first use: the viewer's and the reviewers' (a run reads neither), and
#: the batch lane's tables (``batches``: only a batch run, its status and its recovery read them), and what
#: is said of a stopped run (``partial``: a complete run's report is stored whole).
_EXPORTS = {
    **dict.fromkeys(("Cell", "RunRow"), "pages"),
    **dict.fromkeys(("STOPPED_STATUSES", "Unfinished", "partial_report", "resume_command", "unfinished"),
                    "partial"),
    **dict.fromkeys(("BadLabel", "LabelInfo", "export_labels", "import_labels", "judged_labels",
                     "labelled_runs", "labels_for_run", "output_digest", "record_label"), "labels"),
}
_module = submodules(__name__, ("batches", "labels", "pages", "partial"))


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    return _module(name) if module is None else getattr(_module(module), name)


#: The response-cache table's functions under their former names (``evaljobs.store.cache`` is the backend).
cache_get = cache.get
cache_put = cache.put
cache_clear = cache.clear

__all__ = [
    "DEFAULT_URL",
    "PG_CONNECT_TIMEOUT",
    "RECONNECT_SECONDS",
    "SQLITE_BUSY_SECONDS",
    "SCHEMA_VERSION",
    "LABELS_SCHEMA",
    "Label",
    "PENDING",
    "RUNNING",
    "COMPLETE",
    "PARTIAL",
    "FAILED_RUN",
    "CANCELLED",
    "INTERRUPTED",
    "RUN_STATUSES",
    "FINISHED_STATUSES",
    "UNFINISHED_STATUSES",
    "interrupt",
    "resume_line",
    "StoreError",
    "StorageFailed",
    "DatabaseUnavailable",
    "NoDatabase",
    "refuse_a_missing_file",
    "UnknownRun",
    "UnknownSnapshot",
    "UnexpectedPair",
    "Incomplete",
    "RunInfo",
    "Recorded",
    "Finalized",
    "SchemaVersion",
    "Snapshot",
    "Run",
    "ResultRow",
    "CacheEntry",
    "database",
    "connect",
    "connection",
    "reconnecting",
    "is_sqlite",
    "upgrade",
    "hold_connection",
    "holding",
    "release_connection",
    "redact",
    "without_waiting",
    "save_snapshot",
    "load_snapshot",
    "forget_snapshots",
    "partial_report",
    "resume_command",
    "STOPPED_STATUSES",
    "Unfinished",
    "unfinished",
    "resume",
    "run_judges",
    "verdict_digest_in",
    "count_runs",
    "create_run",
    "get_run",
    "list_runs",
    "mark_running",
    "set_status",
    "cancel",
    "take_judge_call",
    "release_judge_call",
    "pair_state",
    "record_result",
    "record_results",
    "recorded_among",
    "is_recorded",
    "list_results",
    "missing_pairs",
    "expected_pairs",
    "pair_statuses",
    "progress",
    "finalize",
    "cache",
    "cache_get",
    "cache_put",
    "cache_clear",
    "governor_limits",
    "pair_speed",
    "pages",
    "batches",
    "leases",
    "Cell",
    "RunRow",
    "resolve_run_id",
    "BadLabel",
    "LabelInfo",
    "export_labels",
    "import_labels",
    "labels_for_run",
    "labelled_runs",
    "judged_labels",
    "output_digest",
    "record_label",
]
