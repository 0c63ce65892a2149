"""Reviewers' labels, needing no session: exported, imported, held against the judges
(``evaljobs labels …``, ``evaljobs judge-agreement``), and a run's ``human`` block for its report.

Re-exported by :mod:`evaljobs.api`. A run's ``human`` block and the judges' agreement are
:mod:`evaljobs.reporting`'s (a report reads them), named here too.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from evaljobs import store
from evaljobs.errors import UsageError
from evaljobs.reporting import JudgeAgreement, agreement_of, human_review


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


__all__ = ["human_review", "export_labels", "judge_agreement", "import_labels", "JudgeAgreement"]
