"""The schema: the tables, how their columns are encoded, and creating or upgrading them.

Everything here works on a database handed in (or the ``database`` proxy the
tables are bound to); opening connections is :mod:`evaljobs.store.connections`'
job, so this module imports nothing else from the store.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, ContextManager, overload

import peewee
from peewee import (
    SQL,
    BigIntegerField,
    BooleanField,
    CharField,
    DatabaseProxy,
    DateTimeField,
    DoubleField,
    ForeignKeyField,
    IntegerField,
    Model,
    TextField,
    fn,
)

from evaljobs.store.errors import StoreError, redact

#: Schema version of the ``label`` table (human review, issue 43). Its own constant so that the step can be
#: renumbered when another branch takes the next version first: only this number and its description move.
LABELS_SCHEMA = 7
SCHEMA_VERSION = LABELS_SCHEMA
#: What each schema version added (recorded in ``schema_version.description``).
_SCHEMA_CHANGES = {1: "initial schema", 2: "run.pairs: runs over an explicit subset of pairs (reruns)",
                   3: "result.cost may be NULL (unknown price); result.ttft_ms and result.latency_ms",
                   4: "epochs: run.epochs, result.epoch; one row per (run, scenario, model, epoch); "
                      "result.reused_from (--reuse)",
                   5: "result.scenario_digest (compare: a changed scenario is no regression); "
                      "run.scenario_order (reports list scenarios as the catalog does)",
                   6: "result.cache_read_tokens, cache_write_tokens, reasoning_tokens, cache_saving "
                      "(prompt caching priced apart), result.answered_by (the model version that answered)",
                   LABELS_SCHEMA: "label: a reviewer's verdict on a pair, beside the machine's "
                                  "(never over it)"}
#: The unique index of schema versions 1-3 (one row per (run, scenario, model)); version 4 replaces it.
_V3_UNIQUE_INDEX = "resultrow_run_id_scenario_key_model"
PG_SCHEMA_LOCK = 0x65766A62  # arbitrary advisory-lock key: "evjb"

PENDING, RUNNING, COMPLETE, PARTIAL, FAILED_RUN, CANCELLED = (
    "pending", "running", "complete", "partial", "failed", "cancelled")
#: Stopped by SIGINT/SIGTERM in the process that ran it: what finished is kept, ``recover`` resumes it.
INTERRUPTED = "interrupted"
RUN_STATUSES = (PENDING, RUNNING, COMPLETE, PARTIAL, FAILED_RUN, CANCELLED, INTERRUPTED)
#: Statuses of a run that still has work to do (``recover`` looks at these).
UNFINISHED_STATUSES = (PENDING, RUNNING, INTERRUPTED)
FINISHED_STATUSES = (COMPLETE, PARTIAL, FAILED_RUN, CANCELLED)

#: The tables are bound to this proxy; :func:`evaljobs.store.connect` points it at a database.
database = DatabaseProxy()


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
    #: Since schema 4 an entry may be [scenario_key, model, epoch] (a two-item entry is epoch 0).
    pairs = TextField(null=True)
    #: How many times each scenario × model pair is evaluated (``--epochs``); the whole product
    #: expects scenarios × models × epochs rows.
    epochs = IntegerField(default=1, constraints=[SQL("DEFAULT 1")])
    #: JSON list of the catalog's scenario keys in the order its author wrote them (the snapshot keeps
    #: them sorted by key, so its digest does not depend on the order); NULL before schema 5: key order.
    scenario_order = TextField(null=True)

    class Meta:
        table_name = "run"
        indexes = ((("created_at",), False), (("status", "created_at"), False))


class ResultRow(_Table):
    #: peewee's implicit primary key (no field declares one), declared for the type checker only.
    id: peewee.AutoField[int]
    run = ForeignKeyField(Run, column_name="run_id", on_delete="CASCADE", index=False)
    scenario_key = TextField()
    model = TextField()
    status = CharField(max_length=16)
    score = DoubleField()
    scores = TextField()
    fault = TextField(null=True)
    output = TextField()
    tool_calls = TextField()
    # 64-bit on both backends (SQLite's INTEGER always is; PostgreSQL's integer is 32-bit): a pair's
    # token counts may pass 2^31 (a provider reporting 3e9 tokens failed the insert).
    duration_ms = BigIntegerField()
    input_tokens = BigIntegerField()
    output_tokens = BigIntegerField()
    #: NULL when the model's price is unknown (never stored as $0).
    cost = DoubleField(null=True)
    attempts = IntegerField()
    error = TextField(null=True)
    details = TextField()
    cached = BooleanField()
    created_at = DateTimeField()
    #: Time to the first streamed token of the pair's first provider call, when streamed.
    ttft_ms = DoubleField(null=True)
    #: Sum of the pair's provider call latencies (the pair's duration also counts tools and grading).
    latency_ms = DoubleField(null=True)
    #: Which repetition of the pair (0 … run.epochs-1); rows from before schema 4 are epoch 0.
    epoch = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    #: ``--reuse``: the run that evaluated this row (it was copied, not evaluated, in this run).
    reused_from = CharField(max_length=32, null=True)
    #: The ``sha256:`` digest of the scenario the pair was graded against; NULL for rows stored before
    #: schema 5 (their run's snapshot tells it).
    scenario_digest = CharField(max_length=80, null=True)
    #: Parts of input_tokens read from / written to the provider's prompt cache (0 before schema 6).
    cache_read_tokens = BigIntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    cache_write_tokens = BigIntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    #: Part of output_tokens spent reasoning; NULL when the provider did not report it.
    reasoning_tokens = BigIntegerField(null=True)
    #: What prompt caching saved (USD); NULL when a price was unknown (rows before schema 6: 0, no caching).
    cache_saving = DoubleField(null=True, default=0.0, constraints=[SQL("DEFAULT 0")])
    #: The model version(s) the provider said answered; NULL when it did not say.
    answered_by = TextField(null=True)

    class Meta:
        table_name = "result"
        # The one index a run's results need: it enforces invariant 1 and serves every
        # per-run query (WHERE run_id = ?), so nothing here scans the table.
        indexes = ((("run", "scenario_key", "model", "epoch"), True),)


class Label(_Table):
    """A reviewer's verdict on one pair (schema ``LABELS_SCHEMA``), kept beside the result row, never in it.

    Not a foreign key to the run: a label outlives the run it was given in (it carries forward to the same
    answer in later runs, by ``scenario_digest``, ``model`` and ``output_digest``, and is exported to a
    repository). One label per pair: a reviewer changing their mind replaces it.
    """

    id: peewee.AutoField[int]
    run_id = CharField(max_length=32)
    scenario_key = TextField()
    model = TextField()
    epoch = IntegerField(default=0)
    #: The scenario the answer was graded against (the result row's); NULL when the row did not keep it.
    scenario_digest = CharField(max_length=80, null=True)
    #: sha256 of the normalised answer (``evaljobs.store.labels.output_digest``).
    output_digest = CharField(max_length=64)
    verdict = CharField(max_length=8)  # "pass" | "fail"
    score = DoubleField(null=True)
    comment = TextField(null=True)
    reviewer = TextField()
    created_at = DateTimeField()

    class Meta:
        table_name = "label"
        indexes = ((("run_id", "scenario_key", "model", "epoch"), True),
                   (("scenario_digest", "model", "output_digest"), False))


_TABLES = (SchemaVersion, Snapshot, Run, ResultRow, Label)


# -- column encoding ------------------------------------------------------------------------


def _now() -> datetime:
    """Naive UTC: what both backends store without conversion."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


@overload
def _aware(value: datetime) -> datetime: ...
@overload
def _aware(value: None) -> None: ...
@overload
def _aware(value: datetime | None) -> datetime | None: ...
def _aware(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=timezone.utc) if value is not None else None


def _iso(value: datetime | None) -> str | None:
    return _aware(value).isoformat() if value is not None else None


def _dumps(value: Any) -> str:
    return _COMPACT(value)


#: ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` without an encoder built per call
#: (``json.dumps`` builds one whenever it is given options): a stored result is three of them.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _loads(text: str | None) -> Any:
    return json.loads(text) if text is not None else None


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


# -- creating and upgrading ----------------------------------------------------------------


def upgrade_tables(db: peewee.Database, transaction: Callable[[], ContextManager[Any]],
                   url: str) -> list[str]:
    """Create the missing tables and columns of ``db`` (opened from ``url``) in one ``transaction()``;
    returns what it did."""
    done: list[str] = []
    with transaction():
        if isinstance(db, peewee.PostgresqlDatabase):
            # CREATE TABLE IF NOT EXISTS races with itself on PostgreSQL; serialize first users.
            db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (PG_SCHEMA_LOCK,))
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
            raise StoreError(f"database {redact(url)} has schema version {current}, newer than "
                             f"this evaljobs ({SCHEMA_VERSION}): upgrade evaljobs")
        if Run._meta.table_name in existing:
            done += _add_missing_columns(db, Run, {"pairs": "TEXT", "epochs": "INTEGER NOT NULL DEFAULT 1",
                                                   "scenario_order": "TEXT"})
        if ResultRow._meta.table_name in existing:
            real = "DOUBLE PRECISION" if isinstance(db, peewee.PostgresqlDatabase) else "REAL"
            big = "BIGINT" if isinstance(db, peewee.PostgresqlDatabase) else "INTEGER"
            done += _add_missing_columns(db, ResultRow, {"ttft_ms": real, "latency_ms": real,
                                                         "epoch": "INTEGER NOT NULL DEFAULT 0",
                                                         "reused_from": "VARCHAR(32)",
                                                         "scenario_digest": "VARCHAR(80)",
                                                         "cache_read_tokens": f"{big} NOT NULL DEFAULT 0",
                                                         "cache_write_tokens": f"{big} NOT NULL DEFAULT 0",
                                                         "reasoning_tokens": big,
                                                         "cache_saving": f"{real} DEFAULT 0",
                                                         "answered_by": "TEXT"})
            done += _drop_not_null(db, ResultRow, "cost")
            done += _widen_to_bigint(db, ResultRow, ("duration_ms", "input_tokens", "output_tokens"))
            done += _epoch_in_unique_index(db)
        if current < SCHEMA_VERSION:
            SchemaVersion.create(version=SCHEMA_VERSION, applied_at=_now(),
                                 description=_SCHEMA_CHANGES[SCHEMA_VERSION] if current else "initial schema")
            done.append(f"recorded schema version {SCHEMA_VERSION}")
    return done


def _epoch_in_unique_index(db: peewee.Database) -> list[str]:
    """Schema 4: the unique key of a result gains ``epoch`` (existing rows are epoch 0, so no clash).

    The new index is built before the old one goes, so the (run, scenario, model) rows stay unique
    throughout; both statements run in the upgrade's one transaction.
    """
    names = {index.name for index in db.get_indexes(ResultRow._meta.table_name)}
    if _V3_UNIQUE_INDEX not in names:
        return []
    new = "resultrow_run_id_scenario_key_model_epoch"  # what a fresh database gets from the model
    if new not in names:
        db.execute_sql(
            f'CREATE UNIQUE INDEX "{new}" ON "result" ("run_id", "scenario_key", "model", "epoch")'
        )
    db.execute_sql(f'DROP INDEX "{_V3_UNIQUE_INDEX}"')
    return ["unique index of result is (run_id, scenario_key, model, epoch)"]


def _drop_not_null(db: peewee.Database, table: type[Model], column: str) -> list[str]:
    """Let a column hold NULL (SQLite cannot ALTER a column: playhouse's migrator rebuilds the table)."""
    found = [c for c in db.get_columns(table._meta.table_name) if c.name == column]
    if not found or found[0].null:
        return []
    # Only when an old table is upgraded: playhouse.migrate imports psycopg2 (start-up time of SQLite).
    from playhouse.migrate import PostgresqlMigrator, SqliteMigrator, migrate

    migrator = PostgresqlMigrator(db) if isinstance(db, peewee.PostgresqlDatabase) else SqliteMigrator(db)
    migrate(migrator.drop_not_null(table._meta.table_name, column))
    return [f"{table._meta.table_name}.{column} may be NULL"]


def _widen_to_bigint(db: peewee.Database, table: type[Model], columns: tuple[str, ...]) -> list[str]:
    """PostgreSQL: ``integer`` columns of an older database become ``bigint`` (SQLite's are 64-bit already).

    Not a schema version of its own: a ``bigint`` column reads and writes the same for an older
    evaljobs, so the change needs no version gate and is done wherever it is still missing.
    """
    if not isinstance(db, peewee.PostgresqlDatabase):
        return []
    name = table._meta.table_name
    narrow = [c.name for c in db.get_columns(name) if c.name in columns and c.data_type.lower() == "integer"]
    for column in narrow:
        db.execute_sql(f'ALTER TABLE "{name}" ALTER COLUMN "{column}" TYPE BIGINT')
    return [f"{name}.{column} is BIGINT" for column in narrow]


def _add_missing_columns(db: peewee.Database, table: type[Model], columns: dict[str, str]) -> list[str]:
    """ALTER TABLE … ADD COLUMN for nullable columns added after the table was first created."""
    have = {column.name for column in db.get_columns(table._meta.table_name)}
    done = []
    for name, sql_type in columns.items():
        if name not in have:
            db.execute_sql(f'ALTER TABLE "{table._meta.table_name}" ADD COLUMN "{name}" {sql_type}')
            done.append(f"added column {table._meta.table_name}.{name}")
    return done
