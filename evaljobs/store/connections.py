"""Binding the store to a database, and the short-lived connections every public call uses.

SQLite (WAL, the embedded default) and PostgreSQL (several machines) through
peewee. Every public store function opens a connection for one short statement
or transaction (:func:`_connection`, :func:`_transaction`) and hands it back
before returning, so no connection is held across a provider call and a
worker's connections track the work in flight, not its thread count.
:func:`_reconnecting` carries a call through a database restart.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, ParamSpec, TypeVar, Union, cast
from urllib.parse import urlsplit

import peewee
from playhouse.pool import PooledPostgresqlDatabase

from evaljobs import config
from evaljobs.config import Settings
from evaljobs.store.drivers import attach_psycopg2
from evaljobs.store.errors import DatabaseUnavailable, NoDatabase, StorageFailed, StoreError, redact
from evaljobs.store.schema import database, upgrade_tables

DEFAULT_URL = "sqlite:///.evaljobs/evaljobs.db"
#: Seconds a SQLite writer waits for the write lock before giving up.
SQLITE_BUSY_SECONDS = 30
#: Seconds to wait for a PostgreSQL server that does not answer.
PG_CONNECT_TIMEOUT = 10
#: Seconds a call keeps retrying when a database this process has reached before drops its
#: connections or stops answering (a restart, a failover), before it gives up with one line.
#: The default of ``Settings.db_reconnect_seconds``; :func:`connect` sets it per database.
RECONNECT_SECONDS = Settings.db_reconnect_seconds
_PG_POOL_SIZE = 32

_bind_lock = threading.RLock()


class _Binding:
    """What the store keeps on each database it binds: set by :func:`_open` and :func:`connect`,
    read by every store module (declared here so the attributes are typed, not set ad hoc)."""

    evaljobs_url: str
    evaljobs_pid: int
    evaljobs_reached: bool
    evaljobs_reconnect_seconds: float
    evaljobs_schema_log: list[str]
    #: The optional tables this process has created on this database (cache, batches, governor limits,
    #: run leases).
    evaljobs_cache_ready: bool = False
    evaljobs_batches_ready: bool = False
    evaljobs_governor_limits_ready: bool = False
    evaljobs_leases_ready: bool = False


class BoundSqliteDatabase(_Binding, peewee.SqliteDatabase):
    """A SQLite database bound by :func:`connect`."""


class BoundPostgresqlDatabase(_Binding, PooledPostgresqlDatabase):
    """A PostgreSQL database (a connection pool) bound by :func:`connect`."""


BoundDatabase = Union[BoundSqliteDatabase, BoundPostgresqlDatabase]


def connect(url: str | None = None, *, settings: Settings | None = None,
            reconnect_seconds: float | None = None, create: bool = True) -> peewee.Database:
    """Bind the store to ``url`` (else the settings' ``database_url``, else a SQLite file under
    ``.evaljobs/``).

    Creates the schema on first use. Binding the URL already bound is a no-op; another URL rebinds.
    ``reconnect_seconds`` (default: the settings' ``db_reconnect_seconds``) is how long a call
    keeps retrying through a lost connection (see :func:`_reconnecting`). ``create`` False (a command
    that only reads): a SQLite file that does not exist is :class:`NoDatabase`, not created.
    """
    settings = settings or config.settings()
    url = url or settings.database_url or DEFAULT_URL
    if not create:
        refuse_a_missing_file(url)
    if reconnect_seconds is None:
        reconnect_seconds = settings.db_reconnect_seconds
    with _bind_lock:
        current = database.obj
        if current is not None and current.evaljobs_url == url:
            _adopt(current)
            current.evaljobs_reconnect_seconds = float(reconnect_seconds)
            return current
        db = _open(url)
        db.evaljobs_reconnect_seconds = float(reconnect_seconds)
        database.initialize(db)
        try:
            db.evaljobs_schema_log = upgrade_tables(db, _transaction, url)
        except BaseException as exc:
            database.initialize(current)
            _retire(db)
            failed = storage_failure(db, exc)
            if failed is not None:
                raise failed from None
            raise
        _retire(current)
        return db


def refuse_a_missing_file(url: str, reader: str = "a command that only reads") -> None:
    """:class:`NoDatabase` (one line) when ``url`` is SQLite and names no file: ``reader`` creates none."""
    if not url.startswith("sqlite:///"):
        return
    path = Path(url[len("sqlite:///"):].split("?", 1)[0])
    if str(path) not in ("", ":memory:") and not path.is_file():
        raise NoDatabase(f"{url}: no database at {path.resolve()} ({reader} creates none); check --db or "
                         "EVALJOBS_DATABASE_URL, or run something first (evaljobs demo, evaljobs run …)")


def upgrade() -> list[str]:
    """Create or upgrade the schema of the bound database; returns what it did (empty: up to date).

    ``connect`` already upgrades on first use, so this also reports what that did
    (each change is reported once).
    """
    db = _bound()
    with _bind_lock:
        done = db.evaljobs_schema_log + upgrade_tables(db, _transaction, db.evaljobs_url)
        db.evaljobs_schema_log = []
    return done


_held = threading.local()
#: One SQLite writer at a time per process (see ``_transaction``); re-entrant for nested transactions.
_sqlite_writers = threading.RLock()


def _fresh_locks_after_fork() -> None:
    """A forked child starts with the store's locks free. A lock another thread of the parent held at
    the fork (a lease renewal retrying through a lost database holds ``_bind_lock``) would stay held in
    the child for ever, with no thread left to release it: its first ``connect`` would hang. The
    logging module does the same for its own locks."""
    global _bind_lock, _sqlite_writers
    _bind_lock = threading.RLock()
    _sqlite_writers = threading.RLock()


os.register_at_fork(after_in_child=_fresh_locks_after_fork)


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
    """:func:`hold_connection` for the duration of a block, then close this thread's connection (unless an
    enclosing block or the thread's own :func:`hold_connection` holds it still)."""
    outer = getattr(_held, "db", None)
    hold_connection()
    try:
        yield
    finally:
        _held.db = outer
        db = database.obj
        if db is not None and db is not outer and not db.is_closed() and not db.in_transaction():
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


def _open(url: str) -> BoundDatabase:
    scheme = urlsplit(url).scheme
    db: BoundDatabase
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


def _open_sqlite(url: str) -> BoundSqliteDatabase:
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
    return BoundSqliteDatabase(path, pragmas=pragmas, timeout=SQLITE_BUSY_SECONDS)


def _open_postgres(url: str) -> BoundPostgresqlDatabase:
    try:  # an optional extra (evaljobs[postgres]), imported only for its URL (evaljobs.store.drivers)
        attach_psycopg2()
    except ImportError:
        raise StoreError(f"{redact(url)} needs the PostgreSQL driver: "
                         "pip install 'evaljobs[postgres]'") from None
    dsn = "postgresql://" + url.split("://", 1)[1]
    # A pool, because a fresh TCP connection per short transaction would cost more than the
    # transaction; connections still go back to it after every call.
    return BoundPostgresqlDatabase(dsn, max_connections=_PG_POOL_SIZE, stale_timeout=300, timeout=30,
                                   connect_timeout=PG_CONNECT_TIMEOUT)


def _retire(db: BoundDatabase | None) -> None:
    if db is None:
        return
    if isinstance(db, PooledPostgresqlDatabase) and db.evaljobs_pid == os.getpid():
        db.close_all()
    else:
        db.dispose()


def _adopt(db: BoundDatabase) -> None:
    """After a fork, forget (never close) the parent's connections: they share its sockets."""
    if db.evaljobs_pid != os.getpid():
        db.dispose()
        db.evaljobs_pid = os.getpid()


def _bound() -> BoundDatabase:
    db: BoundDatabase | None = database.obj
    if db is None:
        db = cast(BoundDatabase, connect())  # connect() binds what _open() made
        return db
    if db.evaljobs_pid != os.getpid():
        with _bind_lock:
            _adopt(db)
    return db


def _open_connection(db: BoundDatabase) -> None:
    """Open ``db``'s connection for this thread. On SQLite, "database is locked" while opening is
    waited out (up to ``SQLITE_BUSY_SECONDS``, as a locked write is): the first connection of each
    process switches the file to WAL, and SQLite refuses that switch at once, without its busy handler,
    while another process is doing the same — two worker processes starting together on a new
    database failed one time in 25."""
    if not isinstance(db, peewee.SqliteDatabase):
        db.connect()
        return
    deadline = time.monotonic() + SQLITE_BUSY_SECONDS
    pause = 0.005
    while True:
        try:
            db.connect()
            return
        except peewee.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


@contextmanager
def _connection() -> Iterator[BoundDatabase]:
    """This thread's connection for the duration of one public call (reused if already open)."""
    db = _bound()
    opened = db.is_closed()
    if opened:
        try:
            _open_connection(db)
        except (peewee.OperationalError, peewee.InterfaceError, peewee.ImproperlyConfigured) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DatabaseUnavailable(f"cannot reach database {redact(db.evaljobs_url)}: {reason}") from None
        db.evaljobs_reached = True
    try:
        yield db
    except (peewee.OperationalError, peewee.InterfaceError) as exc:
        failed = storage_failure(db, exc)  # a full disk is one line naming the database, not a traceback
        if failed is not None:
            raise failed from None
        raise
    finally:
        if opened and not db.is_closed() and not _holds(db):
            db.close()


@contextmanager
def _transaction() -> Iterator[BoundDatabase]:
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


_impatient = threading.local()


@contextmanager
def without_waiting() -> Iterator[None]:
    """Calls in this block fail at once on a lost database instead of retrying for ``reconnect_seconds``.

    Why: a caller that must answer now — a ``/readyz`` probe, a Prometheus scrape — waited out the
    whole reconnect window (60 s) while the database was down, so the probe timed out instead of
    saying why, and the scrape lost every other metric with it.
    """
    previous = getattr(_impatient, "on", False)
    _impatient.on = True
    try:
        yield
    finally:
        _impatient.on = previous


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _reconnecting(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``fn`` again when the database connection is lost mid-call (a restart, a failover).

    Safe because every public call is one short statement or transaction that either
    committed or rolled back, and each is idempotent: insert-if-absent on the unique
    pair, conditional updates, reads. So a call repeated after its connection dropped
    cannot double a result; without this, a worker whose database restarted between a
    provider call and its commit failed the message and evaluated the pair again.

    Retries for up to the bound database's ``reconnect_seconds`` (see :func:`connect`) and only a database
    this process has reached before (a wrong URL still fails at once), only as the outermost call (a nested
    call inside a transaction leaves the retry to its caller), and on SQLite only a lock timeout. Giving up is
    one line naming the database.
    """

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        db = database.obj
        if db is not None and not db.is_closed() and db.in_transaction():
            return fn(*args, **kwargs)
        deadline, pause = None, 0.05
        while True:
            try:
                return fn(*args, **kwargs)
            except (DatabaseUnavailable, peewee.OperationalError, peewee.InterfaceError) as exc:
                db = database.obj
                if db is None or not getattr(db, "evaljobs_reached", False) or not _is_outage(db, exc) \
                        or getattr(_impatient, "on", False):
                    raise
                reason = " ".join(str(exc).split()) or type(exc).__name__
                now = time.monotonic()
                patience = getattr(db, "evaljobs_reconnect_seconds", RECONNECT_SECONDS)
                if deadline is None:
                    deadline = now + patience
                    _logger.warning("database %s: %s; retrying %s for up to %g s", redact(db.evaljobs_url),
                                    reason[:200], fn.__name__, patience)
                if now >= deadline:
                    raise DatabaseUnavailable(f"lost database {redact(db.evaljobs_url)} for {patience:g} s "
                                              f"({fn.__name__}): {reason[:300]}") from None
                time.sleep(min(pause, max(0.0, deadline - now)))
                pause = min(pause * 2, 1.0)

    return wrapper


#: SQLite / PostgreSQL messages of storage that refuses writes (not an outage: waiting does not help).
_STORAGE_FAILURES = ("database or disk is full", "disk i/o error", "no space left on device",
                     "attempt to write a readonly database", "could not extend file")


def storage_failure(db: peewee.Database | None, exc: BaseException) -> StorageFailed | None:
    """A one-line :class:`StorageFailed` naming the database and the cause, if ``exc`` is one."""
    # SQLite rolls a transaction back itself on SQLITE_FULL, so peewee's own rollback then fails
    # ("cannot rollback - no transaction is active") with the real cause as its context.
    cause: BaseException | None = exc
    while cause is not None:
        reason = " ".join(str(cause).split())
        if any(mark in reason.lower() for mark in _STORAGE_FAILURES):
            break
        cause = cause.__cause__ or cause.__context__
    else:
        return None
    where = redact(getattr(db, "evaljobs_url", None) or getattr(db, "database", None) or "the database")
    return StorageFailed(f"database {where}: {reason[:200]} (the failed write was rolled back); free space "
                         "(or fix the disk), then run the command again, or `evaljobs recover RUN` for a run "
                         "already started")


def _is_outage(db: peewee.Database, exc: Exception) -> bool:
    if isinstance(exc, DatabaseUnavailable) or isinstance(db, peewee.PostgresqlDatabase):
        return True  # connection lost, admin shutdown, serialization failure, deadlock: all transient
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def is_sqlite() -> bool:
    """True when this process's database is SQLite.

    Readers that page by row id ask this: on SQLite (one writer) ids become visible in
    order, so "after id N" misses nothing; on PostgreSQL a lower id can commit after a
    higher one, so they look back a little.
    """
    return isinstance(_bound(), peewee.SqliteDatabase)


#: This thread's connection for one call, as every store function holds it (reused if already open,
#: handed back after): for a host or a test that reads the tables directly.
connection = _connection
#: Retry a function of short, idempotent statements through a lost connection (see ``_reconnecting``).
reconnecting = _reconnecting
