"""Reviewers' labels, needing no session: exported, imported, held against the judges
(``evaljobs labels …``, ``evaljobs judge-agreement``), and a run's ``human`` block for its report.

Re-exported by :mod:`evaljobs.api`; :meth:`evaljobs.api.Session.report` reads it for a
run with labels.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from evaljobs import store
from evaljobs.errors import UsageError
from evaljobs.reports import human
from evaljobs.reports.agreement import MIN_KAPPA, Judged, agreements, render_agreements


def human_review(run_id: str) -> dict[str, Any] | None:
    """The reviewers' labels of a run as the report's ``human`` block (None: nobody reviewed it):
    counts, disagreements with the machine, and the pass rate with the human verdicts preferred."""
    labels = store.labels_for_run(run_id)
    if not labels:
        return None
    return human.human_review(store.list_results(run_id), {k: v.as_dict() for k, v in labels.items()}, run_id)


def export_labels(runs: Sequence[str] = (), *, db: str | None = None) -> list[dict[str, Any]]:
    """Reviewers' labels (all, or those given in ``runs``: ids, prefixes or ``latest``) as plain dicts,
    oldest first (``evaljobs labels export``: one JSON object a line)."""
    store.connect(db, create=False)
    return store.export_labels([store.resolve_run_id(r) for r in runs])


def judge_agreement(runs: Sequence[str] = (), *, db: str | None = None,
                    min_kappa: float | None = None) -> "JudgeAgreement":
    """How far each judge model agrees with the reviewers, per rubric (``evaljobs judge-agreement``):
    over the judged, labelled results of ``runs`` (ids, prefixes, ``latest``; default: every run a
    label was given in). A gating judge under ``min_kappa`` (default ``MIN_KAPPA``) is a warning."""
    store.connect(db, create=False)
    return agreement_of([store.resolve_run_id(r) for r in runs] or store.labelled_runs(), min_kappa)


def import_labels(path: str | Path, *, db: str | None = None) -> int:
    """Keep the labels of a JSONL export (``evaljobs labels import``); returns how many.

    A line that is not a label is one error naming the file and line; nothing is kept then.
    """
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{source}: cannot read labels: {exc}") from None
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{source}:{number}: not JSON ({exc.msg}): one label a line") from None
        if not isinstance(item, dict):
            raise UsageError(f"{source}:{number}: not a JSON object: one label a line")
        items.append((f"{source}:{number}", item))
    store.connect(db)
    return store.import_labels(items)


def agreement_of(ids: Sequence[str], min_kappa: float | None = None) -> "JudgeAgreement":
    """:func:`judge_agreement` over resolved run ids, on the store already connected."""
    runs = list(dict.fromkeys(ids))
    items = [Judged(**item) for run_id in runs for item in store.judged_labels(run_id)]
    floor = MIN_KAPPA if min_kappa is None else min_kappa
    return JudgeAgreement(runs=runs, agreements=agreements(items, min_kappa=floor))


@dataclass
class JudgeAgreement:
    """What :func:`judge_agreement` found: per judge model and rubric, an ``Agreement``."""

    runs: list[str]
    agreements: list[Any]

    @property
    def warnings(self) -> list[str]:
        return [w for a in self.agreements for w in a.warnings]

    def render(self) -> str:
        return render_agreements(self.agreements)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "agreements": [a.to_dict() for a in self.agreements]}


__all__ = ["human_review", "export_labels", "judge_agreement", "import_labels", "JudgeAgreement"]
