"""What each page of the viewer shows, assembled from the store's indexed reads.

Plain Python (no Starlette, no Jinja): the routes turn request parameters into
these calls and hand the results to templates; tests and the benchmark call them
directly. Every number of a run page is computed from the run's cells (one indexed
query), so a running run and a finished one show the same columns.
"""
from __future__ import annotations

import math
import threading
from collections import Counter
from functools import cached_property, partial
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from evaljobs import store
from evaljobs.catalog.criteria import Shown, shown
from evaljobs.reports.build import percentile
from evaljobs.reports.caching import cache_block
from evaljobs.reports.compare import CHANGED, FAILED_ERRORED, FIXED, REGRESSED, Comparison, compare
from evaljobs.reports.variance import pass_rate
from evaljobs.store import pages as store_pages
from evaljobs.store import Cell, RunRow
from evaljobs.view import search
from evaljobs.view.epochs import EpochCell, epoch_cells
from evaljobs.view.runlist import RUNS_LIMIT, RunListItem, run_list  # noqa: F401 - the runs page's query

PAGE_SIZE = 50
#: Order of statuses when sorting by a model's column: the interesting ones first.
_STATUS_RANK = {"errored": 0, "failed": 1, "pending": 2, "passed": 3}
PAIR_STATUSES = ("passed", "failed", "errored", "pending")


class NotFound(LookupError):
    """A run or scenario the URL names does not exist (a 404, one line)."""


# -- a run -----------------------------------------------------------------------------------------------


@dataclass
class ModelRow:
    model: str
    results: int
    passed: int
    failed: int
    errored: int
    pass_rate: float
    interval: tuple[float, float] | None
    mean_score: float
    #: The sum of the known costs; ``cost_unknown`` pairs had no known price (shown as "≥ $X").
    cost: float
    input_tokens: int
    output_tokens: int
    p50_ms: int | None
    p95_ms: int | None
    durations: list[int] = field(default_factory=list, repr=False)
    cost_unknown: int = 0
    #: Time to first token p50/p95 over the pairs that recorded one (streaming calls); None: none did.
    ttft_p50_ms: int | None = None
    ttft_p95_ms: int | None = None
    #: With epochs: scenarios whose epochs disagree for this model (one passed, one failed).
    flaky: int = 0
    #: The provider's prompt cache over the model's pairs (:func:`evaljobs.reports.cache_block`).
    cache: dict[str, Any] | None = None


@dataclass
class GridRow:
    key: str
    group: str | None
    tags: tuple[str, ...]
    prompt: str
    cells: list[tuple[str, Cell | EpochCell | None]]  # (model, cell) in column order

    @property
    def cost(self) -> float | None:
        """The known costs of the row's cells; None when none is known (an unknown price is not $0)."""
        known = [c.cost for _, c in self.cells if c and c.cost is not None]
        return round(sum(known), 6) if known or not any(c for _, c in self.cells) else None

    @property
    def slowest_ms(self) -> int | None:
        return max((c.duration_ms for _, c in self.cells if c), default=None)


@dataclass
class RunPage:
    run: RunRow
    state: store_pages.RunState
    models: list[ModelRow]
    verdict: list[ModelRow]
    columns: list[str]
    rows: list[GridRow]
    matched: int
    page: int
    pages: int
    faults: list[str]
    tags: list[str]
    groups: list[str]
    total_cost: float
    #: The run's epochs per pair: above 1, a cell is an :class:`~evaljobs.view.epochs.EpochCell`.
    epochs: int = 1
    #: Rows (pair × epoch) whose cost is unknown, and every row: ``total_cost`` is a lower bound then.
    cost_unknown: int = 0
    results: int = 0
    #: The provider's prompt cache over the run's pairs (the report's ``summary.cache``).
    cache: dict[str, Any] | None = None

    @property
    def cost(self) -> float:
        return self.total_cost


def wilson(passed: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval of a pass rate (95 %): honest for small n and rates near 0 or 1."""
    if n <= 0:
        return None
    p = passed / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def model_rows(models: list[str], cells: Iterable[Cell]) -> list[ModelRow]:
    by: dict[str, list[Cell]] = {m: [] for m in models}
    for cell in cells:
        by.setdefault(cell.model, []).append(cell)
    out = []
    for model, rows in by.items():
        n = len(rows)
        passed = sum(1 for c in rows if c.status == "passed")
        failed = sum(1 for c in rows if c.status == "failed")
        durations = sorted(c.duration_ms for c in rows)
        p50, p95 = percentile(durations, 50), percentile(durations, 95)
        ttfts = sorted(int(c.ttft_ms) for c in rows if c.ttft_ms is not None)
        out.append(ModelRow(
            model=model, results=n, passed=passed, failed=failed, errored=n - passed - failed,
            pass_rate=pass_rate(passed, n), interval=wilson(passed, n),
            mean_score=(sum(c.score for c in rows) / n) if n else 0.0,
            cost=round(sum(c.cost for c in rows if c.cost is not None), 6),
            cost_unknown=sum(1 for c in rows if c.cost is None),
            input_tokens=sum(c.input_tokens for c in rows), output_tokens=sum(c.output_tokens for c in rows),
            p50_ms=p50, p95_ms=p95, durations=durations,
            ttft_p50_ms=percentile(ttfts, 50), ttft_p95_ms=percentile(ttfts, 95), cache=cache_block(rows)))
    return out


def _catalog(digest: str):
    try:
        return store.load_snapshot(digest)
    except store.UnknownSnapshot:
        return None


def _scenario_digest(digest: str, judges: tuple[str | None, str | None], key: str) -> str | None:
    """What decides scenario ``key``'s verdict in the run (its snapshot's scenario, with the run's judge when
    judged); None when the snapshot or the scenario is gone."""
    try:
        return store.verdict_digest_in(digest, key, judges)
    except store.UnknownSnapshot:
        return None


def _options(run_id: str) -> dict[str, Any]:
    """A run's options (what its judges are read from: rows stored before they carried their digest)."""
    try:
        return store.get_run(run_id).options or {}
    except store.UnknownRun:
        return {}


catalog_of = _catalog  # the run's catalog snapshot (None when it is gone), for the other page modules


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


@dataclass
class _Row:
    """A scenario of the run with what filters and sorts read, computed once per index."""

    key: str
    group: str | None
    tags: tuple[str, ...]
    prompt: str
    text: str  # key and prompt, lower-cased, for the search


@dataclass
class RunIndex:
    """A run's cells and what every page of it derives from them: kept while the run is unchanged.

    A finished run never changes, and a running one only gains rows, so the index is reused
    while the run's highest row id is the same, and extended with just the new rows (read by
    id on the per-run index) when it is not. A page then costs the run's state, the filter
    and sort over its scenarios, and rendering one page — not a read of 10,000 rows.
    """

    run: RunRow
    last_id: int
    cells: list[Cell]
    by_pair: "Mapping[tuple[str, str], Cell | EpochCell]"
    rows: list[_Row]
    models: list[ModelRow]
    faults: list[str]
    tags: list[str]
    groups: list[str]
    total_cost: float
    counts: dict[str, int] = field(default_factory=dict)
    cost_unknown: int = 0
    #: For each row, its (model, cell) pairs in the run's model order, built once.
    grid: list[list[tuple[str, Cell | EpochCell | None]]] = field(default_factory=list)

    def state(self, status: str, expected: int) -> store_pages.RunState:
        c = self.counts
        return store_pages.RunState(status=status, expected=expected, persisted=len(self.cells),
                                    passed=c.get("passed", 0), failed=c.get("failed", 0),
                                    errored=c.get("errored", 0), finished=status in store.FINISHED_STATUSES,
                                    last_id=self.last_id)


_INDEX_LIMIT = 4
_indexes: "dict[str, RunIndex]" = {}
_indexes_lock = threading.Lock()


def _build_index(run: RunRow, cells: list[Cell], last_id: int) -> RunIndex:
    catalog = _catalog(run.digest)
    if run.pairs is not None:
        keys = list(dict.fromkeys(pair[0] for pair in run.pairs))
    elif run.scenario_order is not None:  # as the catalog's author wrote them
        keys = list(run.scenario_order)
    elif catalog is not None:
        keys = list(catalog.keys)
    else:
        keys = sorted({c.scenario_key for c in cells})
    scenarios = {s.key: s for s in catalog.scenarios} if catalog is not None else {}
    rows = []
    for key in keys:
        s = scenarios.get(key)
        prompt = s.prompt if s else ""
        rows.append(_Row(key, s.group if s else None, tuple(s.tags) if s else (), prompt,
                         f"{key}\n{prompt}".lower()))
    models = model_rows(run.models, cells)
    by_pair: Mapping[tuple[str, str], Cell | EpochCell]
    if run.epochs > 1:  # one cell per (scenario, model) over its epochs
        by_pair = over_epochs = epoch_cells(cells, run.epochs)
        flaky = Counter(cell.model for cell in over_epochs.values() if cell.flaky)
        for m in models:
            m.flaky = flaky.get(m.model, 0)
    else:
        by_pair = {(c.scenario_key, c.model): c for c in cells}
    grid = [[(m, by_pair.get((row.key, m))) for m in run.models] for row in rows]
    return RunIndex(run=run, last_id=last_id, cells=cells, by_pair=by_pair, grid=grid,
                    rows=rows, models=models,
                    faults=sorted({c.fault for c in cells if c.fault}),
                    tags=sorted({t for s in scenarios.values() for t in s.tags}),
                    groups=sorted({s.group for s in scenarios.values() if s.group}),
                    total_cost=round(sum(c.cost for c in cells if c.cost is not None), 6),
                    cost_unknown=sum(1 for c in cells if c.cost is None),
                    counts=dict(Counter(c.status for c in cells)))


def run_index(run_id: str) -> RunIndex:
    """The run's index, current as of now: reused, extended with the new rows, or built.

    Whether it is current costs two indexed reads (:func:`store_pages.head`), not a count.
    """
    try:
        status, _, persisted, last_id = store_pages.head(run_id)
    except store.UnknownRun as exc:
        raise NotFound(str(exc)) from None
    with _indexes_lock:
        index = _indexes.get(run_id)
    if index is not None and index.last_id == last_id and len(index.cells) == persisted \
            and index.run.status == status:
        return index
    try:
        run = store_pages.run(run_id)
    except store.UnknownRun as exc:
        raise NotFound(str(exc)) from None
    if index is not None and len(index.cells) < persisted and index.last_id < last_id:
        known = {c.id for c in index.cells}
        lookback = 0 if store.is_sqlite() else 256
        new = [c for c in store_pages.cells_after(run_id, max(0, index.last_id - lookback), limit=1_000_000)
               if c.id not in known]
        cells = index.cells + new
    else:
        cells = store_pages.cells(run_id)
    built = _build_index(run, cells, max((c.id for c in cells), default=0))
    with _indexes_lock:
        _indexes.pop(run_id, None)
        _indexes[run_id] = built
        while len(_indexes) > _INDEX_LIMIT:
            _indexes.pop(next(iter(_indexes)))
    return built


_searches: "dict[tuple, set[tuple[str, str]]]" = {}


def _search(run_id: str, last_id: int, count: int, text: str) -> set[tuple[str, str]]:
    """Pairs whose answer or key contains ``text``: one indexed query, kept while the run is unchanged."""
    version = (run_id, last_id, count, text)
    with _indexes_lock:
        hit = _searches.get(version)
    if hit is None:
        hit = store_pages.search(run_id, text)
        with _indexes_lock:
            if len(_searches) >= 32:
                _searches.clear()
            _searches[version] = hit
    return hit


def run_page(run_id: str, *, statuses: Iterable[str] = (), fault: str | None = None, model: str | None = None,
             tag: str | None = None, group: str | None = None, q: str | None = None, sort: str = "catalog",
             descending: bool = False, page: int = 1, page_size: int = PAGE_SIZE, regex: bool = False,
             differ: bool = False) -> RunPage:
    """One page of the run's grid. ``q`` is a substring (a regular expression with ``regex``: a
    :class:`~evaljobs.view.search.BadPattern` when it does not compile); ``differ`` keeps the scenarios
    whose answers are not all the same."""
    index = run_index(run_id)
    run, by_pair = index.run, index.by_pair
    state = index.state(run.status, run.expected)
    columns = [model] if model and model in run.models else list(run.models)
    every_model = columns == list(run.models)
    wanted = {s for s in statuses if s in PAIR_STATUSES}
    text = (q or "").strip() if regex else (q or "").strip().lower()
    version = (index.last_id, len(index.cells))
    if text and regex:
        found = search.regex_search(run_id, version, text)
    else:
        found = _search(run_id, index.last_id, len(index.cells), text) if text else set()
    differs = search.differing(run_id, version) if differ else None
    pattern = search.compile_pattern(text) if text and regex else None
    matched: list[tuple[_Row, list[tuple[str, Cell | EpochCell | None]]]] = []
    for row, cells in zip(index.rows, index.grid):
        if tag and tag not in row.tags:
            continue
        if group and row.group != group:
            continue
        key = row.key
        if not every_model:
            cells = [(m, by_pair.get((key, m))) for m in columns]
        if wanted and not any((c.status if c else "pending") in wanted for _, c in cells):
            continue
        if fault and not any(c is not None and _has_fault(c, fault) for _, c in cells):
            continue
        in_row = bool(pattern.search(row.text)) if pattern is not None else text in row.text
        if text and not in_row and not any((key, m) in found for m in columns):
            continue
        if differs is not None and key not in differs:
            continue
        matched.append((row, cells))
    matched = _sorted(matched, sort, descending)
    pages = max(1, math.ceil(len(matched) / page_size))
    page = min(max(1, page), pages)
    shown = [GridRow(key=row.key, group=row.group, tags=row.tags, prompt=row.prompt, cells=cells)
             for row, cells in matched[(page - 1) * page_size:page * page_size]]
    models = index.models
    verdict = sorted(
        (m for m in models if m.results), key=lambda m: (-m.pass_rate, -m.mean_score, m.cost, m.model)
    )
    return RunPage(run=run, state=state, models=models, verdict=verdict, columns=columns, rows=shown,
                   matched=len(matched), page=page, pages=pages, faults=index.faults, tags=index.tags,
                   groups=index.groups, total_cost=index.total_cost, epochs=run.epochs,
                   cost_unknown=index.cost_unknown, results=len(index.cells), cache=cache_block(index.cells))


def _has_fault(cell: "Cell | EpochCell", fault: str) -> bool:
    return cell.has_fault(fault) if isinstance(cell, EpochCell) else cell.fault == fault


def _sorted(rows: list, sort: str, descending: bool) -> list:
    """Sort (row, cells) pairs by a grid column: scenario, group, a model's status, cost, slowest; ``catalog``
    (the default) keeps the order the catalog's author wrote the scenarios in."""
    if sort == "catalog":
        return rows[::-1] if descending else rows
    if sort.startswith("m:"):
        model = sort[2:]

        def key(item):
            cell = dict(item[1]).get(model)
            return (
                _STATUS_RANK[cell.status if cell else "pending"],
                cell.score if cell else 0.0,
                item[0].key,
            )
    elif sort == "group":
        def key(item):
            return (item[0].group or "", item[0].key)
    elif sort == "cost":
        def key(item):
            return (sum(c.cost or 0.0 for _, c in item[1] if c), item[0].key)
    elif sort == "latency":
        def key(item):
            return (max((c.duration_ms for _, c in item[1] if c), default=0), item[0].key)
    else:
        def key(item):
            return item[0].key
    return sorted(rows, key=key, reverse=descending)


# -- a scenario ------------------------------------------------------------------------------------------


@dataclass
class ScenarioColumn:
    model: str
    result: Any  # Result | None
    baseline: Any  # Result | None
    flip: str | None
    #: With epochs: every recorded epoch of this model, by epoch (``result`` is the first).
    epochs: list[Any] = field(default_factory=list)
    #: The baseline's epochs of this model (a flip over epochs compares the two lists).
    baseline_epochs: list[Any] = field(default_factory=list)

    @property
    def baseline_passed(self) -> int:
        return sum(1 for r in self.baseline_epochs if r.status == "passed")

    @property
    def passed(self) -> int:
        return sum(1 for r in self.epochs if r.status == "passed")

    @property
    def flaky(self) -> bool:
        return self.passed > 0 and any(r.status == "failed" for r in self.epochs)


@dataclass
class ScenarioPage:
    run: RunRow
    key: str
    scenario: Any  # catalog Scenario | None
    columns: list[ScenarioColumn]
    baseline: RunRow | None
    baselines: list[RunRow]

    @property
    def expectations(self) -> list[Shown]:
        """The scenario's expectations as each criterion shows its own (none when the catalog is gone)."""
        return shown(self.scenario.expect) if self.scenario is not None else []


def scenario_page(run_id: str, key: str, *, baseline: str | None = None) -> ScenarioPage:
    try:
        run = store_pages.run(run_id)
    except store.UnknownRun as exc:
        raise NotFound(str(exc)) from None
    catalog = _catalog(run.digest)
    scenario = catalog.scenario(key) if catalog is not None and key in catalog else None
    results: dict[str, list[Any]] = {}
    for r in store_pages.scenario_results(run_id, key):  # by model, then epoch
        results.setdefault(r.model, []).append(r)
    if scenario is None and not results:
        raise NotFound(f"run {run_id} has no scenario {key!r}")
    base_run: RunRow | None = None
    base: dict[str, list[Any]] = {}
    if baseline:
        try:
            base_run = store_pages.run(baseline)
        except store.UnknownRun as exc:
            raise NotFound(str(exc)) from None
        for r in store_pages.scenario_results(baseline, key):
            base.setdefault(r.model, []).append(r)
    columns = []
    for model in list(run.models) + sorted(set(results) - set(run.models)):
        epochs, theirs = results.get(model, []), base.get(model, [])
        mine = epochs[0] if epochs else None
        flip = None
        # over epochs, as `compare` judges them: the epoch pass rate against the threshold
        if epochs and theirs:
            limit = {key: scenario.pass_threshold} if scenario is not None else None
            flip = compare(theirs, epochs, thresholds=limit).changes[0].kind
        columns.append(ScenarioColumn(model, mine, theirs[0] if theirs else None, flip, epochs, theirs))
    others = [r for r in store_pages.runs(limit=30, catalog=run.catalog_name) if r.id != run.id]
    return ScenarioPage(
        run=run, key=key, scenario=scenario, columns=columns, baseline=base_run, baselines=others
    )


# -- compare ---------------------------------------------------------------------------------------------


@dataclass
class ComparePage:
    a: RunRow
    b: RunRow
    comparison: Comparison
    latency: dict[str, tuple[int | None, int | None]]  # model → (p50 in A, p50 in B)

    @cached_property
    def flipped(self):
        return self.comparison.flipped

    @cached_property
    def changed(self):
        """Pairs whose scenario was edited between the runs: listed apart, never regressions."""
        return self.comparison.changed

    @cached_property
    def summary(self) -> dict[str, Any]:
        """The comparison's headline numbers, computed once (each is a pass over every pair)."""
        c = self.comparison
        return {"headline": c.headline(), "mean_score_delta": c.mean_score_delta, "cost_delta": c.cost_delta,
                "cost_unknown": c.cost_unknown,
                "only_a": len(c.only_a), "only_b": len(c.only_b)}


_comparisons: dict[tuple, "ComparePage"] = {}


def _side(run_id: str) -> RunIndex:
    return run_index(run_id)


def _thresholds(digest: str) -> dict[str, float] | None:
    """Scenario key → pass threshold of a run's catalog: what an epoch pass rate is judged against."""
    catalog = _catalog(digest)
    return {s.key: s.pass_threshold for s in catalog.scenarios} if catalog is not None else None


def compare_page(a: str, b: str) -> ComparePage:
    side_a, side_b = _side(a), _side(b)
    run_a, cells_a, run_b, cells_b = side_a.run, side_a.cells, side_b.run, side_b.cells
    version = (a, side_a.last_id, len(cells_a), b, side_b.last_id, len(cells_b))
    with _indexes_lock:
        known = _comparisons.get(version)
    if known is not None:
        return known

    def rows(cells: list[Cell]) -> list[dict[str, Any]]:
        return [{"scenario_key": c.scenario_key, "model": c.model, "status": c.status, "score": c.score,
                 "cost": c.cost, "fault": c.fault, "scenario_digest": c.scenario_digest,
                 "answered_by": c.answered_by} for c in cells]

    # a pair whose scenario was edited between the runs is "changed", not a regression; rows stored
    # before they carried the digest take their run snapshot's
    comparison = compare({"run": {"id": a, "models": run_a.models}, "results": rows(cells_a),
                          "summary": {"cache": cache_block(cells_a)}},
                         {"run": {"id": b, "models": run_b.models}, "results": rows(cells_b),
                          "summary": {"cache": cache_block(cells_b)}},
                         thresholds=_thresholds(run_b.digest),
                         digests_a=partial(_scenario_digest, run_a.digest, store.run_judges(_options(a))),
                         digests_b=partial(_scenario_digest, run_b.digest, store.run_judges(_options(b))),
                         order=run_b.scenario_order or run_a.scenario_order)
    lat_a = {m.model: m.p50_ms for m in side_a.models}
    lat_b = {m.model: m.p50_ms for m in side_b.models}
    latency = {m.model: (lat_a.get(m.model), lat_b.get(m.model)) for m in comparison.models}
    page = ComparePage(a=run_a, b=run_b, comparison=comparison, latency=latency)
    page.summary, page.flipped, page.changed  # noqa: B018 - computed before the page is shared between requests
    with _indexes_lock:
        if len(_comparisons) >= _INDEX_LIMIT:
            _comparisons.clear()
        _comparisons[version] = page
    return page


FLIP_KINDS = (REGRESSED, FIXED, FAILED_ERRORED, CHANGED)
