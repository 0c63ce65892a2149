"""A run's results as CSV (a spreadsheet) and JSON Lines (a script), for the viewer's export links.

CSV has one row per pair and epoch, with the answer and the judge's verdict in full; a cell that a
spreadsheet would read as a formula (``=``, ``+``, ``-``, ``@``, tab, carriage return first) is
prefixed with ``'``, since answers are model-written. JSON Lines has every stored field of each result
(the conversation, grader details, the timeline) one object a line, as ``Result.to_dict`` gives it.
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from typing import Any

COLUMNS = ("scenario_key", "model", "epoch", "status", "score", "fault", "error", "output", "duration_ms",
           "input_tokens", "output_tokens", "cost", "ttft_ms", "latency_ms", "attempts", "cached",
           "judge_model", "judge_score", "judge_reason", "reused_from")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA):
        return "'" + value
    return "" if value is None else value


def csv_text(results: Iterable[Any]) -> str:
    """The results as CSV (RFC 4180, a header row first)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    for r in results:
        judge = r.details.get("judge") if isinstance(r.details, dict) else None
        judge = judge if isinstance(judge, dict) else {}
        row = {**{name: getattr(r, name, None) for name in COLUMNS}, "judge_model": judge.get("model"),
               "judge_score": judge.get("score"), "judge_reason": judge.get("reason")}
        writer.writerow([_cell(row[name]) for name in COLUMNS])
    return out.getvalue()


def jsonl_text(results: Iterable[Any]) -> str:
    """The results as JSON Lines: one complete result a line."""
    return "".join(json.dumps(r.to_dict(), ensure_ascii=False, default=str) + "\n" for r in results)


__all__ = ["COLUMNS", "csv_text", "jsonl_text"]
