"""A big populated database and the tools to read its query plans: for the "no full scan" tests.

:func:`populate` writes thousands of runs and results straight into the tables (the public
functions would take minutes) and ANALYZEs them, so the planner has a real choice;
:func:`sql_log` captures every statement peewee sends; :func:`full_scans` explains one on
SQLite or PostgreSQL and returns the plan lines that read a whole ``run`` or ``result`` table.
"""
from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import peewee

from evaljobs import store
from evaljobs.catalog import parse_catalog
from evaljobs.evaluation.result import Result


def utc_now() -> datetime:
    """Now, as the store writes timestamps: naive UTC."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


class _Statements(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.statements: list[tuple[str, tuple]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, tuple) and len(record.msg) == 2:
            sql, params = record.msg
            self.statements.append((sql, tuple(params or ())))


@contextmanager
def sql_log():
    """Every statement peewee sends, as (sql, params)."""
    logger = logging.getLogger("peewee")
    handler, level = _Statements(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.statements
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def populate(runs: int = 100, scenarios: int = 25, idle_runs: int = 3000) -> tuple[list[str], str]:
    """``runs`` runs of scenarios × 2 models with every result (5,000 rows), plus ``idle_runs`` finished
    runs without results; a tenth of the runs still running. Returns the run ids and a rerun's id."""
    body = {"name": "big", "scenarios": [{"key": f"s{i:02d}", "messages": [{"role": "user", "content": "x"}]}
                                         for i in range(scenarios)]}
    catalog = parse_catalog(body, source="big.yaml")
    first = store.create_run(catalog, ["m1", "m2"], strategy="fanout")  # saves the snapshot
    now = utc_now()
    ids = [first.id] + [f"r_live{i:06d}" for i in range(1, runs)]
    live = [dict(id=run_id, digest=catalog.digest, catalog_name="big", models='["m1","m2"]',
                 strategy="fanout", status="pending", expected=scenarios * 2, persisted=0, options="{}",
                 judge_calls=0,
                 created_at=now - timedelta(seconds=i)) for i, run_id in enumerate(ids[1:], start=1)]
    rows = [dict(run=run_id, scenario_key=key, model=model, status="passed" if (i + j) % 4 else "failed",
                 score=1.0, scores="{}", output="", tool_calls="[]", duration_ms=5, input_tokens=1,
                 output_tokens=1, cost=0.0, attempts=1, details="{}", cached=False, created_at=now)
            for i, run_id in enumerate(ids) for j, key in enumerate(catalog.keys) for model in ("m1", "m2")]
    old = [dict(id=f"r_idle{i:06d}", digest=catalog.digest, catalog_name="big", models='["m1"]',
                strategy="fanout", status="complete", expected=scenarios, persisted=0, options="{}",
                judge_calls=0,
                created_at=now - timedelta(days=30, seconds=i)) for i in range(idle_runs)]
    db = store.database
    with db.connection_context(), db.atomic():
        _insert(db, "run", live + old)
        _insert(db, "result", rows)
        Run, Row = store.Run, store.ResultRow
        Run.update(status="complete", persisted=scenarios * 2).where(Run.id.in_(ids[10:])).execute()
        Run.update(status="running", persisted=scenarios * 2 - 1).where(Run.id.in_(ids[:10])).execute()
        Row.delete().where((Row.run == ids[0]) & (Row.scenario_key == "s00") & (Row.model == "m1")).execute()
    rerun = store.create_run(catalog, ["m2"], strategy="fanout", pairs=[("s03", "m2"), ("s07", "m2")])
    store.record_result(rerun.id, Result("s03", "m2", "passed"))
    with db.connection_context():
        db.execute_sql("ANALYZE")
    return ids, rerun.id


def _insert(db, table: str, rows: list[dict]) -> None:
    """Multi-row INSERTs by hand: peewee's insert_many spends seconds building SQL for thousands of rows."""
    columns = list(rows[0])
    names = ", ".join(f'"{"run_id" if c == "run" and table == "result" else c}"' for c in columns)
    one = "(" + ", ".join([db.param] * len(columns)) + ")"
    for start in range(0, len(rows), 400):
        chunk = rows[start:start + 400]
        db.execute_sql(f'INSERT INTO "{table}" ({names}) VALUES {", ".join([one] * len(chunk))}',
                       [row[c] for row in chunk for c in columns])


def full_scans(db, sql: str, params: tuple) -> list[str]:
    """The plan lines of ``sql`` that read a whole ``run`` or ``result`` table."""
    if isinstance(db, peewee.SqliteDatabase):
        plan = [row[-1] for row in db.execute_sql("EXPLAIN QUERY PLAN " + sql, params)]
        return [line for line in plan if re.match(r"^SCAN (?!CONSTANT ROW)\S+", line)
                and not re.search(r"USING (COVERING )?INDEX|USING INTEGER PRIMARY KEY", line)]
    plan = [row[0] for row in db.execute_sql("EXPLAIN " + sql, params)]
    return [line.strip() for line in plan if re.search(r"Seq Scan on (run|result)\b", line)]


def assert_no_full_scans(db, calls: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run each named call, check that every SELECT it sent reads no whole ``run`` or ``result`` table, and
    return what each call returned (so the test can check they did real work)."""
    results = {}
    for name, call in calls.items():
        with sql_log() as statements:
            results[name] = call()
        selects = [(sql, params) for sql, params in statements if sql.lstrip().upper().startswith("SELECT")]
        assert selects, f"{name}: no SELECT captured"
        with db.connection_context():
            for sql, params in selects:
                assert full_scans(db, sql, params) == [], f"{name} scans a whole table: {sql}"
    return results


def postgres_rows(db_url: str) -> dict[str, str]:
    """Every row of every public table, as text, by table: where a leaked secret would be stored."""
    import psycopg2

    places: dict[str, str] = {}
    connection = psycopg2.connect(db_url)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            for (table,) in cursor.fetchall():
                cursor.execute(f'SELECT t::text FROM "{table}" t')
                places[f"table {table}"] = "\n".join(row[0] for row in cursor.fetchall())
    finally:
        connection.close()
    return places
