"""Persistence: catalog snapshots, runs, one result row per (run, scenario, model), and the barrier.

SQLite (WAL, the embedded default) and PostgreSQL (several machines) through peewee.
Every public function opens a connection for one short statement or transaction
and hands it back before returning, so no connection is ever held across a
provider call and a worker's connections track the work in flight, not its
thread count. Every public function is safe to call from many threads and
several processes at once: correctness rests on the database (a unique
constraint, a locked run row), never on Python-side bookkeeping.

Module state is the ``database`` proxy (which URL we are bound to) and a
per-process cache of parsed snapshots.
"""
from __future__ import annotations

from evaljobs.errors import EvaljobsError
import functools
import json
import logging
import os
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator
from urllib.parse import urlsplit, urlunsplit

import peewee
from peewee import (BooleanField, CharField, DatabaseProxy, DateTimeField, DoubleField, ForeignKeyField,
                    IntegerField, Model, TextField, fn)
from playhouse.pool import PooledPostgresqlDatabase

from evaljobs.reports.build import build_report
from evaljobs.evaluation.result import ERRORED, FAILED, OUTPUT_CAP, PASSED, Result

if TYPE_CHECKING:
    from evaljobs.catalog import Catalog

ENV_URL = "EVALJOBS_DATABASE_URL"
DEFAULT_URL = "sqlite:///.evaljobs/evaljobs.db"
SCHEMA_VERSION = 2
#: What each schema version added (recorded in ``schema_version.description``).
_SCHEMA_CHANGES = {1: "initial schema", 2: "run.pairs: runs over an explicit subset of pairs (reruns)"}

PENDING, RUNNING, COMPLETE, PARTIAL, FAILED_RUN, CANCELLED = (
    "pending", "running", "complete", "partial", "failed", "cancelled")
RUN_STATUSES = (PENDING, RUNNING, COMPLETE, PARTIAL, FAILED_RUN, CANCELLED)
FINISHED_STATUSES = (COMPLETE, PARTIAL, FAILED_RUN, CANCELLED)

#: Seconds a SQLite writer waits for the write lock before giving up.
SQLITE_BUSY_SECONDS = 30
#: Seconds to wait for a PostgreSQL server that does not answer.
PG_CONNECT_TIMEOUT = 10
#: Seconds a call keeps retrying when a database this process has reached before drops its
#: connections or stops answering (a restart, a failover), before it gives up with one line.
RECONNECT_SECONDS = float(os.environ.get("EVALJOBS_DB_RECONNECT_SECONDS", "60"))
_PG_POOL_SIZE = 32
_PG_SCHEMA_LOCK = 0x65766A62  # arbitrary advisory-lock key: "evjb"

database = DatabaseProxy()
_snapshots: dict[str, "Catalog"] = {}
_bind_lock = threading.RLock()


# -- errors ---------------------------------------------------------------------------------


class StoreError(EvaljobsError):
    """A store problem a user can act on; the message is one line."""


class DatabaseUnavailable(StoreError):
    """The database did not accept a connection (down, restarting, wrong address)."""


class UnknownRun(StoreError):
    pass


class UnknownSnapshot(StoreError):
    pass


class UnexpectedPair(StoreError):
    """A result for a pair the run does not expect (completion contract, invariant 4)."""


class Incomplete(StoreError):
    """Finalize was asked for a run whose persisted pairs do not yet equal the expected pairs."""


# -- values ---------------------------------------------------------------------------------


@dataclass
class RunInfo:
    id: str
    digest: str
    catalog_name: str
    models: list[str]
    strategy: str
    status: str
    expected: int
    persisted: int
    context: dict[str, Any] | None
    options: dict[str, Any]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    report: dict[str, Any] | None
    note: str | None
    #: The explicit pairs of a run over a subset (a rerun), in order; None: every scenario × model.
    pairs: list[tuple[str, str]] | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES


@dataclass
class Recorded:
    """What ``record_result`` did. ``completed`` is True for exactly one call per run."""

    inserted: bool
    completed: bool
    persisted: int
    expected: int


@dataclass
class Finalized:
    report: dict[str, Any]
    created: bool


# -- tables ---------------------------------------------------------------------------------


class _Table(Model):
    class Meta:
        database = database


class SchemaVersion(_Table):
    version = IntegerField(primary_key=True)
    applied_at = DateTimeField()
    description = TextField()

    class Meta:
        table_name = "schema_version"


class Snapshot(_Table):
    digest = CharField(max_length=128, primary_key=True)
    name = TextField()
    body = TextField()
    created_at = DateTimeField()

    class Meta:
        table_name = "snapshot"


class Run(_Table):
    id = CharField(max_length=32, primary_key=True)
    digest = CharField(max_length=128)
    catalog_name = TextField()
    models = TextField()
    strategy = CharField(max_length=32)
    status = CharField(max_length=16)
    expected = IntegerField()
    persisted = IntegerField(default=0)
    context = TextField(null=True)
    options = TextField()
    created_at = DateTimeField()
    started_at = DateTimeField(null=True)
    finished_at = DateTimeField(null=True)
    report = TextField(null=True)
    report_at = DateTimeField(null=True)
    note = TextField(null=True)
    judge_calls = IntegerField(default=0)
    #: JSON list of [scenario_key, model] when the run covers a subset of scenario × model (a rerun);
    #: NULL for the whole product. Read with the run row (by primary key), so honouring it scans nothing.
    pairs = TextField(null=True)

    class Meta:
        table_name = "run"
        indexes = ((("created_at",), False), (("status", "created_at"), False))


class ResultRow(_Table):
    run = ForeignKeyField(Run, column_name="run_id", on_delete="CASCADE", index=False)
    scenario_key = TextField()
    model = TextField()
    status = CharField(max_length=16)
    score = DoubleField()
    scores = TextField()
    fault = TextField(null=True)
    output = TextField()
    tool_calls = TextField()
    duration_ms = IntegerField()
    input_tokens = IntegerField()
    output_tokens = IntegerField()
    cost = DoubleField()
    attempts = IntegerField()
    error = TextField(null=True)
    details = TextField()
    cached = BooleanField()
    created_at = DateTimeField()

    class Meta:
        table_name = "result"
        # The one index a run's results need: it enforces invariant 1 and serves every
        # per-run query (WHERE run_id = ?), so nothing here scans the table.
        indexes = ((("run", "scenario_key", "model"), True),)


_TABLES = (SchemaVersion, Snapshot, Run, ResultRow)


# -- binding and connections ----------------------------------------------------------------


def connect(url: str | None = None) -> peewee.Database:
    """Bind the store to ``url`` (else ``$EVALJOBS_DATABASE_URL``, else a SQLite file under ``.evaljobs/``).

    Creates the schema on first use. Binding the URL already bound is a no-op; another URL rebinds.
    """
    url = url or os.environ.get(ENV_URL) or DEFAULT_URL
    with _bind_lock:
        current = database.obj
        if current is not None and current.evaljobs_url == url:
            _adopt(current)
            return current
        db = _open(url)
        database.initialize(db)
        try:
            db.evaljobs_schema_log = _upgrade(db)
        except BaseException:
            database.initialize(current)
            _retire(db)
            raise
        _retire(current)
        return db


def upgrade() -> list[str]:
    """Create or upgrade the schema of the bound database; returns what it did (empty: up to date).

    ``connect`` already upgrades on first use, so this also reports what that did
    (each change is reported once).
    """
    db = _bound()
    with _bind_lock:
        done, db.evaljobs_schema_log = db.evaljobs_schema_log + _upgrade(db), []
    return done


_held = threading.local()
#: One SQLite writer at a time per process (see ``_transaction``); re-entrant for nested transactions.
_sqlite_writers = threading.RLock()


def hold_connection() -> None:
    """Let this thread keep its SQLite connection open across store calls and messages.

    For worker middleware (before each message) and in-process pair loops. Opening a SQLite
    connection runs its pragmas, and closing the last one checkpoints the WAL: per query
    that was the largest cost of a zero-latency pair. A SQLite connection is a file handle
    with no server-side limit, so a worker thread keeps one for its life (it is closed when
    the thread ends). PostgreSQL connections still go back to the pool after each call, so
    the server's connection limit caps in-flight queries, not width.
    """
    _held.db = database.obj if isinstance(database.obj, peewee.SqliteDatabase) else None


@contextmanager
def holding() -> Iterator[None]:
    """:func:`hold_connection` for the duration of a block, then close this thread's connection."""
    hold_connection()
    try:
        yield
    finally:
        _held.db = None
        db = database.obj
        if db is not None and not db.is_closed() and not db.in_transaction():
            db.close()


def _holds(db: peewee.Database) -> bool:
    return getattr(_held, "db", None) is db


def release_connection() -> None:
    """Hand this thread's connection back after a message (the worker middleware's hook).

    PostgreSQL: closed, i.e. returned to the pool. SQLite under :func:`hold_connection`:
    kept open for the thread's next message. Without a hold the store already closes after
    each call, and this is the safety net.
    """
    db = database.obj
    if db is None or db.is_closed() or db.in_transaction():
        return
    if _holds(db):
        return
    db.close()


def _open(url: str) -> peewee.Database:
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        db = _open_sqlite(url)
    elif scheme in ("postgresql", "postgres"):
        db = _open_postgres(url)
    else:
        raise StoreError(f"unsupported database URL {redact(url)}: use sqlite:///path or "
                         "postgresql://user@host:port/db")
    db.evaljobs_url = url
    db.evaljobs_pid = os.getpid()
    db.evaljobs_reached = False  # set once a connection succeeds: only then is a failure an outage
    return db


def _open_sqlite(url: str) -> peewee.SqliteDatabase:
    if not url.startswith("sqlite:///"):
        raise StoreError(f"bad SQLite URL {url!r}: use sqlite:///relative/path or sqlite:////absolute/path")
    path = url[len("sqlite:///"):].split("?", 1)[0]
    if not path:
        raise StoreError(f"bad SQLite URL {url!r}: no file path after sqlite:///")
    if path == ":memory:":
        raise StoreError(f"{url}: every call opens its own connection, so an in-memory SQLite database "
                         "would be empty each time; use a file path")
    path = str(Path(path).resolve())  # a relative URL means relative to where we connected
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the folder for {url}: {exc.strerror}") from None
    pragmas = {"journal_mode": "wal", "busy_timeout": SQLITE_BUSY_SECONDS * 1000, "foreign_keys": 1,
               "synchronous": "normal"}
    return peewee.SqliteDatabase(path, pragmas=pragmas, timeout=SQLITE_BUSY_SECONDS)


def _open_postgres(url: str) -> peewee.PostgresqlDatabase:
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        raise StoreError(f"{redact(url)} needs the PostgreSQL driver: "
                         "pip install 'evaljobs[postgres]'") from None
    dsn = "postgresql://" + url.split("://", 1)[1]
    # A pool, because a fresh TCP connection per short transaction would cost more than the
    # transaction; connections still go back to it after every call.
    return PooledPostgresqlDatabase(dsn, max_connections=_PG_POOL_SIZE, stale_timeout=300, timeout=30,
                                    connect_timeout=PG_CONNECT_TIMEOUT)


def _retire(db: peewee.Database | None) -> None:
    if db is None:
        return
    if isinstance(db, PooledPostgresqlDatabase) and db.evaljobs_pid == os.getpid():
        db.close_all()
    else:
        db.dispose()


def _adopt(db: peewee.Database) -> None:
    """After a fork, forget (never close) the parent's connections: they share its sockets."""
    if db.evaljobs_pid != os.getpid():
        db.dispose()
        db.evaljobs_pid = os.getpid()


def _bound() -> peewee.Database:
    db = database.obj
    if db is None:
        return connect()
    if db.evaljobs_pid != os.getpid():
        with _bind_lock:
            _adopt(db)
    return db


def redact(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


@contextmanager
def _connection() -> Iterator[peewee.Database]:
    """This thread's connection for the duration of one public call (reused if already open)."""
    db = _bound()
    opened = db.is_closed()
    if opened:
        try:
            db.connect()
        except (peewee.OperationalError, peewee.InterfaceError, peewee.ImproperlyConfigured) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DatabaseUnavailable(f"cannot reach database {redact(db.evaljobs_url)}: {reason}") from None
        db.evaljobs_reached = True
    try:
        yield db
    finally:
        if opened and not db.is_closed() and not _holds(db):
            db.close()


@contextmanager
def _transaction() -> Iterator[peewee.Database]:
    """A write transaction. On SQLite it is BEGIN IMMEDIATE, which takes the write lock up front,
    so read-count-write sequences are serialized across threads and processes."""
    with _connection() as db:
        if not isinstance(db, peewee.SqliteDatabase):
            with db.atomic():
                yield db
            return
        # Threads of this process queue for SQLite's one write lock here, in order, instead of
        # inside SQLite's busy handler, which sleeps 1, 2, 5, 10 … ms between tries: with eight
        # worker threads writing, those sleeps, not the writes, set the pace. Other processes
        # still meet the busy handler.
        with _sqlite_writers, db.atomic(lock_type="IMMEDIATE"):
            yield db


_logger = logging.getLogger("evaljobs.store")


def _reconnecting(fn):
    """Run ``fn`` again when the database connection is lost mid-call (a restart, a failover).

    Safe because every public call is one short statement or transaction that either
    committed or rolled back, and each is idempotent: insert-if-absent on the unique
    pair, conditional updates, reads. So a call repeated after its connection dropped
    cannot double a result; without this, a worker whose database restarted between a
    provider call and its commit failed the message and evaluated the pair again.

    Retries for up to ``RECONNECT_SECONDS`` and only a database this process has reached
    before (a wrong URL still fails at once), only as the outermost call (a nested call
    inside a transaction leaves the retry to its caller), and on SQLite only a lock
    timeout. Giving up is one line naming the database.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        db = database.obj
        if db is not None and not db.is_closed() and db.in_transaction():
            return fn(*args, **kwargs)
        deadline, pause = None, 0.05
        while True:
            try:
                return fn(*args, **kwargs)
            except (DatabaseUnavailable, peewee.OperationalError, peewee.InterfaceError) as exc:
                db = database.obj
                if db is None or not getattr(db, "evaljobs_reached", False) or not _is_outage(db, exc):
                    raise
                reason = " ".join(str(exc).split()) or type(exc).__name__
                now = time.monotonic()
                if deadline is None:
                    deadline = now + RECONNECT_SECONDS
                    _logger.warning("database %s: %s; retrying %s for up to %g s", redact(db.evaljobs_url),
                                    reason[:200], fn.__name__, RECONNECT_SECONDS)
                if now >= deadline:
                    raise DatabaseUnavailable(f"lost database {redact(db.evaljobs_url)} for {RECONNECT_SECONDS:g} s "
                                              f"({fn.__name__}): {reason[:300]}") from None
                time.sleep(min(pause, max(0.0, deadline - now)))
                pause = min(pause * 2, 1.0)

    return wrapper


def _is_outage(db: peewee.Database, exc: Exception) -> bool:
    if isinstance(exc, DatabaseUnavailable) or isinstance(db, peewee.PostgresqlDatabase):
        return True  # connection lost, admin shutdown, serialization failure, deadlock: all transient
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _upgrade(db: peewee.Database) -> list[str]:
    done: list[str] = []
    with _transaction():
        if isinstance(db, peewee.PostgresqlDatabase):
            # CREATE TABLE IF NOT EXISTS races with itself on PostgreSQL; serialize first users.
            db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_PG_SCHEMA_LOCK,))
        existing = set(db.get_tables())
        missing = [table for table in _TABLES if table._meta.table_name not in existing]
        done += [f"created table {table._meta.table_name}" for table in missing]
        # Only the missing tables (each with its indexes, in this transaction): on PostgreSQL
        # CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table before it finds the index,
        # so every booting worker took SHARE on run, then on result, and deadlocked with
        # record_result (ROW EXCLUSIVE on result, then on run).
        db.create_tables(missing, safe=True)
        current = SchemaVersion.select(fn.MAX(SchemaVersion.version)).scalar() or 0
        if current > SCHEMA_VERSION:
            raise StoreError(f"database {redact(db.evaljobs_url)} has schema version {current}, newer than "
                             f"this evaljobs ({SCHEMA_VERSION}): upgrade evaljobs")
        if Run._meta.table_name in existing:
            done += _add_missing_columns(db, Run, {"pairs": "TEXT"})
        if current < SCHEMA_VERSION:
            SchemaVersion.create(version=SCHEMA_VERSION, applied_at=_now(),
                                 description=_SCHEMA_CHANGES[SCHEMA_VERSION] if current else "initial schema")
            done.append(f"recorded schema version {SCHEMA_VERSION}")
    return done


def _add_missing_columns(db: peewee.Database, table: type[Model], columns: dict[str, str]) -> list[str]:
    """ALTER TABLE … ADD COLUMN for nullable columns added after the table was first created."""
    have = {column.name for column in db.get_columns(table._meta.table_name)}
    done = []
    for name, sql_type in columns.items():
        if name not in have:
            db.execute_sql(f'ALTER TABLE "{table._meta.table_name}" ADD COLUMN "{name}" {sql_type}')
            done.append(f"added column {table._meta.table_name}.{name}")
    return done


# -- helpers --------------------------------------------------------------------------------


def _now() -> datetime:
    """Naive UTC: what both backends store without conversion."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _aware(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=timezone.utc) if value is not None else None


def _iso(value: datetime | None) -> str | None:
    return _aware(value).isoformat() if value is not None else None


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _loads(text: str | None) -> Any:
    return json.loads(text) if text is not None else None


def _info(row: Run) -> RunInfo:
    return RunInfo(id=row.id, digest=row.digest, catalog_name=row.catalog_name, models=_loads(row.models),
                   strategy=row.strategy, status=row.status, expected=row.expected, persisted=row.persisted,
                   context=_loads(row.context), options=_loads(row.options) or {},
                   created_at=_aware(row.created_at), started_at=_aware(row.started_at),
                   finished_at=_aware(row.finished_at), report=_loads(row.report), note=row.note,
                   pairs=list(_pair_list(row.pairs)) if row.pairs is not None else None)


@lru_cache(maxsize=256)
def _pair_list(text: str) -> tuple[tuple[str, str], ...]:
    """A run's explicit pairs, parsed once per process (they never change once the run exists)."""
    return tuple((key, model) for key, model in json.loads(text))


@lru_cache(maxsize=256)
def _pair_set(text: str) -> frozenset[tuple[str, str]]:
    return frozenset(_pair_list(text))


def _get_row(run_id: str, *, lock: bool = False) -> Run:
    query = Run.select().where(Run.id == run_id)
    if lock and database.obj.for_update:
        query = query.for_update()
    row = query.first()
    if row is None:
        raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")
    return row


def _check_status(status: str) -> None:
    if status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}: use one of {', '.join(RUN_STATUSES)}")


def _pair_text(pairs: list[tuple[str, str]], limit: int = 5) -> str:
    shown = ", ".join(f"{key} × {model}" for key, model in pairs[:limit])
    return shown + (f" (+{len(pairs) - limit} more)" if len(pairs) > limit else "")


# -- snapshots ------------------------------------------------------------------------------


@_reconnecting
def save_snapshot(catalog: "Catalog") -> None:
    """Store the catalog body under its digest (insert if absent): a run always grades against
    the exact catalog it was started with, whatever happens to the YAML file afterwards."""
    with _connection():
        (Snapshot.insert(digest=catalog.digest, name=catalog.name, body=_dumps(catalog.body),
                         created_at=_now())
         .on_conflict(action="NOTHING", conflict_target=[Snapshot.digest]).as_rowcount().execute())
    _snapshots.setdefault(catalog.digest, catalog)


@_reconnecting
def load_snapshot(digest: str) -> "Catalog":
    """The catalog snapshotted under ``digest``, parsed once per process and then cached."""
    cached = _snapshots.get(digest)
    if cached is not None:
        return cached
    with _connection():
        body = Snapshot.select(Snapshot.body).where(Snapshot.digest == digest).scalar()
    if body is None:
        raise UnknownSnapshot(f"unknown catalog snapshot {digest!r}: the run's catalog was never saved here")
    from evaljobs.catalog import catalog_from_body  # lazy: catalog parsing must not be needed to import the store

    catalog = catalog_from_body(json.loads(body), source=f"<snapshot {digest[:12]}>")
    return _snapshots.setdefault(digest, catalog)


def _forget_snapshots() -> None:
    """Empty this process's snapshot cache (tests)."""
    _snapshots.clear()


# -- runs -----------------------------------------------------------------------------------


def create_run(catalog: "Catalog", models: list[str], *, strategy: str, context: dict | None = None,
               options: dict | None = None, pairs: list[tuple[str, str]] | None = None) -> RunInfo:
    """Snapshot the catalog and create a pending run expecting every scenario × model pair.

    With ``pairs`` (a rerun) the run expects exactly those pairs instead: each must name a
    catalog scenario and one of ``models``, and every model must have at least one pair.
    They are stored in catalog order and the barrier, ``missing_pairs`` and ``finalize``
    honour them, so the completion contract is the same as for a whole run.
    """
    models = list(models)
    if not models:
        raise ValueError("a run needs at least one model: pass -m MODEL")
    repeated = sorted({m for m in models if models.count(m) > 1})
    if repeated:
        raise ValueError(f"model {repeated[0]!r} is given more than once: pass each model once")
    if not catalog.scenarios:
        raise ValueError(f"catalog {catalog.source} has no scenarios: add at least one")
    chosen = _check_pairs(catalog, models, pairs) if pairs is not None else None
    save_snapshot(catalog)
    row = dict(id="r_" + secrets.token_hex(6), digest=catalog.digest, catalog_name=catalog.name,
               models=_dumps(models), strategy=strategy, status=PENDING,
               expected=len(chosen) if chosen is not None else len(catalog.scenarios) * len(models),
               persisted=0, context=_dumps(context) if context is not None else None,
               options=_dumps(options or {}), created_at=_now(),
               pairs=_dumps(chosen) if chosen is not None else None)
    with _connection():
        Run.insert(**row).as_rowcount().execute()
    return get_run(row["id"])


def _check_pairs(catalog: "Catalog", models: list[str], pairs: list[tuple[str, str]]) -> list[list[str]]:
    wanted = [(str(key), str(model)) for key, model in pairs]
    if not wanted:
        raise ValueError("a run over chosen pairs needs at least one pair")
    seen: set[tuple[str, str]] = set()
    for key, model in wanted:
        if (key, model) in seen:
            raise ValueError(f"pair {key} × {model} is given more than once: pass each pair once")
        seen.add((key, model))
        if key not in catalog:
            raise ValueError(f"pair {key} × {model}: scenario {key!r} is not in catalog {catalog.name!r}")
        if model not in models:
            raise ValueError(f"pair {key} × {model}: model {model!r} is not one of the run's models "
                             f"({', '.join(models)})")
    unused = [m for m in models if m not in {model for _, model in wanted}]
    if unused:
        raise ValueError(f"model {unused[0]!r} has no pair in this run: leave it out of the models")
    return [[key, model] for key in catalog.keys for model in models if (key, model) in seen]


@_reconnecting
def get_run(run_id: str) -> RunInfo:
    with _connection():
        return _info(_get_row(run_id))


@_reconnecting
def list_runs(limit: int = 20, statuses: list[str] | tuple[str, ...] | None = None) -> list[RunInfo]:
    """Newest first (served by the created_at / (status, created_at) indexes)."""
    query = Run.select().order_by(Run.created_at.desc(), Run.id.desc()).limit(limit)
    if statuses:
        for status in statuses:
            _check_status(status)
        query = query.where(Run.status.in_(list(statuses)))
    with _connection():
        return [_info(row) for row in query]


@_reconnecting
def mark_running(run_id: str) -> bool:
    """pending → running; False if the run had already left pending (e.g. a redelivered start)."""
    with _transaction():
        changed = (Run.update(status=RUNNING, started_at=_now())
                   .where((Run.id == run_id) & (Run.status == PENDING)).execute())
        if not changed:
            _get_row(run_id)
    return bool(changed)


@_reconnecting
def set_status(run_id: str, status: str, note: str | None = None) -> None:
    """Set the status (and ``note`` if given); the first start/finish time is kept."""
    _check_status(status)
    now = _now()
    changes: dict[Any, Any] = {Run.status: status}
    if status == RUNNING:
        changes[Run.started_at] = fn.COALESCE(Run.started_at, Run.started_at.to_value(now))
    if status in FINISHED_STATUSES:
        changes[Run.finished_at] = fn.COALESCE(Run.finished_at, Run.finished_at.to_value(now))
    if note is not None:
        changes[Run.note] = note
    with _transaction():
        if not Run.update(changes).where(Run.id == run_id).execute():
            raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")


@_reconnecting
def cancel(run_id: str) -> bool:
    """Cancel a pending or running run; False if it had already finished."""
    with _transaction():
        changed = (Run.update(status=CANCELLED, finished_at=_now())
                   .where((Run.id == run_id) & Run.status.in_([PENDING, RUNNING])).execute())
        if not changed:
            _get_row(run_id)
    return bool(changed)


@_reconnecting
def take_judge_call(run_id: str, cap: int) -> bool:
    """Reserve one LLM-judge call against the run's cap; False once ``cap`` calls were taken.

    One conditional UPDATE, so the cap holds across every worker thread and machine.
    """
    with _transaction():
        taken = (Run.update(judge_calls=Run.judge_calls + 1)
                 .where((Run.id == run_id) & (Run.judge_calls < cap)).execute())
        if not taken:
            _get_row(run_id)
    return bool(taken)


# -- results and the barrier ----------------------------------------------------------------


# -- the per-pair hot path ------------------------------------------------------------------
#
# Every pair runs the two calls below, so they are written as fixed SQL rather than built by
# peewee's query builder: building and compiling a query (and instantiating a model row) cost
# more CPU than SQLite spent running it, which capped a zero-latency run at about 60 pairs/s.
# They touch the same columns and take the same locks as the builder's queries did.

_RUN_COLUMNS = ("id", "digest", "catalog_name", "models", "strategy", "status", "expected", "persisted",
                "context", "options", "created_at", "started_at", "finished_at", "note", "pairs")
_RESULT_COLUMNS = ("run_id", "scenario_key", "model", "status", "score", "scores", "fault", "output",
                   "tool_calls", "duration_ms", "input_tokens", "output_tokens", "cost", "attempts", "error",
                   "details", "cached", "created_at")


@dataclass(frozen=True)
class _HotSQL:
    pair_state: str
    run_facts: str
    insert_result: str
    bump_persisted: str
    persisted: str
    report_results: str


@lru_cache(maxsize=4)
def _hot_sql(param: str) -> _HotSQL:
    p = param
    return _HotSQL(
        pair_state=(f"SELECT {', '.join(_RUN_COLUMNS)}, EXISTS (SELECT 1 FROM result WHERE run_id = {p} "
                    f"AND scenario_key = {p} AND model = {p}) FROM run WHERE id = {p}"),
        run_facts=f"SELECT digest, catalog_name, models, pairs, expected FROM run WHERE id = {p}",
        insert_result=(f"INSERT INTO result ({', '.join(_RESULT_COLUMNS)}) VALUES "
                       f"({', '.join([p] * len(_RESULT_COLUMNS))}) "
                       f"ON CONFLICT (run_id, scenario_key, model) DO NOTHING"),
        bump_persisted=f"UPDATE run SET persisted = persisted + 1 WHERE id = {p} RETURNING persisted",
        persisted=f"SELECT persisted FROM run WHERE id = {p}",
        report_results=(f"SELECT scenario_key, model, status, score, scores, fault, error, duration_ms, cost, "
                        f"cached, input_tokens, output_tokens FROM result WHERE run_id = {p}"),
    )


def _hot(db: peewee.Database) -> _HotSQL:
    return _hot_sql(db.param)


@dataclass(frozen=True)
class _RunFacts:
    """What a run was created with and never changes: safe to keep for the life of the process."""

    digest: str
    catalog_name: str
    models: tuple[str, ...]
    pairs: str | None
    expected: int


_facts: dict[str, _RunFacts] = {}


def _run_facts(db: peewee.Database, run_id: str) -> _RunFacts:
    facts = _facts.get(run_id)
    if facts is None:
        row = db.execute_sql(_hot(db).run_facts, (run_id,)).fetchone()
        if row is None:
            raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")
        digest, catalog_name, models, pairs, expected = row
        facts = _RunFacts(digest, catalog_name, tuple(_json_once(models)), pairs, expected)
        if len(_facts) >= 1024:
            _facts.clear()
        _facts[run_id] = facts
    return facts


@lru_cache(maxsize=1024)
def _json_once(text: str | None) -> Any:
    """JSON columns that never change once a run exists (models, options, context), parsed once.

    Callers must not mutate the result: it is shared.
    """
    return json.loads(text) if text is not None else None


def _datetime(value: Any) -> datetime | None:
    """A timestamp as stored (SQLite gives text, PostgreSQL a datetime), aware in UTC."""
    if value is None or isinstance(value, datetime):
        return _aware(value)
    return _aware(datetime.fromisoformat(value))


@_reconnecting
def pair_state(run_id: str, scenario_key: str, model: str) -> tuple[RunInfo, bool]:
    """The run (without its report) and whether this pair is already recorded: one query.

    What a worker needs before evaluating a pair; ``get_run`` + ``is_recorded`` in one round trip.
    """
    if not isinstance(run_id, str):  # a malformed message; the builder's queries coerced, fixed SQL does not
        raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")
    with _connection() as db:
        row = db.execute_sql(_hot(db).pair_state, (run_id, str(scenario_key), str(model), run_id)).fetchone()
    if row is None:
        raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")
    (id_, digest, catalog_name, models, strategy, status, expected, persisted, context, options, created_at,
     started_at, finished_at, note, pairs, recorded) = row
    info = RunInfo(id=id_, digest=digest, catalog_name=catalog_name, models=list(_json_once(models)),
                   strategy=strategy, status=status, expected=expected, persisted=persisted,
                   context=_json_once(context), options=_json_once(options) or {},
                   created_at=_datetime(created_at), started_at=_datetime(started_at),
                   finished_at=_datetime(finished_at), report=None, note=note,
                   pairs=list(_pair_list(pairs)) if pairs is not None else None)
    return info, bool(recorded)


@_reconnecting
def record_result(run_id: str, result: Result) -> Recorded:
    """Persist one pair's result and count the run's persisted pairs, in one short transaction.

    This is the barrier (invariants 1, 2, 4). The database decides everything:
    the unique (run, scenario, model) constraint makes a redelivered result a no-op,
    and the count is of distinct persisted rows, never of messages handled.

    The count is ``UPDATE run SET persisted = persisted + 1 … RETURNING persisted`` in the
    transaction that inserted the row, and only when it did. The UPDATE locks the run row
    (SQLite's IMMEDIATE transaction already holds the database's write lock), so two
    workers inserting the last two pairs concurrently are serialized there: the second
    waits for the first to commit and, under READ COMMITTED, increments the committed
    value — one returns N-1, the other N, and exactly one call returns ``completed=True``.
    A COUNT(*) instead made each insert O(pairs so far). The pair is checked against what
    the run was created with (digest, models, pairs), which never changes, so that needs
    no lock.
    """
    with _connection() as db:
        facts = _run_facts(db, run_id)
    unknown_scenario = result.scenario_key not in load_snapshot(facts.digest)
    if unknown_scenario or result.model not in facts.models:
        what = (f"scenario {result.scenario_key!r} is not in catalog {facts.catalog_name!r}"
                if unknown_scenario else
                f"model {result.model!r} is not one of the run's models ({', '.join(facts.models)})")
        raise UnexpectedPair(f"run {run_id} does not expect scenario {result.scenario_key!r} × model "
                             f"{result.model!r}: {what}")
    if facts.pairs is not None and result.pair not in _pair_set(facts.pairs):
        raise UnexpectedPair(f"run {run_id} does not expect scenario {result.scenario_key!r} × model "
                             f"{result.model!r}: the run covers only {facts.expected} chosen pairs")
    with _transaction() as db:
        sql = _hot(db)
        if not _insert_result(db, sql, run_id, result):
            persisted = db.execute_sql(sql.persisted, (run_id,)).fetchone()[0]
            return Recorded(inserted=False, completed=False, persisted=persisted, expected=facts.expected)
        persisted = db.execute_sql(sql.bump_persisted, (run_id,)).fetchone()[0]
    return Recorded(inserted=True, completed=persisted == facts.expected, persisted=persisted,
                    expected=facts.expected)


def _capped(value: Any, cap: int = OUTPUT_CAP) -> Any:
    """``value`` with every string longer than ``cap`` cut to ``cap`` (like ``Result.output``).

    ``details`` keeps the conversation transcript and ``tool_calls`` the tools' answers; without
    this, one 50 MB provider answer was stored whole in ``details.messages`` although the output
    column was capped.
    """
    if isinstance(value, str):
        return value if len(value) <= cap else value[:cap] + "…[truncated]"
    if isinstance(value, dict):
        return {key: _capped(item, cap) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_capped(item, cap) for item in value]
    return value


def _insert_result(db: peewee.Database, sql: _HotSQL, run_id: str, result: Result) -> bool:
    """INSERT … ON CONFLICT DO NOTHING on the unique constraint; True if a row was inserted."""
    params = (run_id, result.scenario_key, result.model, result.status, float(result.score),
              _dumps(result.scores), result.fault, result.output or "", _dumps(_capped(result.tool_calls)),
              int(round(result.duration_ms or 0)), int(result.input_tokens or 0), int(result.output_tokens or 0),
              float(result.cost or 0.0), int(result.attempts), result.error, _dumps(_capped(result.details)),
              bool(result.cached), _now())
    return db.execute_sql(sql.insert_result, params).rowcount == 1


def _results_query(run_id: str) -> peewee.Select:
    return ResultRow.select().where(ResultRow.run == run_id)


def _progress_query(run_id: str) -> peewee.Select:
    return (ResultRow.select(ResultRow.status, fn.COUNT(ResultRow.id).alias("n"))
            .where(ResultRow.run == run_id).group_by(ResultRow.status))


def _pairs_query(run_id: str) -> peewee.Select:
    return ResultRow.select(ResultRow.scenario_key, ResultRow.model).where(ResultRow.run == run_id)


def _to_result(row: ResultRow) -> Result:
    return Result(scenario_key=row.scenario_key, model=row.model, status=row.status, score=row.score,
                  scores=_loads(row.scores), fault=row.fault, output=row.output,
                  tool_calls=_loads(row.tool_calls), duration_ms=row.duration_ms,
                  input_tokens=row.input_tokens, output_tokens=row.output_tokens, cost=row.cost,
                  attempts=row.attempts, error=row.error, details=_loads(row.details),
                  cached=bool(row.cached))


@_reconnecting
def is_recorded(run_id: str, scenario_key: str, model: str) -> bool:
    query = ResultRow.select(ResultRow.id).where(
        (ResultRow.run == run_id) & (ResultRow.scenario_key == scenario_key) & (ResultRow.model == model))
    with _connection():
        return query.exists()


@_reconnecting
def list_results(run_id: str) -> list[Result]:
    """The run's results ordered by (scenario key, model).

    Sorted in Python, so the order is the same on every backend and collation.
    """
    with _connection():
        _get_row(run_id)
        rows = list(_results_query(run_id))
    return [_to_result(row) for row in sorted(rows, key=lambda r: (r.scenario_key, r.model))]


@_reconnecting
def missing_pairs(run_id: str) -> list[tuple[str, str]]:
    """Expected pairs with no persisted row, in catalog order (scenario-major, run model order)."""
    with _connection():
        return _missing(_get_row(run_id))


def _missing(run: Run) -> list[tuple[str, str]]:
    done = set(_pairs_query(run.id).tuples())
    return [pair for pair in _expected(run) if pair not in done]


def _expected(run: Run) -> list[tuple[str, str]]:
    if run.pairs is not None:
        return list(_pair_list(run.pairs))
    models = _loads(run.models)
    return [(key, model) for key in load_snapshot(run.digest).keys for model in models]


def expected_pairs(run_id: str) -> list[tuple[str, str]]:
    """Every pair the run expects, in catalog order (its chosen pairs for a rerun)."""
    with _connection():
        return _expected(_get_row(run_id))


def pair_statuses(run_id: str) -> dict[tuple[str, str], str]:
    """(scenario key, model) → status of each persisted result: one indexed query, no result bodies."""
    query = (ResultRow.select(ResultRow.scenario_key, ResultRow.model, ResultRow.status)
             .where(ResultRow.run == run_id))
    with _connection():
        _get_row(run_id)
        return {(key, model): status for key, model, status in query.tuples()}


@_reconnecting
def progress(run_id: str) -> dict[str, int]:
    """expected / persisted / passed / failed / errored, from one indexed GROUP BY."""
    with _connection():
        run = _get_row(run_id)
        counts = {status: n for status, n in _progress_query(run_id).tuples()}
    return {"expected": run.expected, "persisted": sum(counts.values()), "passed": counts.get(PASSED, 0),
            "failed": counts.get(FAILED, 0), "errored": counts.get(ERRORED, 0)}


# -- finalize -------------------------------------------------------------------------------


@_reconnecting
def finalize(run_id: str) -> Finalized:
    """Build, store and return the run's one report (invariant 3); idempotent.

    Finalize may be sent more than once. The run row is locked, an existing report
    is returned as is, and the report is written with ``WHERE report IS NULL``, so
    concurrent finalizers produce exactly one report and all return it.
    """
    with _transaction():
        run = _get_row(run_id, lock=True)
        if run.report is not None:
            return Finalized(report=_loads(run.report), created=False)
        results = _report_results(run_id)
        if len(results) != run.expected:
            missing = _missing(run)
            raise Incomplete(f"run {run_id} has {len(results)} of {run.expected} pairs; "
                             f"missing: {_pair_text(missing)}")
        finished = _now()
        report = build_report(_report_run(run, finished), results)
        errored = sum(1 for r in results if r.status == ERRORED)
        status = COMPLETE if not errored else FAILED_RUN if errored == len(results) else PARTIAL
        written = (Run.update(report=_dumps(report), report_at=finished, finished_at=finished, status=status,
                              persisted=len(results))
                   .where((Run.id == run_id) & Run.report.is_null()).execute())
        if not written:  # unreachable while the row lock holds; never write a second report
            return Finalized(report=_loads(_get_row(run_id).report), created=False)
    return Finalized(report=report, created=True)


def _report_results(run_id: str) -> list[Result]:
    """The run's results with what the report reads: no output, transcript or tool answers.

    Fixed SQL, rows fetched at once as plain tuples, each distinct ``scores`` text parsed once:
    between the last result and the report, building a model row and parsing three JSON columns
    for each of 1,000 results took 130 ms; peewee's row iteration alone, 20 ms.
    """
    db = _bound()
    rows = db.execute_sql(_hot(db).report_results, (run_id,)).fetchall()
    parsed: dict[str, dict[str, float]] = {}

    def scores_of(text: str) -> dict[str, float]:
        if text == "{}":
            return {}
        value = parsed.get(text)
        if value is None:
            value = parsed[text] = json.loads(text)
        return dict(value)  # a copy each: a Result's scores are its own

    results = [Result(scenario_key=key, model=model, status=status, score=score, scores=scores_of(scores),
                      fault=fault, error=error, duration_ms=duration_ms, cost=cost, cached=bool(cached),
                      input_tokens=input_tokens, output_tokens=output_tokens)
               for key, model, status, score, scores, fault, error, duration_ms, cost, cached, input_tokens,
               output_tokens in rows]
    _add_judge_details(run_id, results)
    return results


def _add_judge_details(run_id: str, results: list[Result]) -> None:
    """The judge's prompt, raw answer, score and reason go into the report: read ``details`` only for
    the pairs a judge was asked about (runs without a judge read nothing more)."""
    judged = {(r.scenario_key, r.model): r for r in results
              if "llm_judge" in r.scores or r.fault == "judge_unavailable"}
    if not judged:
        return
    query = (ResultRow.select(ResultRow.scenario_key, ResultRow.model, ResultRow.details)
             .where(ResultRow.run == run_id).tuples())
    for key, model, details in query:
        result = judged.get((key, model))
        if result is not None:
            judge = (_loads(details) or {}).get("judge")
            if isinstance(judge, dict):
                result.details = {"judge": judge}


def _report_run(run: Run, finished: datetime) -> dict[str, Any]:
    return {"id": run.id, "catalog_name": run.catalog_name, "digest": run.digest,
            "models": _loads(run.models), "strategy": run.strategy, "expected": run.expected,
            "created_at": _iso(run.created_at), "started_at": _iso(run.started_at),
            "finished_at": _iso(finished), "context": _loads(run.context), "options": _loads(run.options)}


# -- response cache (``--cache``) -----------------------------------------------------------


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
    if getattr(db, "evaljobs_cache_ready", False):
        return
    with _transaction():
        if isinstance(db, peewee.PostgresqlDatabase):
            db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_PG_SCHEMA_LOCK,))
        db.create_tables([CacheEntry], safe=True)
    db.evaljobs_cache_ready = True


def cache_get(key: str, ttl: float) -> str | None:
    """The cached value under ``key`` if it was written less than ``ttl`` seconds ago (primary-key lookup)."""
    _ensure_cache()
    cutoff = _now() - timedelta(seconds=ttl)
    query = (CacheEntry.select(CacheEntry.value)
             .where((CacheEntry.key == key) & (CacheEntry.created_at >= cutoff)))
    with _connection():
        return query.scalar()


def cache_put(key: str, value: str, *, provider: str, model: str) -> None:
    """Store (or refresh) ``value`` under ``key``; concurrent writers of the same key are harmless."""
    _ensure_cache()
    row = dict(key=key, provider=provider, model=model, value=value, created_at=_now())
    with _connection():
        (CacheEntry.insert(**row)
         .on_conflict(conflict_target=[CacheEntry.key],
                      preserve=[CacheEntry.value, CacheEntry.created_at, CacheEntry.provider,
                                CacheEntry.model])
         .as_rowcount().execute())


def cache_clear(older_than: float | None = None) -> int:
    """Delete cached answers written more than ``older_than`` seconds ago (all with None).

    Returns how many were deleted.
    """
    _ensure_cache()
    query = CacheEntry.delete()
    if older_than is not None:
        query = query.where(CacheEntry.created_at < _now() - timedelta(seconds=older_than))
    with _transaction():
        return query.execute()
