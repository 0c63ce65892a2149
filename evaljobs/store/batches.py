"""Provider batches of a batch run: the requests parked by pairs, the batches that carry them, their answers.

Two tables, created the first time a process uses them (a database without batch runs has none):

* ``batch_request``: one row per pair-turn (its deterministic custom id is the key, so parking the
  same turn twice is one row); ``batch`` names the batch that carries it once one was claimed;
  ``state`` goes ``pending`` → ``succeeded``/``failed`` with the answer or the reason.
* ``provider_batch``: one row per batch we mean to submit. The row and the claim of its requests
  are committed *before* the submit (``state`` ``submitting``, no provider id), the provider's
  batch id *after* it (``open``). A crash between the two leaves a ``submitting`` row whose key the
  provider knows (or not): recovery asks the provider (:meth:`BatchClient.find`) instead of
  submitting again.

Every function is one short transaction; nothing is held across a provider call.
"""
from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, cast

import peewee
from peewee import CharField, DateTimeField, IntegerField, TextField, fn

from evaljobs.store.connections import _bound, _connection, _transaction
from evaljobs.store.schema import PG_SCHEMA_LOCK, _add_missing_columns, _datetime, _now, _Table

PENDING, SUCCEEDED, FAILED = "pending", "succeeded", "failed"
SUBMITTING, OPEN, ENDED = "submitting", "open", "ended"


class BatchRequestRow(_Table):
    custom_id = CharField(max_length=64, primary_key=True)
    run_id = CharField(max_length=32)
    #: provider entry name and model name: one batch holds the requests of one deployment and model
    provider = TextField()
    model = TextField()
    scenario_key = TextField()
    model_spec = TextField()
    epoch = IntegerField()
    turn = IntegerField()
    body = TextField()
    batch = CharField(max_length=64, null=True)
    state = CharField(max_length=16)
    answer = TextField(null=True)
    created_at = DateTimeField()

    class Meta:
        table_name = "batch_request"
        indexes = ((("run_id", "provider", "model", "batch"), False), (("batch",), False))


class ProviderBatchRow(_Table):
    #: Our key for the batch (also sent to the provider, e.g. in OpenAI's batch metadata).
    key = CharField(max_length=64, primary_key=True)
    run_id = CharField(max_length=32)
    provider = TextField()
    model = TextField()
    state = CharField(max_length=16)
    provider_batch_id = TextField(null=True)
    size = IntegerField()
    done = IntegerField(default=0)
    failed = IntegerField(default=0)
    provider_status = TextField(null=True)
    created_at = DateTimeField()
    submitted_at = DateTimeField(null=True)
    ended_at = DateTimeField(null=True)
    #: When the provider was first asked to cancel it (or first said ``cancelling``): the cancel's grace
    #: runs from here, and no second cancel is sent.
    cancel_asked_at = DateTimeField(null=True)
    #: Submits and lookups that failed transiently (bounded like an interactive call's retries).
    attempts = IntegerField(default=0)

    class Meta:
        table_name = "provider_batch"
        indexes = ((("run_id", "state"), False), (("state",), False))


@dataclass(frozen=True)
class BatchInfo:
    """One provider batch of a run, as stored."""

    key: str
    run_id: str
    provider: str
    model: str
    state: str
    provider_batch_id: str | None
    size: int
    done: int
    failed: int
    provider_status: str | None
    created_at: datetime | None
    submitted_at: datetime | None
    cancel_asked_at: datetime | None = None
    attempts: int = 0


def _ensure() -> None:
    db = _bound()
    if db.evaljobs_batches_ready:
        return
    with _transaction():
        if isinstance(db, peewee.PostgresqlDatabase):
            db.execute_sql("SELECT pg_advisory_xact_lock(%s)", (PG_SCHEMA_LOCK,))
        db.create_tables([BatchRequestRow, ProviderBatchRow], safe=True)
        stamp = "TIMESTAMP" if isinstance(db, peewee.PostgresqlDatabase) else "DATETIME"
        _add_missing_columns(db, ProviderBatchRow, {"cancel_asked_at": stamp,
                                                    "attempts": "INTEGER NOT NULL DEFAULT 0"})
    db.evaljobs_batches_ready = True


#: Advisory-lock class of a (run, provider, model) group (the two-key form: the group's hash is the other
#: key).
PG_GROUP_LOCK = 0x656A6267  # "ejbg"


def _lock_group(run_id: str, provider: str, model: str) -> None:
    """Serialize, on PostgreSQL, the transactions that park into or claim from one group.

    A parker counts its group's unclaimed requests to decide whether to send a collector (the first
    one of a group starts its wait). Under READ COMMITTED that count could see requests a collector
    was claiming but had not committed yet: the parker then counted 2, sent nothing, and committed
    after the collector's last look, leaving its request unclaimed until ``recover``. With this
    lock a park's count and a claim never overlap: either the claim takes the request, or the
    parker counts after the claim committed (1: it sends the collector). SQLite's BEGIN IMMEDIATE
    serializes them already.
    """
    db = _bound()
    if isinstance(db, peewee.PostgresqlDatabase):
        digest = hashlib.sha256(json.dumps([run_id, provider, model]).encode()).digest()
        db.execute_sql("SELECT pg_advisory_xact_lock(%s, %s)",
                       (PG_GROUP_LOCK, int.from_bytes(digest[:4], "big", signed=True)))


def _info(row: ProviderBatchRow) -> BatchInfo:
    return BatchInfo(row.key, row.run_id, row.provider, row.model, row.state, row.provider_batch_id, row.size,
                     row.done, row.failed, row.provider_status, _datetime(row.created_at),
                     _datetime(row.submitted_at), _datetime(row.cancel_asked_at), row.attempts or 0)


# -- requests ------------------------------------------------------------------------------------


def park(custom_id: str, *, run_id: str, provider: str, model: str, scenario_key: str, model_spec: str,
         epoch: int, turn: int, body: str) -> int | None:
    """Record a request to be batched, once (insert-if-absent by custom id).

    Returns the number of its group's unclaimed requests when this call added it (the caller
    decides whether a batch is due), None when it was already there.
    """
    _ensure()
    row = {"custom_id": custom_id, "run_id": run_id, "provider": provider, "model": model,
           "scenario_key": scenario_key, "model_spec": model_spec, "epoch": epoch, "turn": turn, "body": body,
           "state": PENDING, "created_at": _now()}
    with _transaction():
        _lock_group(run_id, provider, model)
        added = BatchRequestRow.insert(**row).on_conflict_ignore().as_rowcount().execute()
        if not added:
            return None
        return _unclaimed(run_id, provider, model).count()


def answer(custom_id: str) -> tuple[str, str] | None:
    """``("ok", encoded completion)``, ``("error", reason)``, or None while it waits (primary key)."""
    _ensure()
    with _connection():
        found = (BatchRequestRow.select(BatchRequestRow.state, BatchRequestRow.answer)
                 .where(BatchRequestRow.custom_id == custom_id).tuples().first())
    if found is None or found[0] == PENDING:
        return None
    return ("ok" if found[0] == SUCCEEDED else "error", found[1] or "")


def parked(custom_id: str) -> bool:
    """Whether the request ``custom_id`` was parked, answered or not (primary key)."""
    _ensure()
    with _connection():
        return BatchRequestRow.select().where(BatchRequestRow.custom_id == custom_id).exists()


def _unclaimed(run_id: str, provider: str, model: str) -> peewee.ModelSelect[BatchRequestRow]:
    return BatchRequestRow.select().where(
        (BatchRequestRow.run_id == run_id)
        & (BatchRequestRow.provider == provider)
        & (BatchRequestRow.model == model)
        & BatchRequestRow.batch.is_null()
    )


def unclaimed(run_id: str, provider: str, model: str) -> tuple[int, datetime | None]:
    """How many of the group's requests wait for a batch, and when the oldest was parked."""
    _ensure()
    query = _unclaimed(run_id, provider, model).select(fn.COUNT(BatchRequestRow.custom_id),
                                                        fn.MIN(BatchRequestRow.created_at))
    with _connection():
        count, oldest = query.tuples().first() or (0, None)
    return int(count or 0), _datetime(oldest)


def unclaimed_groups(run_id: str) -> list[tuple[str, str]]:
    """The (provider, model) groups of ``run_id`` with requests that wait for a batch (recovery)."""
    _ensure()
    query = (BatchRequestRow.select(BatchRequestRow.provider, BatchRequestRow.model)
             .where((BatchRequestRow.run_id == run_id) & BatchRequestRow.batch.is_null())
             .distinct().tuples())
    with _connection():
        return list(cast("Iterable[tuple[str, str]]", query))  # the stubs type .tuples() rows as models


# -- batches -------------------------------------------------------------------------------------


def claim(run_id: str, provider: str, model: str, limit: int) -> tuple[str, list[tuple[str, str]]] | None:
    """Make a ``submitting`` batch of up to ``limit`` of the group's unclaimed requests, committed
    before anything is sent; its key and [(custom id, body)], or None when none was unclaimed.

    Two claimers of one group never share a request: the claim is an UPDATE of the rows still
    unclaimed, and each keeps what its own key got.
    """
    _ensure()
    key = f"ejb-{run_id}-{uuid.uuid4().hex[:16]}"
    with _transaction():
        _lock_group(run_id, provider, model)
        oldest = (_unclaimed(run_id, provider, model).select(BatchRequestRow.custom_id)
                  .order_by(BatchRequestRow.created_at, BatchRequestRow.custom_id).limit(limit).tuples())
        ids = [row[0] for row in cast("Iterable[tuple[str]]", oldest)]  # the stubs type rows as models
        if not ids:
            return None
        (BatchRequestRow.update(batch=key)
         .where(BatchRequestRow.custom_id.in_(ids) & BatchRequestRow.batch.is_null()).execute())
        claimed: list[tuple[str, str]] = list(
            cast("Iterable[tuple[str, str]]",  # the stubs type .tuples() rows as models
                 BatchRequestRow.select(BatchRequestRow.custom_id, BatchRequestRow.body)
                 .where(BatchRequestRow.batch == key).order_by(BatchRequestRow.custom_id).tuples()))
        if not claimed:
            return None
        ProviderBatchRow.create(key=key, run_id=run_id, provider=provider, model=model, state=SUBMITTING,
                                size=len(claimed), created_at=_now())
    return key, [(cid, body) for cid, body in claimed]


def requests_of(key: str) -> list[tuple[str, str]]:
    """[(custom id, body)] of a batch (to submit it after a crash, or to match its results)."""
    _ensure()
    with _connection():
        return list(cast("Iterable[tuple[str, str]]",  # the stubs type .tuples() rows as models
                         BatchRequestRow.select(BatchRequestRow.custom_id, BatchRequestRow.body)
                         .where(BatchRequestRow.batch == key).order_by(BatchRequestRow.custom_id).tuples()))


def submitted(key: str, provider_batch_id: str, provider_status: str) -> None:
    """Commit the provider's batch id (after the submit, or once recovery found it)."""
    _ensure()
    with _connection():
        (
            ProviderBatchRow.update(
                state=OPEN,
                provider_batch_id=provider_batch_id,
                provider_status=provider_status,
                submitted_at=_now(),
            )
            .where((ProviderBatchRow.key == key) & (ProviderBatchRow.state == SUBMITTING))
            .execute()
        )


def progressed(key: str, *, done: int, failed: int, provider_status: str) -> None:
    _ensure()
    with _connection():
        (ProviderBatchRow.update(done=done, failed=failed, provider_status=provider_status)
         .where(ProviderBatchRow.key == key).execute())


def get(key: str) -> BatchInfo | None:
    _ensure()
    with _connection():
        row = ProviderBatchRow.get_or_none(ProviderBatchRow.key == key)
    return _info(row) if row is not None else None


def cancel_asked(key: str) -> bool:
    """Note that the provider was asked to cancel the batch (or said it is cancelling) now; True when
    this call noted it first (only that caller sends the cancel: once, however many pollers look)."""
    _ensure()
    with _connection():
        return bool(ProviderBatchRow.update(cancel_asked_at=_now())
                    .where((ProviderBatchRow.key == key) & ProviderBatchRow.cancel_asked_at.is_null())
                    .execute())


def failed_attempt(key: str) -> int:
    """Count a submit or lookup of the batch that failed transiently; the count so far."""
    _ensure()
    with _transaction():
        (ProviderBatchRow.update(attempts=ProviderBatchRow.attempts + 1)
         .where(ProviderBatchRow.key == key).execute())
        found = ProviderBatchRow.select(ProviderBatchRow.attempts).where(ProviderBatchRow.key == key).scalar()
    return int(found or 0)


#: Answers committed per transaction while a result file is read (a transaction never waits on it whole).
ANSWER_ROWS = 200
ANSWER_BYTES = 32_000_000


def answer_requests(key: str, answers: Iterable[tuple[str, bool, str]]) -> int:
    """Commit answers of the batch's requests as they are read: (custom id, ok, encoded completion or
    reason). A request answered already (a duplicate line) keeps its first answer; a custom id not of
    this batch is ignored. A few hundred rows a transaction: a large result file never holds the
    database's write lock while it is read. Returns how many requests were answered."""
    _ensure()
    done = 0
    chunk: list[tuple[str, bool, str]] = []
    size = 0
    for answer in answers:
        chunk.append(answer)
        size += len(answer[2])
        if len(chunk) >= ANSWER_ROWS or size >= ANSWER_BYTES:
            done += _answer(key, chunk)
            chunk, size = [], 0
    return done + _answer(key, chunk)


def _answer(key: str, chunk: list[tuple[str, bool, str]]) -> int:
    if not chunk:
        return 0
    done = 0
    with _transaction():
        for custom_id, ok, value in chunk:
            done += (BatchRequestRow.update(state=SUCCEEDED if ok else FAILED, answer=value)
                     .where((BatchRequestRow.custom_id == custom_id) & (BatchRequestRow.batch == key)
                            & (BatchRequestRow.state == PENDING)).execute())
    return done


def end_batch(key: str, *, provider_status: str, missing_reason: str) -> list[tuple[str, str, int]]:
    """End a batch: each of its requests still without an answer fails with ``missing_reason``. One
    transaction; returns the batch's pairs as (scenario key, model spec, epoch), to be evaluated again."""
    _ensure()
    with _transaction():
        (BatchRequestRow.update(state=FAILED, answer=missing_reason)
         .where((BatchRequestRow.batch == key) & (BatchRequestRow.state == PENDING)).execute())
        rows = list(cast("Iterable[tuple[str, str, int, str]]",  # the stubs type .tuples() rows as models
                         BatchRequestRow.select(BatchRequestRow.scenario_key, BatchRequestRow.model_spec,
                                                BatchRequestRow.epoch, BatchRequestRow.state)
                         .where(BatchRequestRow.batch == key).tuples()))
        (ProviderBatchRow.update(state=ENDED, ended_at=_now(), done=len(rows),
                                 failed=sum(state == FAILED for *_, state in rows),
                                 provider_status=provider_status)
         .where(ProviderBatchRow.key == key).execute())
    return sorted({(scenario, spec, epoch) for scenario, spec, epoch, _ in rows})


def record_answers(key: str, answers: dict[str, tuple[bool, str]], *, provider_status: str,
                   missing_reason: str) -> list[tuple[str, str, int]]:
    """End a batch with ``answers`` (custom id -> ``ok``, encoded completion or reason); a request the
    answers do not name fails with ``missing_reason`` (:func:`answer_requests`, then :func:`end_batch`)."""
    answer_requests(key, ((cid, ok, value) for cid, (ok, value) in answers.items()))
    return end_batch(key, provider_status=provider_status, missing_reason=missing_reason)


def _exists() -> bool:
    """Whether the batch tables exist (a reader such as ``status`` creates nothing)."""
    db = _bound()
    if db.evaljobs_batches_ready:
        return True
    with _connection():
        if not db.table_exists(ProviderBatchRow._meta.table_name):
            return False
    _ensure()  # the columns added since the tables were made
    return True


def open_batches(run_id: str | None = None) -> list[BatchInfo]:
    """Batches not ended (``submitting`` or ``open``), of one run or every run, oldest first (indexed)."""
    if not _exists():
        return []
    where = ProviderBatchRow.state.in_([SUBMITTING, OPEN])
    if run_id is not None:
        where &= ProviderBatchRow.run_id == run_id
    with _connection():
        return [
            _info(row) for row in ProviderBatchRow.select().where(where).order_by(ProviderBatchRow.created_at)
        ]


def run_batches(run_id: str) -> list[BatchInfo]:
    """Every batch of a run (status, cost lines), oldest first."""
    if not _exists():
        return []
    with _connection():
        rows = (
            ProviderBatchRow.select()
            .where(ProviderBatchRow.run_id == run_id)
            .order_by(ProviderBatchRow.created_at)
        )
        return [_info(row) for row in rows]


def request_count(run_id: str) -> int:
    """How many pair-turns of a run were parked for batches (answered or not)."""
    if not _exists():
        return 0
    with _connection():
        return BatchRequestRow.select().where(BatchRequestRow.run_id == run_id).count()


def parked_pairs(run_id: str) -> list[tuple[str, str, int]]:
    """Pairs with a request still pending (submitted or not): recovery must not send them again,
    their batch's poller will."""
    _ensure()
    with _connection():
        query = (
            BatchRequestRow.select(
                BatchRequestRow.scenario_key, BatchRequestRow.model_spec, BatchRequestRow.epoch
            )
            .where((BatchRequestRow.run_id == run_id) & (BatchRequestRow.state == PENDING))
            .distinct()
            .tuples()
        )
        return list(cast("Iterable[tuple[str, str, int]]", query))  # the stubs type .tuples() rows as models


def encode_request(body: dict) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


__all__ = [
    "ENDED",
    "FAILED",
    "OPEN",
    "PENDING",
    "SUBMITTING",
    "SUCCEEDED",
    "BatchInfo",
    "BatchRequestRow",
    "ProviderBatchRow",
    "answer",
    "answer_requests",
    "cancel_asked",
    "claim",
    "end_batch",
    "failed_attempt",
    "get",
    "open_batches",
    "park",
    "parked_pairs",
    "progressed",
    "record_answers",
    "request_count",
    "requests_of",
    "run_batches",
    "submitted",
    "unclaimed",
    "unclaimed_groups",
]
