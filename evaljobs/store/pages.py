"""Read-only, indexed queries for the viewer (``evaljobs view``): pages of runs and of a run's cells.

Kept apart from :mod:`evaljobs.store` (which serves the pipeline's writes and the
report) so that the viewer's reads are in one place and checked in one test for
their query plans. Every statement here is served by an index: ``run(created_at)``,
``run(status, created_at)``, the run's primary key, or the unique
``result(run_id, scenario_key, model)``; none reads a whole table (invariant 9).

What a page shows of an answer is its first characters (``substr`` in SQL), so a
10,000-pair run's grid never loads its transcripts.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple, Sequence

import peewee

from evaljobs.evaluation.result import Result
from evaljobs.store.connections import _bound, _connection, _reconnecting
from evaljobs.store.errors import UnknownRun
from evaljobs.store.results import _to_result
from evaljobs.store.runs import _check_status, _pair_list
from evaljobs.store.schema import FINISHED_STATUSES, ResultRow, _datetime, _json_once

#: Characters of an answer (or error) a grid cell receives.
PREVIEW_CHARS = 240


@dataclass(frozen=True)
class RunRow:
    """A run as the runs list shows it (no report body, no context)."""

    id: str
    catalog_name: str
    models: list[str]
    strategy: str
    status: str
    expected: int
    persisted: int
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    digest: str
    note: str | None = None
    pairs: list[tuple[str, str, int]] | None = None  # (scenario, model, epoch): a rerun's chosen pairs
    epochs: int = 1  # --epochs N: each (scenario, model) was evaluated N times
    self_judge: list[str] | None = None  # --allow-self-judge: the models that judged their own answers
    #: The catalog's scenario keys as written (None: a run from before schema 5, listed by key).
    scenario_order: list[str] | None = None


class Cell(NamedTuple):
    """One persisted pair of a run, as a grid cell needs it (a tuple: 10,000 are built per cold page)."""

    id: int
    scenario_key: str
    model: str
    status: str
    fault: str | None
    score: float
    cost: float | None  # None: the model's price is unknown
    duration_ms: int
    input_tokens: int
    output_tokens: int
    cached: bool
    preview: str
    error: str | None
    ttft_ms: float | None = None  # time to first token of the pair's first call, where recorded
    epoch: int = 0  # which of the run's epochs (--epochs N) this row is
    scenario_digest: str | None = None  # the scenario it was graded against (None: stored before schema 5)
    cache_read_tokens: int = 0  # the parts of input_tokens the provider's prompt cache read and wrote
    cache_write_tokens: int = 0
    cache_saving: float | None = 0.0  # what the cache saved; None: a cache price is unknown
    answered_by: str | None = None  # the model version the provider said answered


@dataclass(frozen=True)
class RunState:
    """A run's live numbers: one primary-key read and one indexed GROUP BY."""

    status: str
    expected: int
    persisted: int
    passed: int
    failed: int
    errored: int
    finished: bool
    last_id: int

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "expected": self.expected, "persisted": self.persisted,
                "passed": self.passed, "failed": self.failed, "errored": self.errored,
                "finished": self.finished, "cursor": self.last_id}


def _db() -> peewee.Database:
    return _bound()


def _sqlite(db: peewee.Database) -> bool:
    return isinstance(db, peewee.SqliteDatabase)


_RUN_LIST_COLUMNS = ("id", "catalog_name", "models", "strategy", "status", "expected", "persisted",
                     "created_at", "started_at", "finished_at", "digest")


#: The runs list reads the run table along ``run(created_at)`` in batches of this many rows …
RUN_BATCH = 500
#: … and at most this many batches: a filter matching nothing never reads more than 10,000 runs.
RUN_BATCHES = 20


@_reconnecting
def runs(
    *,
    limit: int = 50,
    statuses: Sequence[str] = (),
    catalog: str | None = None,
    model: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[RunRow]:
    """Newest runs first, filtered.

    Status and dates are conditions on ``run(created_at)`` / ``run(status, created_at)``; catalog
    and model are checked here on batches read along that index, newest first, because neither
    has an index of its own and a planner given ``catalog_name = ?`` may scan the whole table.
    """
    for status in statuses:
        _check_status(status)
    db = _db()
    p = db.param
    where, params = [], []
    if statuses:
        where.append(f"status IN ({', '.join([p] * len(statuses))})")
        params += list(statuses)
    if since is not None:
        where.append(f"created_at >= {p}")
        params.append(_param_time(db, since))
    if until is not None:
        where.append(f"created_at < {p}")
        params.append(_param_time(db, until))
    found: list[RunRow] = []
    seen: set[str] = set()
    cursor = None
    with _connection() as db:
        for _ in range(RUN_BATCHES):
            clauses, values = list(where), list(params)
            if cursor is not None:
                clauses.append(f"created_at <= {p}")
                values.append(cursor)
            batch = limit if not (catalog or model) else RUN_BATCH
            sql = (f"SELECT {', '.join(_RUN_LIST_COLUMNS)} FROM run"
                   + (f" WHERE {' AND '.join(clauses)}" if clauses else "")
                   + f" ORDER BY created_at DESC, id DESC LIMIT {int(batch)}")
            rows = db.execute_sql(sql, values).fetchall()
            for r in rows:
                if r[0] in seen:
                    continue
                seen.add(r[0])
                models = list(_json_once(r[2]) or [])
                if (catalog and r[1] != catalog) or (model and model not in models):
                    continue
                found.append(RunRow(id=r[0], catalog_name=r[1], models=models, strategy=r[3], status=r[4],
                                    expected=r[5], persisted=r[6], created_at=_datetime(r[7]),
                                    started_at=_datetime(r[8]), finished_at=_datetime(r[9]),
                                    digest=r[10]))
                if len(found) >= limit:
                    return found
            if len(rows) < batch or not (catalog or model):
                break
            cursor = rows[-1][7]
    return found


def _param_time(db: peewee.Database, value: datetime) -> Any:
    """A timestamp as the column stores it: naive UTC (SQLite keeps peewee's text form of it)."""
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return str(value) if _sqlite(db) else value


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@_reconnecting
def run(run_id: str) -> RunRow:
    """One run by primary key, without its report."""
    db = _db()
    sql = (
        f"SELECT {', '.join(_RUN_LIST_COLUMNS)}, note, pairs, epochs, options, scenario_order FROM run "
        f"WHERE id = {db.param}"
    )
    with _connection() as db:
        r = db.execute_sql(sql, (run_id,)).fetchone()
    if r is None:
        raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")
    return RunRow(id=r[0], catalog_name=r[1], models=list(_json_once(r[2]) or []), strategy=r[3],
                  status=r[4], expected=r[5], persisted=r[6], created_at=_datetime(r[7]),
                  started_at=_datetime(r[8]), finished_at=_datetime(r[9]), digest=r[10], note=r[11],
                  pairs=list(_pair_list(r[12])) if r[12] is not None else None, epochs=r[13] or 1,
                  self_judge=(_json_once(r[14]) or {}).get("self_judge"),
                  scenario_order=list(_json_once(r[15])) if r[15] is not None else None)


@_reconnecting
def model_tallies(run_ids: Sequence[str]) -> dict[str, dict[str, dict[str, float]]]:
    """run id → model → {passed, failed, errored, cost, cost_unknown}: a GROUP BY on the per-run index for
    each run.

    For the runs list's pass rate per model of runs without a report (pending, running). One query
    per run, not ``run_id IN (…)``: given a long list, PostgreSQL's planner scans the whole table.
    """
    db = _db()
    sql = (f"SELECT model, status, COUNT(*), SUM(cost), COUNT(*) - COUNT(cost) FROM result "
           f"WHERE run_id = {db.param} GROUP BY model, status")
    out: dict[str, dict[str, dict[str, float]]] = {}
    with _connection() as db:
        for run_id in run_ids:
            for model, status, n, cost, unknown in db.execute_sql(sql, (run_id,)).fetchall():
                tally = out.setdefault(run_id, {}).setdefault(model, {"passed": 0, "failed": 0, "errored": 0,
                                                                       "cost": 0.0, "cost_unknown": 0})
                tally[status] = tally.get(status, 0) + n
                tally["cost"] += float(cost or 0.0)  # SUM skips NULL: the known costs
                tally["cost_unknown"] += int(unknown or 0)
    return out


@_reconnecting
def report_models(run_ids: Sequence[str]) -> dict[str, tuple[list[dict[str, Any]], dict[str, Any]]]:
    """run id → (the report's per-model blocks, its summary), extracted in SQL by primary key.

    The database pulls the two small parts out of each stored report, so listing 50
    finished runs of 10,000 pairs does not ship or parse 50 full reports.
    """
    if not run_ids:
        return {}
    db = _db()
    p = db.param
    if _sqlite(db):
        parts = "json_extract(report, '$.models'), json_extract(report, '$.summary')"
    else:
        parts = "(report::json -> 'models')::text, (report::json -> 'summary')::text"
    sql = (f"SELECT id, {parts} FROM run WHERE id IN ({', '.join([p] * len(run_ids))}) "
           f"AND report IS NOT NULL")
    with _connection() as db:
        rows = db.execute_sql(sql, list(run_ids)).fetchall()
    return {run_id: (json.loads(models) if models else [], json.loads(summary) if summary else {})
            for run_id, models, summary in rows}


def _cells_sql(where: str) -> str:
    """The columns of a :class:`Cell`, in its order, from the result rows matching ``where``."""
    return (
        f"SELECT id, scenario_key, model, status, fault, score, cost, duration_ms, input_tokens, "
        f"output_tokens, cached, COALESCE(substr(output, 1, {PREVIEW_CHARS}), ''), "
        f"substr(error, 1, {PREVIEW_CHARS}), ttft_ms, epoch, scenario_digest, cache_read_tokens, "
        f"cache_write_tokens, cache_saving, answered_by FROM result WHERE {where}"
    )


@_reconnecting
def cells(run_id: str) -> list[Cell]:
    """Every persisted pair of the run with the first characters of its answer; one indexed query."""
    p = _db().param
    sql = _cells_sql(f"run_id = {p}")
    with _connection() as db:
        return list(map(Cell._make, db.execute_sql(sql, (run_id,)).fetchall()))


@_reconnecting
def cells_after(run_id: str, after: int, *, limit: int = 5000) -> list[Cell]:
    """The run's pairs with a row id above ``after`` (the live page's cursor), oldest first."""
    p = _db().param
    sql = _cells_sql(f"run_id = {p} AND id > {p} ORDER BY id LIMIT {int(limit)}")
    with _connection() as db:
        return list(map(Cell._make, db.execute_sql(sql, (run_id, int(after))).fetchall()))


@_reconnecting
def search(run_id: str, text: str) -> set[tuple[str, str]]:
    """Pairs whose scenario key or answer contains ``text`` (case-insensitive), within the run's rows."""
    db = _db()
    p = db.param
    pattern = "%" + _like(text.lower()) + "%"
    sql = (f"SELECT scenario_key, model FROM result WHERE run_id = {p} AND "
           f"(lower(scenario_key) LIKE {p} ESCAPE '\\' OR lower(output) LIKE {p} ESCAPE '\\')")
    with _connection() as db:
        return {(key, model) for key, model in db.execute_sql(sql, (run_id, pattern, pattern)).fetchall()}


@_reconnecting
def outputs(run_id: str) -> list[tuple[str, str, int, str]]:
    """Every (scenario, model, epoch, answer) of the run, for the viewer's regex search and its "outputs
    differ" filter (the run's rows by the unique index's prefix)."""
    p = _db().param
    sql = f"SELECT scenario_key, model, epoch, output FROM result WHERE run_id = {p}"
    with _connection() as db:
        return [(k, m, int(e), o or "") for k, m, e, o in db.execute_sql(sql, (run_id,)).fetchall()]


@_reconnecting
def scenario_results(run_id: str, scenario_key: str) -> list[Result]:
    """Every model's full result for one scenario of the run (prefix of the unique index), by model and
    epoch."""
    query = (ResultRow.select()
             .where((ResultRow.run == run_id) & (ResultRow.scenario_key == scenario_key)))
    with _connection():
        rows = list(query)
    return [_to_result(row) for row in sorted(rows, key=lambda r: (r.model, r.epoch))]


@_reconnecting
def state(run_id: str) -> RunState:
    """The run's status and counts by status, and the highest row id seen (the live cursor)."""
    db = _db()
    p = db.param
    with _connection() as db:
        head = db.execute_sql(
            f"SELECT status, expected, persisted FROM run WHERE id = {p}", (run_id,)
        ).fetchone()
        if head is None:
            raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")
        counts = dict(
            db.execute_sql(
                f"SELECT status, COUNT(*) FROM result WHERE run_id = {p} GROUP BY status", (run_id,)
            ).fetchall()
        )
        last = db.execute_sql(f"SELECT MAX(id) FROM result WHERE run_id = {p}", (run_id,)).fetchone()[0]
    status, expected, _ = head
    return RunState(status=status, expected=expected, persisted=sum(counts.values()),
                    passed=counts.get("passed", 0), failed=counts.get("failed", 0),
                    errored=counts.get("errored", 0), finished=status in FINISHED_STATUSES,
                    last_id=int(last or 0))


@_reconnecting
def head(run_id: str) -> tuple[str, int, int, int]:
    """(status, expected, persisted, highest row id): by primary key and the per-run index, no counting.

    What a page needs to tell whether what it derived from the run's rows is still current.
    """
    db = _db()
    p = db.param
    with _connection() as db:
        row = db.execute_sql(
            f"SELECT status, expected, persisted FROM run WHERE id = {p}", (run_id,)
        ).fetchone()
        if row is None:
            raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")
        last = db.execute_sql(f"SELECT MAX(id) FROM result WHERE run_id = {p}", (run_id,)).fetchone()[0]
    return row[0], row[1], row[2], int(last or 0)


@_reconnecting
def catalogs(limit: int = 200) -> list[str]:
    """Catalog names of the newest runs, for the filter's choices (read along ``run(created_at)``)."""
    with _connection() as db:
        rows = db.execute_sql(
            f"SELECT catalog_name FROM run ORDER BY created_at DESC LIMIT {int(limit)}"
        ).fetchall()
    return sorted({r[0] for r in rows})
