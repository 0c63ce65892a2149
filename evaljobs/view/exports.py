"""A run's results as CSV (a spreadsheet) and JSON Lines (a script), for the viewer's export links.

CSV has one row per pair and epoch, with the answer and the judge's verdict in full; a cell that a
spreadsheet would read as a formula (``=``, ``+``, ``-``, ``@``, tab, carriage return first) is
prefixed with ``'``, since answers are model-written. JSON Lines has every stored field of each result
(the conversation, grader details, the timeline) one object a line, as ``Result.to_dict`` gives it.

A reviewer's label sits beside the machine's verdict, never in it: CSV's ``human_*`` columns, JSON's
``human`` object (null when nobody reviewed the answer; ``run_id`` names the run it was reviewed in).
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from typing import Any

COLUMNS = ("scenario_key", "model", "epoch", "status", "score", "fault", "error", "output", "duration_ms",
           "input_tokens", "output_tokens", "cost", "ttft_ms", "latency_ms", "attempts", "cached",
           "judge_model", "judge_score", "judge_reason", "reused_from", "human_verdict", "human_score",
           "human_comment", "human_reviewer", "human_at", "human_run")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA):
        return "'" + value
    return "" if value is None else value


def _label(r: Any, labels: Mapping[tuple[str, str, int], Any] | None) -> Any:
    return (labels or {}).get((r.scenario_key, r.model, r.epoch))


def csv_text(results: Iterable[Any], labels: Mapping[tuple[str, str, int], Any] | None = None) -> str:
    """The results as CSV (RFC 4180, a header row first), each with its label (``store.labels_for_run``)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    for r in results:
        judge = r.details.get("judge") if isinstance(r.details, dict) else None
        judge = judge if isinstance(judge, dict) else {}
        row = {**{name: getattr(r, name, None) for name in COLUMNS}, "judge_model": judge.get("model"),
               "judge_score": judge.get("score"), "judge_reason": judge.get("reason")}
        label = _label(r, labels)
        if label is not None:
            row.update(human_verdict=label.verdict, human_score=label.score, human_comment=label.comment,
                       human_reviewer=label.reviewer, human_at=label.created_at, human_run=label.run_id)
        writer.writerow([_cell(row[name]) for name in COLUMNS])
    return out.getvalue()


def jsonl_text(results: Iterable[Any], labels: Mapping[tuple[str, str, int], Any] | None = None) -> str:
    """The results as JSON Lines: one complete result a line, with its label as ``human``."""
    lines = []
    for r in results:
        label = _label(r, labels)
        line = {**r.to_dict(), "human": label.as_dict() if label is not None else None}
        lines.append(json.dumps(line, ensure_ascii=False, default=str) + "\n")
    return "".join(lines)


__all__ = ["COLUMNS", "csv_text", "jsonl_text"]
