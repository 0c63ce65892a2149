"""The judge's section of the reports: each distinct judgement of a pair once, with the epochs that got it.

A pair judged alike in five epochs is one line "× 5 epochs", not the same line five times.
"""
from __future__ import annotations

from typing import Any

from evaljobs.reports._format import code, short, text


def judge_entry(details: Any) -> dict[str, Any]:
    """The judge's model, prompt, raw answer, parsed score and reason, kept with the pair in the report, and
    what it decided against which threshold (when the grader decided it)."""
    judge = details.get("judge") if isinstance(details, dict) else None
    if not isinstance(judge, dict):
        return {}
    entry = {k: judge.get(k) for k in ("model", "score", "reason", "prompt", "raw")}
    if isinstance(judge.get("passed"), bool):
        entry.update(threshold=judge.get("threshold"), passed=judge["passed"])
    return {"judge": entry}


def judgement_passed(details: Any) -> bool | None:
    """Whether the llm_judge criterion passed as the grader decided it (its threshold, the judge's ``pass``):
    a judge score of 0.78 at threshold 0.7 passed. ``None`` for a row stored before the grader said."""
    judge = details.get("judge") if isinstance(details, dict) else None
    if isinstance(judge, dict) and isinstance(judge.get("passed"), bool):
        return judge["passed"]
    return None


def judged_groups(report: dict[str, Any]) -> list[tuple[dict[str, Any], list[int | None]]]:
    """(first row, epochs) per distinct (scenario, model, judge, score, reason, raw answer), in report
    order."""
    groups: dict[tuple, tuple[dict[str, Any], list[int | None]]] = {}
    for row in report["results"]:
        j = row.get("judge")
        if not j:
            continue
        key = (
            row["scenario_key"],
            row["model"],
            j.get("model"),
            j.get("score"),
            j.get("reason"),
            j.get("raw"),
        )
        groups.setdefault(key, (row, []))[1].append(row.get("epoch"))
    return list(groups.values())


def epochs_note(epochs: list[int | None]) -> str:
    """`` × 5 epochs`` for a judgement several epochs share, `` #2`` for one epoch's own, else nothing."""
    if len(epochs) > 1:
        return f" × {len(epochs)} epochs"
    return f" #{epochs[0]}" if epochs and epochs[0] is not None else ""


def decided(judge: dict[str, Any]) -> str:
    """`` (threshold 0.80: failed)``: what the judgement decided and against what, so a scenario that fails at
    a high score on its judge says why; nothing for a report stored before the judge decided its criterion."""
    passed, threshold = judge.get("passed"), judge.get("threshold")
    if not isinstance(passed, bool):
        return ""
    verdict = "passed" if passed else "failed"
    return f" (threshold {float(threshold):.2f}: {verdict})" if threshold is not None else f" ({verdict})"


def markdown_judge(report: dict[str, Any], limit: int) -> list[str]:
    """The Markdown judge table (at most ``limit`` rows), ending with its last row."""
    judged = judged_groups(report)
    if not judged:
        return []
    lines = ["", "**Judge**", "", "| Scenario | Model | Judge | Score | Reason | Raw answer |",
             "|---|---|---|---|---|---|"]
    for row, epochs in judged[:limit]:
        j = row["judge"]
        score = "-" if j.get("score") is None else f"{float(j['score']):.2f}"
        lines.append(
            f"| {code(row['scenario_key'])}{epochs_note(epochs)} | {code(row['model'])} | "
            f"{code(j.get('model') or '?')} | {score}{decided(j)} | {text(short(j.get('reason') or ''))} | "
            f"{text(short(j.get('raw') or ''))} |"
        )
    if len(judged) > limit:
        lines.append(f"\n…and {len(judged) - limit} more (the judge's prompts are in the JSON report).")
    return lines


__all__ = ["decided", "epochs_note", "judge_entry", "judged_groups", "judgement_passed", "markdown_judge"]
