"""Runs: creating one (expected pairs, snapshot), reading it, and its status transitions.

Each function is one short statement or transaction; a status change is a
conditional UPDATE, so concurrent workers and processes agree without locks
held in Python.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Sequence

from peewee import fn

from evaljobs.catalog import Catalog
from evaljobs.errors import EXIT_INTERRUPTED
from evaljobs.reports.gate import Verdict, hold
from evaljobs.store.connections import _connection, _reconnecting, _transaction
from evaljobs.store.errors import UnknownRun
from evaljobs.store.schema import (CANCELLED, FAILED_RUN, FINISHED_STATUSES, INTERRUPTED, PENDING,
                                   RUN_STATUSES, RUNNING, ResultRow, Run, _aware, _dumps, _json_once, _loads,
                                   _now, database)
from evaljobs.store.snapshots import save_snapshot


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
    #: The explicit pairs of a run over a subset (a rerun), in order, as (scenario, model, epoch);
    #: None: every scenario × model × epoch.
    pairs: list[tuple[str, str, int]] | None = None
    #: How many times each scenario × model pair is evaluated (``--epochs``).
    epochs: int = 1
    #: True when ``Session.run``/``rerun`` returned right after submitting (a queued run on Redis
    #: without ``wait``): workers elsewhere evaluate it, so this is its state at submission and its
    #: report is for ``watch``. Never stored: a run read back from the database is not detached.
    detached: bool = False
    #: The catalog's scenario keys as its author wrote them (reports and the viewer list them so);
    #: None for a run stored before schema 5 (key order).
    scenario_order: list[str] | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    def gate(self, threshold: float | None = None, mode: str = "point") -> Verdict:
        """Whether this run passes: the one decision behind every command's exit code.

        A run in which every pair errored (``failed``) fails, naming the first error: nothing
        was evaluated. A run with no report fails a ``threshold`` (there is nothing to hold to
        it) and passes without one (``wait`` may simply have stopped early). Otherwise the
        report is held to ``threshold`` in ``mode`` (:func:`evaljobs.reports.gate.hold`:
        ``point`` or ``ci``); no threshold passes.
        """
        if self.status == INTERRUPTED and self.report is None:
            return Verdict(False, (resume_line(self),), EXIT_INTERRUPTED)
        if self.status == FAILED_RUN:
            first = _first_error(self.id)
            return Verdict.failed(f"error: run {self.id} failed: all {self.expected} pairs errored "
                                  f"(first: {first[:200]})")
        if self.report is None:
            if threshold is None:
                return Verdict(True)
            return Verdict.failed(f"FAIL: run {self.id} has no report to hold to "
                                  f"--fail-under {threshold:.1%}")
        if threshold is None:
            return Verdict(True)
        return hold(self.report, threshold, mode)


def resume_line(info: RunInfo) -> str:
    """The one line an interrupted run prints: what was kept, and the command that resumes it."""
    return (f"interrupted: run {info.id} kept {info.persisted}/{info.expected} pairs; "
            f"resume it with `evaljobs recover {info.id}` (same --db and --broker)")


@_reconnecting
def _first_error(run_id: str) -> str:
    """The error of the run's first errored pair by (scenario key, model, epoch), as the results list them."""
    with _connection():
        rows = (ResultRow.select(ResultRow.scenario_key, ResultRow.model, ResultRow.epoch, ResultRow.error)
                .where((ResultRow.run == run_id) & ResultRow.error.is_null(False) & (ResultRow.error != "")))
        found = sorted((r.scenario_key, r.model, r.epoch, r.error) for r in rows if r.error is not None)
    return found[0][3] if found else ""


def _info(row: Run) -> RunInfo:
    return RunInfo(id=row.id, digest=row.digest, catalog_name=row.catalog_name, models=_loads(row.models),
                   strategy=row.strategy, status=row.status, expected=row.expected, persisted=row.persisted,
                   context=_loads(row.context), options=_loads(row.options) or {},
                   created_at=_aware(row.created_at), started_at=_aware(row.started_at),
                   finished_at=_aware(row.finished_at), report=_loads(row.report), note=row.note,
                   pairs=list(_pair_list(row.pairs)) if row.pairs is not None else None,
                   epochs=row.epochs or 1, scenario_order=_order(row.scenario_order))


def _order(text: str | None) -> list[str] | None:
    return list(_json_once(text)) if text is not None else None


@lru_cache(maxsize=256)
def _pair_list(text: str) -> tuple[tuple[str, str, int], ...]:
    """A run's explicit pairs, parsed once per process (they never change once the run exists).

    Entries are [scenario, model, epoch]; a two-item entry (written before epochs existed) is epoch 0.
    """
    return tuple((entry[0], entry[1], int(entry[2]) if len(entry) > 2 else 0) for entry in json.loads(text))


@lru_cache(maxsize=256)
def _pair_set(text: str) -> frozenset[tuple[str, str, int]]:
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


def pair_label(key: str, model: str, epoch: int = 0, epochs: int = 1) -> str:
    """``key × model``, with ``#epoch`` when the run has several epochs (or the epoch is not 0)."""
    return f"{key} × {model}" + (f" #{epoch}" if epochs > 1 or epoch else "")


def _pair_text(pairs: list[tuple[str, str, int]], limit: int = 5, epochs: int = 1) -> str:
    shown = ", ".join(pair_label(*pair, epochs=epochs) for pair in pairs[:limit])
    return shown + (f" (+{len(pairs) - limit} more)" if len(pairs) > limit else "")


# -- runs -----------------------------------------------------------------------------------


def create_run(catalog: Catalog, models: list[str], *, strategy: str, context: dict | None = None,
               options: dict | None = None, pairs: list[tuple] | None = None, epochs: int = 1,
               order: Sequence[str] | None = None) -> RunInfo:
    """Snapshot the catalog and create a pending run expecting every scenario × model × epoch.

    ``epochs`` (``--epochs``): each scenario × model pair is evaluated that many times, each
    epoch a pair of its own (its own message, row, retries).

    With ``pairs`` (a rerun) the run expects exactly those pairs instead — (scenario, model) for
    epoch 0 or (scenario, model, epoch): each must name a catalog scenario, one of ``models`` and
    an epoch under ``epochs``, and every model must have at least one pair. They are stored in
    catalog order and the barrier, ``missing_pairs`` and ``finalize`` honour them, so the
    completion contract is the same as for a whole run.

    ``order``: the scenario keys as the reports list them (a rerun keeps its run's); by default the
    order the catalog was written in (:attr:`Catalog.order`).
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a whole number of 1 or more, not {epochs!r}")
    models = list(models)
    if not models:
        raise ValueError("a run needs at least one model: pass -m MODEL")
    repeated = sorted({m for m in models if models.count(m) > 1})
    if repeated:
        raise ValueError(f"model {repeated[0]!r} is given more than once: pass each model once")
    if not catalog.scenarios:
        raise ValueError(f"catalog {catalog.source} has no scenarios: add at least one")
    chosen = _check_pairs(catalog, models, pairs, epochs) if pairs is not None else None
    save_snapshot(catalog)
    run_id = "r_" + secrets.token_hex(6)
    row = dict(id=run_id, digest=catalog.digest, catalog_name=catalog.name,
               models=_dumps(models), strategy=strategy, status=PENDING,
               expected=len(chosen) if chosen is not None else len(catalog.scenarios) * len(models) * epochs,
               persisted=0, context=_dumps(context) if context is not None else None,
               options=_dumps(options or {}), created_at=_now(),
               pairs=_dumps(chosen) if chosen is not None else None, epochs=epochs,
               scenario_order=_dumps(_scenario_order(catalog, order)))
    with _connection():
        Run.insert(**row).as_rowcount().execute()
    return get_run(run_id)


def _scenario_order(catalog: Catalog, order: Sequence[str] | None) -> list[str]:
    """Every scenario key of ``catalog`` once: those ``order`` lists first, in its order, then the rest as
    the catalog lists them."""
    keys = set(catalog.keys)
    first = [key for key in dict.fromkeys(order or ()) if key in keys]
    listed = set(first)
    return first + [key for key in catalog.order if key not in listed]


def _check_pairs(catalog: Catalog, models: list[str], pairs: list[tuple], epochs: int) -> list[list]:
    wanted = [(str(p[0]), str(p[1]), int(p[2]) if len(p) > 2 else 0) for p in pairs]
    if not wanted:
        raise ValueError("a run over chosen pairs needs at least one pair")
    seen: set[tuple[str, str, int]] = set()
    for key, model, epoch in wanted:
        label = pair_label(key, model, epoch, epochs)
        if (key, model, epoch) in seen:
            raise ValueError(f"pair {label} is given more than once: pass each pair once")
        seen.add((key, model, epoch))
        if key not in catalog:
            raise ValueError(f"pair {label}: scenario {key!r} is not in catalog {catalog.name!r}")
        if model not in models:
            raise ValueError(f"pair {label}: model {model!r} is not one of the run's models "
                             f"({', '.join(models)})")
        if not 0 <= epoch < epochs:
            raise ValueError(
                f"pair {label}: epoch {epoch} is not one of the run's {epochs} epochs (0-{epochs - 1})"
            )
    unused = [m for m in models if m not in {model for _, model, _ in wanted}]
    if unused:
        raise ValueError(f"model {unused[0]!r} has no pair in this run: leave it out of the models")
    return [[key, model, epoch] for epoch in range(epochs) for key in catalog.keys for model in models
            if (key, model, epoch) in seen]


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
def count_runs(statuses: list[str] | tuple[str, ...]) -> dict[str, int]:
    """How many runs are in each of ``statuses`` (one indexed count per status: the run(status, ...)
    index)."""
    out = {}
    with _connection():
        for status in statuses:
            _check_status(status)
            out[status] = Run.select().where(Run.status == status).count()
    return out


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
def interrupt(run_id: str) -> bool:
    """pending/running → interrupted (SIGINT/SIGTERM in the process running it); False if it had
    already finished (its last pair may have landed while the process stopped)."""
    with _transaction():
        changed = (Run.update(status=INTERRUPTED)
                   .where((Run.id == run_id) & Run.status.in_([PENDING, RUNNING])).execute())
        if not changed:
            _get_row(run_id)
    return bool(changed)


@_reconnecting
def resume(run_id: str) -> bool:
    """cancelled/interrupted (and no report) → running, so ``recover`` evaluates its missing pairs and the
    run ends with its one report; False if it was neither."""
    with _transaction():
        changed = (Run.update(status=RUNNING, finished_at=None)
                   .where((Run.id == run_id) & Run.status.in_([CANCELLED, INTERRUPTED])
                          & Run.report.is_null()).execute())
        if not changed:
            _get_row(run_id)
    return bool(changed)


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


def release_judge_call(run_id: str) -> None:
    """Give back a judge call :func:`take_judge_call` reserved but the provider never answered (a 429,
    no permit): the pair asks again later, and its judgement must not take two of the cap's calls."""
    with _transaction():
        (Run.update(judge_calls=Run.judge_calls - 1)
         .where((Run.id == run_id) & (Run.judge_calls > 0)).execute())
