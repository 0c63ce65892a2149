"""The runs list of the viewer: newest runs with their pass rate per model.

A finished run's numbers come from its stored report (extracted in SQL); a running
one's from a GROUP BY per run. Kept apart from :mod:`evaljobs.view.queries` (which
re-exports it) so each module stays one page's worth of reads.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable

from evaljobs import store
from evaljobs.reports.variance import pass_rate
from evaljobs.store import pages as store_pages
from evaljobs.store import RunRow

RUNS_LIMIT = 50


@dataclass
class RunListItem:
    run: RunRow
    models: list[dict[str, Any]]  # {model, pass_rate, results}
    #: The known costs (``cost_unknown`` of ``results`` rows had none): shown as the reports show it.
    cost: float
    pass_rate: float | None
    cost_unknown: int = 0
    results: int = 0

    @property
    def duration_s(self) -> float | None:
        r = self.run
        if r.started_at is None:
            return None
        end = r.finished_at or datetime.now(timezone.utc)
        return max(0.0, (end - r.started_at).total_seconds())


def run_list(*, statuses: Iterable[str] = (), catalog: str | None = None, model: str | None = None,
             since: datetime | None = None, until: datetime | None = None,
             limit: int = RUNS_LIMIT) -> list[RunListItem]:
    rows = store_pages.runs(
        limit=limit,
        statuses=tuple(statuses),
        catalog=catalog or None,
        model=model or None,
        since=since,
        until=until,
    )
    reported = store_pages.report_models([r.id for r in rows if r.status in store.FINISHED_STATUSES])
    tallies = store_pages.model_tallies([r.id for r in rows if r.id not in reported])
    items = []
    for row in rows:
        if row.id in reported:
            blocks, summary = reported[row.id]
            models = [
                {"model": b["model"], "pass_rate": b["pass_rate"], "results": b["scenarios"]} for b in blocks
            ]
            items.append(RunListItem(row, models, float(summary.get("cost") or 0.0), summary.get("pass_rate"),
                                     int(summary.get("cost_unknown") or 0), int(summary.get("results") or 0)))
            continue
        per = tallies.get(row.id, {})
        models, cost, passed, total, unknown = [], 0.0, 0, 0, 0
        for model in row.models:
            t = per.get(model, {})
            n = int(t.get("passed", 0) + t.get("failed", 0) + t.get("errored", 0))
            models.append({"model": model, "pass_rate": pass_rate(int(t.get("passed", 0)), n) if n else None,
                           "results": n})
            cost += t.get("cost", 0.0)
            unknown += int(t.get("cost_unknown", 0))
            passed += int(t.get("passed", 0))
            total += n
        items.append(
            RunListItem(
                row, models, round(cost, 6), pass_rate(passed, total) if total else None, unknown, total
            )
        )
    return items
