"""Results and the barrier: one row per (run, scenario, model, epoch), counted by the database.

:func:`record_result` is the barrier (invariants 1, 2, 4); :func:`finalize`
writes the run's one report (invariant 3). Every query is built with peewee's query builder;
the per-pair ones are compiled once (see "the per-pair hot path" below); the listing calls are
indexed queries.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable, NamedTuple, Sequence, cast

import peewee
from peewee import SQL, fn

from evaljobs.catalog.criteria import judged_names
from evaljobs.collector import gc_paused
from evaljobs.redact import redact_text, redact_value
from evaljobs.evaluation.result import ERRORED, FAILED, OUTPUT_CAP, PASSED, Result
from evaljobs.reports.rows import ReportRow
from evaljobs.store.connections import _bound, _connection, _reconnecting, _transaction
from evaljobs.store.errors import Incomplete, UnexpectedPair, UnknownRun
from evaljobs.store.runs import RunInfo, _get_row, _pair_list, _pair_set, _pair_text
from evaljobs.store.schema import (COMPLETE, FAILED_RUN, PARTIAL, ResultRow, Run, _datetime, _dumps, _iso,
                                   _json_once, _loads, _now)
from evaljobs.store.report_text import report_text
from evaljobs.store.snapshots import Judges, load_snapshot, run_judges, verdict_digest_in


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


# -- the per-pair hot path ------------------------------------------------------------------
#
# Every query in this module is built with peewee's query builder. The ones every pair runs
# (``pair_state``, ``record_result``) are built and compiled once per kind of database and kept as
# their SQL text with named slots for the values (:func:`_compiled`); each call binds its values
# and runs the text on the cursor. Built and compiled on every call they cost far more CPU than
# SQLite spends running them: pair_state 267 µs a call against 12 µs compiled once, record_result
# 330 µs against 55 µs (scripts/bench_store_queries, SQLite; BENCHMARKS.md, "The store's per-pair
# queries"), about 0.55 ms of a zero-latency pair's 3.6 ms of worker CPU.


class _Slot:
    """A named value of a query compiled once: :meth:`_Compiled.execute` binds it on each call."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _slot(name: str) -> peewee.Value:
    # converter=False: the compiled parameters hold the slot itself, not a column's conversion of it
    return peewee.Value(_Slot(name), converter=False)


class _Compiled(NamedTuple):
    """A query's SQL text for one kind of database and its parameters (slots, or constants)."""

    sql: str
    params: tuple[Any, ...]

    def execute(self, db: peewee.Database, **values: Any) -> Any:
        """The cursor after running the text with ``values`` bound to the slots of the same names."""
        args = tuple([values[p.name] if type(p) is _Slot else p for p in self.params])
        return db.execute_sql(self.sql, args)


_compiled_queries: dict[tuple[type, Callable[[], peewee.Query]], _Compiled] = {}


def _compiled(db: peewee.Database, build: Callable[[], peewee.Query]) -> _Compiled:
    """``build()``'s query compiled for ``db``'s kind of database, once per process."""
    key = (type(db), build)
    found = _compiled_queries.get(key)
    if found is None:
        sql, params = db.get_sql_context().sql(build()).query()
        found = _compiled_queries[key] = _Compiled(sql, tuple(params))
    return found


#: The run's columns ``pair_state`` reads, in the order it unpacks them.
_RUN_FIELDS = (Run.id, Run.digest, Run.catalog_name, Run.models, Run.strategy, Run.status, Run.expected,
               Run.persisted, Run.context, Run.options, Run.created_at, Run.started_at, Run.finished_at,
               Run.note, Run.pairs, Run.epochs)
#: Every column of a result row but its id, in the order ``_insert_result`` gives them.
_RESULT_FIELDS = tuple(field for field in ResultRow._meta.sorted_fields if field.name != "id")
_PAIR_KEY = (ResultRow.run, ResultRow.scenario_key, ResultRow.model, ResultRow.epoch)


def _pair_state_query() -> peewee.Query:
    recorded = fn.EXISTS(ResultRow.select(SQL("1")).where(
        (ResultRow.run == _slot("run_id")) & (ResultRow.scenario_key == _slot("scenario_key"))
        & (ResultRow.model == _slot("model")) & (ResultRow.epoch == _slot("epoch"))))
    return Run.select(*_RUN_FIELDS, recorded).where(Run.id == _slot("run_id"))


def _run_facts_query() -> peewee.Query:
    return (Run.select(Run.digest, Run.catalog_name, Run.models, Run.pairs, Run.expected, Run.epochs,
                       Run.options)
            .where(Run.id == _slot("run_id")))


def _insert_result_query() -> peewee.Query:
    # ON CONFLICT (run, scenario, model, epoch) DO NOTHING on both backends: only the pair's unique
    # key is ignored (SQLite's INSERT OR IGNORE, peewee's on_conflict_ignore, would also swallow a
    # NOT NULL violation)
    return (ResultRow.insert({field: _slot(field.name) for field in _RESULT_FIELDS})
            .on_conflict(action="NOTHING", conflict_target=_PAIR_KEY))


def _bump_persisted_query() -> peewee.Query:
    return (Run.update(persisted=Run.persisted + 1).where(Run.id == _slot("run_id"))
            .returning(Run.persisted))


def _persisted_query() -> peewee.Query:
    return Run.select(Run.persisted).where(Run.id == _slot("run_id"))


class _RunFacts(NamedTuple):
    """What a run was created with and never changes: safe to keep for the life of the process."""

    digest: str
    catalog_name: str
    models: tuple[str, ...]
    pairs: str | None
    expected: int
    epochs: int
    #: Its ``--judge-model`` and its providers file's ``judge_model`` (what each row's digest folds in).
    judges: Judges = (None, None)


_facts: dict[str, _RunFacts] = {}


def _run_facts(db: peewee.Database, run_id: str) -> _RunFacts:
    facts = _facts.get(run_id)
    if facts is None:
        row = _compiled(db, _run_facts_query).execute(db, run_id=run_id).fetchone()
        if row is None:
            raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")
        digest, catalog_name, models, pairs, expected, epochs, options = row
        facts = _RunFacts(digest, catalog_name, tuple(_json_once(models)), pairs, expected, epochs or 1,
                          run_judges(_loads(options)))
        if len(_facts) >= 1024:
            _facts.clear()
        _facts[run_id] = facts
    return facts


@_reconnecting
def pair_state(run_id: str, scenario_key: str, model: str, epoch: int = 0) -> tuple[RunInfo, bool]:
    """The run (without its report) and whether this pair is already recorded: one query.

    What a worker needs before evaluating a pair; ``get_run`` + ``is_recorded`` in one round trip.
    """
    # a malformed message: a query built per call converts its values by column, a compiled one does not
    if not isinstance(run_id, str):
        raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")
    with _connection() as db:
        row = _compiled(db, _pair_state_query).execute(
            db, run_id=run_id, scenario_key=str(scenario_key), model=str(model), epoch=_epoch(epoch)
        ).fetchone()
    if row is None:
        raise UnknownRun(f"unknown run {run_id!r}: list runs with `evaljobs runs`")
    (id_, digest, catalog_name, models, strategy, status, expected, persisted, context, options, created_at,
     started_at, finished_at, note, pairs, epochs, recorded) = row
    created = _datetime(created_at)
    assert created is not None  # run.created_at is NOT NULL
    info = RunInfo(id=id_, digest=digest, catalog_name=catalog_name, models=list(_json_once(models)),
                   strategy=strategy, status=status, expected=expected, persisted=persisted,
                   context=_json_once(context), options=_json_once(options) or {},
                   created_at=created, started_at=_datetime(started_at),
                   finished_at=_datetime(finished_at), report=None, note=note,
                   pairs=list(_pair_list(pairs)) if pairs is not None else None, epochs=epochs or 1)
    return info, bool(recorded)


def _epoch(value: object) -> int:
    """An epoch from a message: a whole number (a malformed one never matches a row)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


@_reconnecting
def record_result(run_id: str, result: Result) -> Recorded:
    """Persist one pair's result and count the run's persisted pairs, in one short transaction.

    This is the barrier (invariants 1, 2, 4). The database decides everything:
    the unique (run, scenario, model, epoch) constraint makes a redelivered result a no-op,
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
    _check_expected(run_id, facts, result)
    with _transaction() as db:
        if not _insert_result(db, run_id, result, facts.digest, facts.judges):
            persisted = _compiled(db, _persisted_query).execute(db, run_id=run_id).fetchone()[0]
            return Recorded(inserted=False, completed=False, persisted=persisted, expected=facts.expected)
        persisted = _compiled(db, _bump_persisted_query).execute(db, run_id=run_id).fetchone()[0]
    return Recorded(inserted=True, completed=persisted == facts.expected, persisted=persisted,
                    expected=facts.expected)


@_reconnecting
def recorded_among(run_id: str, pairs: Sequence[tuple[str, str, int]]) -> set[tuple[str, str, int]]:
    """Which of ``pairs`` (scenario, model, epoch) of ``run_id`` are recorded: one indexed query a batch."""
    if not pairs:
        return set()
    keys = sorted({str(key) for key, _, _ in pairs})
    wanted = {(str(key), str(model), int(epoch)) for key, model, epoch in pairs}
    with _connection() as db:  # fixed SQL: peewee's builder cost a batch ~300 µs, the query ~40 (issue 42)
        marks = ", ".join([db.param] * len(keys))
        rows = db.execute_sql(f"SELECT scenario_key, model, epoch FROM result WHERE run_id = {db.param} "
                              f"AND scenario_key IN ({marks})", (str(run_id), *keys)).fetchall()
    return {(key, model, int(epoch)) for key, model, epoch in rows if (key, model, int(epoch)) in wanted}


def _check_expected(run_id: str, facts: _RunFacts, result: Result) -> None:
    """UnexpectedPair unless the run was created with this pair (catalog, models, epochs, chosen pairs)."""
    unknown_scenario = result.scenario_key not in load_snapshot(facts.digest)
    if unknown_scenario or result.model not in facts.models:
        what = (f"scenario {result.scenario_key!r} is not in catalog {facts.catalog_name!r}"
                if unknown_scenario else
                f"model {result.model!r} is not one of the run's models ({', '.join(facts.models)})")
        raise UnexpectedPair(f"run {run_id} does not expect scenario {result.scenario_key!r} × model "
                             f"{result.model!r}: {what}")
    epoch = result.epoch
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < facts.epochs:
        raise UnexpectedPair(f"run {run_id} does not expect scenario {result.scenario_key!r} × model "
                             f"{result.model!r} epoch {epoch!r}: the run has {facts.epochs} epoch(s), "
                             f"0-{facts.epochs - 1}")
    if facts.pairs is not None and result.ident not in _pair_set(facts.pairs):
        raise UnexpectedPair(f"run {run_id} does not expect scenario {result.scenario_key!r} × model "
                             f"{result.model!r}" + (f" epoch {epoch}" if facts.epochs > 1 else "") +
                             f": the run covers only {facts.expected} chosen pairs")


@_reconnecting
def record_results(run_id: str, results: Sequence[Result]) -> list[Recorded]:
    """Persist several results of one run in one transaction: a group commit of the barrier.

    Each result is still its own row with its own uniqueness check (a pair stored before, or twice
    in ``results``, is not inserted again) and its own count: the run's persisted count goes up by
    one per inserted row, inside the transaction, so the row that reaches ``expected`` is the one
    whose :class:`Recorded` says ``completed`` — exactly one per run, as with :func:`record_result`.
    Every pair is checked against the run before anything is written: one unexpected pair rejects
    the group. What it saves is a transaction (a write lock, a commit) per pair.
    """
    if not results:
        return []
    with _connection() as db:
        facts = _run_facts(db, run_id)
    for result in results:
        _check_expected(run_id, facts, result)
    recorded: list[Recorded | None] = []
    with _transaction() as db:
        bump = _compiled(db, _bump_persisted_query)
        for result in results:
            if _insert_result(db, run_id, result, facts.digest, facts.judges):
                persisted = bump.execute(db, run_id=run_id).fetchone()[0]
                recorded.append(Recorded(inserted=True, completed=persisted == facts.expected,
                                         persisted=persisted, expected=facts.expected))
            else:
                recorded.append(None)
        if None in recorded:
            persisted = _compiled(db, _persisted_query).execute(db, run_id=run_id).fetchone()[0]
    return [r if r is not None else Recorded(inserted=False, completed=False, persisted=persisted,
                                             expected=facts.expected) for r in recorded]


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


def _stored_json(value: Any) -> str:
    """``_dumps(redact_value(_capped(value)))``; a JSON text under the cap has no string to cap."""
    text = _dumps(value)
    if len(text) <= OUTPUT_CAP and redact_value(value) is value:
        return text
    return _dumps(redact_value(_capped(value)))


def _insert_result(db: peewee.Database, run_id: str, result: Result, catalog_digest: str,
                   judges: Judges = (None, None)) -> bool:
    """INSERT … ON CONFLICT DO NOTHING on the unique constraint; True if a row was inserted.

    The row is stamped with the digest of the scenario it was graded against (the run's snapshot, which
    ``_check_expected`` has loaded already), whichever path made the result: evaluated, errored, copied.

    Every text is scrubbed of the configured secrets first (``evaljobs.redact``): a provider that
    echoes a header or a key back in its error or its answer is stored as ``***``, so no report,
    command or viewer page built from the row can show it.
    """
    inserted = _compiled(db, _insert_result_query).execute(
        db,
        run=run_id,
        scenario_key=result.scenario_key,
        model=result.model,
        status=result.status,
        score=float(result.score),
        scores=_dumps(result.scores),
        fault=result.fault,
        output=redact_value(result.output or ""),
        tool_calls=_stored_json(result.tool_calls),
        duration_ms=int(round(result.duration_ms or 0)),
        input_tokens=int(result.input_tokens or 0),
        output_tokens=int(result.output_tokens or 0),
        cost=None if result.cost is None else float(result.cost),
        attempts=int(result.attempts),
        error=redact_text(result.error) if result.error else result.error,
        details=_stored_json(result.details),
        cached=bool(result.cached),
        created_at=_now(),
        ttft_ms=_float_or_none(result.ttft_ms),
        latency_ms=_float_or_none(result.latency_ms),
        epoch=int(result.epoch),
        reused_from=result.reused_from,
        # what decides the verdict: the scenario and, when judged, the run's judge for it (compare: "changed")
        scenario_digest=(result.scenario_digest
                         or verdict_digest_in(catalog_digest, result.scenario_key, judges)),
        cache_read_tokens=int(result.cache_read_tokens or 0),
        cache_write_tokens=int(result.cache_write_tokens or 0),
        reasoning_tokens=None if result.reasoning_tokens is None else int(result.reasoning_tokens),
        cache_saving=_float_or_none(result.cache_saving),
        answered_by=redact_text(result.answered_by)[:500] if result.answered_by else None,
    )
    return inserted.rowcount == 1


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def _results_query(run_id: str) -> peewee.Select:
    return ResultRow.select().where(ResultRow.run == run_id)


def _progress_query(run_id: str) -> peewee.Select:
    return (ResultRow.select(ResultRow.status, fn.COUNT(ResultRow.id).alias("n"))
            .where(ResultRow.run == run_id).group_by(ResultRow.status))


def _pairs_query(run_id: str) -> peewee.Select:
    return (ResultRow.select(ResultRow.scenario_key, ResultRow.model, ResultRow.epoch)
            .where(ResultRow.run == run_id))


def _to_result(row: ResultRow) -> Result:
    return Result(scenario_key=row.scenario_key, model=row.model, status=row.status, score=row.score,
                  scores=_loads(row.scores), fault=row.fault, output=row.output,
                  tool_calls=_loads(row.tool_calls), duration_ms=row.duration_ms,
                  input_tokens=row.input_tokens, output_tokens=row.output_tokens, cost=row.cost,
                  attempts=row.attempts, error=row.error, details=_loads(row.details),
                  cached=bool(row.cached), ttft_ms=row.ttft_ms, latency_ms=row.latency_ms, epoch=row.epoch,
                  reused_from=row.reused_from, scenario_digest=row.scenario_digest,
                  cache_read_tokens=row.cache_read_tokens or 0,
                  cache_write_tokens=row.cache_write_tokens or 0, reasoning_tokens=row.reasoning_tokens,
                  cache_saving=row.cache_saving, answered_by=row.answered_by)


@_reconnecting
def is_recorded(run_id: str, scenario_key: str, model: str, epoch: int = 0) -> bool:
    query = ResultRow.select(ResultRow.id).where(
        (ResultRow.run == run_id) & (ResultRow.scenario_key == scenario_key) & (ResultRow.model == model)
        & (ResultRow.epoch == _epoch(epoch)))
    with _connection():
        return query.exists()


@_reconnecting
def list_results(run_id: str) -> list[Result]:
    """The run's results ordered by (scenario key, model, epoch).

    Sorted in Python, so the order is the same on every backend and collation.
    """
    with _connection():
        _get_row(run_id)
        rows = list(_results_query(run_id))
    return [_to_result(row) for row in sorted(rows, key=lambda r: (r.scenario_key, r.model, r.epoch))]


@_reconnecting
def missing_pairs(run_id: str) -> list[tuple[str, str, int]]:
    """Expected (scenario, model, epoch) with no persisted row, in catalog order (epoch-major, then
    scenario, then the run's model order: a run's first epoch goes out before its second)."""
    with _connection():
        return _missing(_get_row(run_id))


def _missing(run: Run) -> list[tuple[str, str, int]]:
    done = set(_pairs_query(run.id).tuples())
    return [pair for pair in _expected(run) if pair not in done]


def _expected(run: Run) -> list[tuple[str, str, int]]:
    if run.pairs is not None:
        return list(_pair_list(run.pairs))
    models = _loads(run.models)
    keys = _loads(run.scenario_order) or load_snapshot(run.digest).keys
    return [(key, model, epoch) for epoch in range(run.epochs or 1) for key in keys for model in models]


def expected_pairs(run_id: str) -> list[tuple[str, str, int]]:
    """Every pair the run expects, in catalog order (its chosen pairs for a rerun)."""
    with _connection():
        return _expected(_get_row(run_id))


def pair_statuses(run_id: str) -> dict[tuple[str, str, int], str]:
    """(scenario key, model, epoch) → status of each persisted result: one indexed query, no bodies."""
    query = (ResultRow.select(ResultRow.scenario_key, ResultRow.model, ResultRow.epoch, ResultRow.status)
             .where(ResultRow.run == run_id))
    with _connection():
        _get_row(run_id)
        rows = cast("Iterable[tuple[str, str, int, str]]", query.tuples())  # the stubs type rows as models
        return {(key, model, epoch): status for key, model, epoch, status in rows}


@_reconnecting
def progress(run_id: str) -> dict[str, int]:
    """expected / persisted / passed / failed / errored, from one indexed GROUP BY."""
    with _connection():
        run = _get_row(run_id)
        counts = {status: n for status, n in _progress_query(run_id).tuples()}
    return {"expected": run.expected, "persisted": sum(counts.values()), "passed": counts.get(PASSED, 0),
            "failed": counts.get(FAILED, 0), "errored": counts.get(ERRORED, 0)}


# -- finalize -------------------------------------------------------------------------------


#: Builds a report from the run's facts and its rows (``evaljobs.reports.build.build_report``): the
#: store reads and persists, the reports package decides what a report says, and the pipeline
#: (``pipeline.barrier.finalize``) brings the two together.
ReportBuilder = Callable[[dict[str, Any], list[ReportRow]], dict[str, Any]]


@_reconnecting
def finalize(run_id: str, build: ReportBuilder) -> Finalized:
    """Build (with ``build``), store and return the run's one report (invariant 3); idempotent.

    Finalize may be sent more than once. The run row is locked, an existing report
    is returned as is, and the report is written with ``WHERE report IS NULL``, so
    concurrent finalizers produce exactly one report and all return it.

    The cyclic garbage collector is paused for the duration (and restored in ``finally``, also
    when this raises): the report of a 4,000-pair run is tens of thousands of new objects, none
    of them in a cycle (plain dicts, lists and tuples of plain values, freed by reference
    counting), so the collector's passes during the build find nothing to free — they only cost
    time on the path from the last result to the report: 16-25 young-generation passes per
    finalize and, now and then, a full pass over every object of the process (30 ms and more in
    a worker or a bench process). Any garbage cycle made meanwhile is collected by the next pass
    after. The pause is process-wide, so other threads skip collections for those milliseconds.
    """
    with gc_paused():
        return _finalize(run_id, build)


def _finalize(run_id: str, build: ReportBuilder) -> Finalized:
    with _transaction():
        run = _get_row(run_id, lock=True)
        if run.report is not None:
            return Finalized(report=_loads(run.report), created=False)
        results = _report_results(run_id, batched=bool((_loads(run.options) or {}).get("batch")))
        if len(results) != run.expected:
            missing = _missing(run)
            raise Incomplete(f"run {run_id} has {len(results)} of {run.expected} pairs; "
                             f"missing: {_pair_text(missing, epochs=run.epochs or 1)}")
        finished = _now()
        report = build(_report_run(run, finished), results)
        errored = report["summary"]["errored"]  # every row counted under its model (reports.build_report)
        status = COMPLETE if not errored else FAILED_RUN if errored == len(results) else PARTIAL
        written = (
            Run.update(
                report=report_text(report),
                report_at=finished,
                finished_at=finished,
                status=status,
                persisted=len(results),
            )
            .where((Run.id == run_id) & Run.report.is_null())
            .execute()
        )
        if not written:  # unreachable while the row lock holds; never write a second report
            return Finalized(report=_loads(_get_row(run_id).report), created=False)
    return Finalized(report=report, created=True)


def _report_results(run_id: str, *, batched: bool = False) -> list[ReportRow]:
    """The run's results with what the report reads: no output, transcript or tool answers.

    The query is peewee's, but its rows are fetched at once from the cursor as plain tuples and
    kept as tuples (:class:`ReportRow`, not :class:`Result`), each distinct ``scores`` text parsed
    once and shared (the report only reads it): between the last result and the report, building a
    model row and parsing three JSON columns for each of 1,000 results took 130 ms; peewee's row
    iteration alone, 20 ms (finalize of 1,000 results: 42-46 ms through peewee's rows, 20-33 ms
    with ``fetchall``; BENCHMARKS.md, "What changed this round").
    """
    # the columns of reports.rows.ReportRow, in its order (all but ``details``, read apart)
    columns = [ResultRow._meta.fields[name] for name in ReportRow._fields if name != "details"]
    rows = _bound().execute(ResultRow.select(*columns).where(ResultRow.run == run_id)).fetchall()
    parsed: dict[str, dict[str, float]] = {"{}": {}}
    for text in {row[-2] for row in rows}:
        if text not in parsed:
            parsed[text] = json.loads(text)
    # the fetched tuple with its scores text swapped for the parsed dict and no details, made a
    # ReportRow by tuple.__new__: the namedtuple's own __new__ (a Python call with 16 arguments) cost
    # 10 ms for 4,000 rows
    new, row_type = tuple.__new__, _ROW
    results = [new(row_type, row[:-2] + (parsed[row[-2]], None, row[-1])) for row in rows]
    reused, judged = [], []
    judge_criteria = judged_names()
    for i, r in enumerate(results):
        if r.reused_from:
            reused.append(i)
        # the judge's prompt, raw answer, score and reason go into the report: read ``details`` only
        # for the pairs a judge was asked about (runs without a judge read nothing more)
        if r.fault == "judge_unavailable" or not judge_criteria.isdisjoint(r.scores):
            judged.append(i)
    _add_details(run_id, results, "reused", reused, ResultRow.reused_from.is_null(False))
    _add_details(run_id, results, "judge", judged)
    if batched:  # a batch run's report says what its batch prices saved (details.meta.batch)
        _add_details(run_id, results, "meta", list(range(len(results))))
    return results


_ROW = ReportRow


def _add_details(run_id: str, results: list[ReportRow], part: str, wanted: list[int],
                 where: peewee.Expression | None = None) -> None:
    """Put ``details[part]`` into the rows at ``wanted`` (a reused pair's saved calls, a judge's answer)."""
    if not wanted:
        return
    at = {results[i][:3]: i for i in wanted}
    query = (ResultRow.select(ResultRow.scenario_key, ResultRow.model, ResultRow.epoch, ResultRow.details)
             .where(ResultRow.run == run_id))
    if where is not None:
        query = query.where(where)
    for key, model, epoch, details in _bound().execute(query).fetchall():
        i = at.get((key, model, epoch))
        if i is not None:
            found = (_loads(details) or {}).get(part)
            if isinstance(found, dict):
                row = results[i]
                results[i] = row._replace(details={**(row.details or {}), part: found})


def _report_run(run: Run, finished: datetime) -> dict[str, Any]:
    epochs = run.epochs or 1
    # With epochs, a scenario's epoch pass rate is judged against its own pass threshold (JUnit,
    # --fail-under).
    scenarios = load_snapshot(run.digest).scenarios if epochs > 1 else None
    thresholds = {s.key: s.pass_threshold for s in scenarios} if scenarios is not None else None
    return {"thresholds": thresholds, "id": run.id, "catalog_name": run.catalog_name, "digest": run.digest,
            "models": _loads(run.models), "strategy": run.strategy, "expected": run.expected,
            "created_at": _iso(run.created_at), "started_at": _iso(run.started_at),
            "finished_at": _iso(finished), "context": _loads(run.context), "options": _loads(run.options),
            "epochs": run.epochs or 1, "scenario_order": _loads(run.scenario_order)}
