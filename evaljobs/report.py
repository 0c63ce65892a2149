"""The one report of a run: numbers per model and per criterion, a verdict, and renderings.

Domain code: no Dramatiq, peewee or httpx. ``build_report`` is a pure function of
the run and its results, so the report a finalizer stores is reproducible from
the persisted rows, and two finalizers given the same rows build the same dict.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any, Iterable

from .result import ERRORED, FAILED, PASSED, Result

#: A criterion score at or above this counts as passed (scores are floats in [0, 1]).
CRITERION_PASS = 0.999
#: How many failing pairs the Markdown rendering lists before summarizing the rest.
MARKDOWN_FAILURES = 25
_ERROR_CHARS = 120

_RUN_FIELDS = ("id", "catalog_name", "digest", "models", "strategy", "created_at", "started_at",
               "finished_at", "context")


def build_report(run: dict[str, Any], results: list[Result]) -> dict[str, Any]:
    """Assemble the report for ``run`` (id, catalog_name, digest, models, strategy,
    created_at, finished_at as ISO strings or None, optionally expected, started_at, context).

    Only plain JSON types (dict, list, str, int, float, bool, None) are used, so the
    stored report loads back equal to the one built.
    """
    ordered = sorted(results, key=lambda r: (r.scenario_key, r.model))
    models = _model_order(run.get("models") or [], ordered)
    per_model = [_model_block(model, [r for r in ordered if r.model == model]) for model in models]
    return {
        "run": _run_block(run),
        "summary": _summary(run, ordered),
        "models": per_model,
        "criteria": _criteria(models, ordered),
        "verdict": _verdict(per_model),
        "results": [_compact(r) for r in ordered],
    }


def percentile(values: Iterable[float], pct: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least ``pct``% of values at or below it."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _model_order(models: list[str], results: list[Result]) -> list[str]:
    extra = sorted({r.model for r in results} - set(models))
    return list(models) + extra


def _run_block(run: dict[str, Any]) -> dict[str, Any]:
    block = {name: run.get(name) for name in _RUN_FIELDS}
    block["models"] = list(run.get("models") or [])
    return block


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _tally(results: list[Result]) -> tuple[int, int, int]:
    statuses = Counter(r.status for r in results)
    return statuses[PASSED], statuses[FAILED], statuses[ERRORED]


def _summary(run: dict[str, Any], results: list[Result]) -> dict[str, Any]:
    passed, failed, errored = _tally(results)
    expected = run.get("expected")
    return {
        "expected": int(expected) if expected is not None else len(results),
        "results": len(results),
        "passed": passed,
        "failed": failed,
        "errored": errored,
        "pass_rate": _rate(passed, len(results)),
        "cost": round(sum(r.cost for r in results), 6),
        "duration_ms": int(sum(r.duration_ms for r in results)),
    }


def _model_block(model: str, results: list[Result]) -> dict[str, Any]:
    passed, failed, errored = _tally(results)
    durations = [r.duration_ms for r in results]
    faults = Counter(r.fault for r in results if r.fault)
    p50, p95 = percentile(durations, 50), percentile(durations, 95)
    return {
        "model": model,
        "scenarios": len(results),
        "passed": passed,
        "failed": failed,
        "errored": errored,
        "pass_rate": _rate(passed, len(results)),
        "mean_score": round(sum(r.score for r in results) / len(results), 4) if results else 0.0,
        "duration_p50_ms": int(p50) if p50 is not None else None,
        "duration_p95_ms": int(p95) if p95 is not None else None,
        "input_tokens": sum(r.input_tokens for r in results),
        "output_tokens": sum(r.output_tokens for r in results),
        "cost": round(sum(r.cost for r in results), 6),
        "faults": {fault: n for fault, n in sorted(faults.items(), key=lambda kv: (-kv[1], kv[0]))},
    }


def _criteria(models: list[str], results: list[Result]) -> list[dict[str, Any]]:
    names = sorted({name for r in results for name in r.scores})
    rows = []
    for name in names:
        for model in models:
            scores = [float(r.scores[name]) for r in results if r.model == model and name in r.scores]
            if not scores:
                continue
            rows.append({
                "criterion": name,
                "model": model,
                "mean": round(sum(scores) / len(scores), 4),
                "min": round(min(scores), 4),
                "max": round(max(scores), 4),
                "passed": sum(1 for s in scores if s >= CRITERION_PASS),
                "total": len(scores),
            })
    return rows


def _verdict(per_model: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ranked = sorted(per_model, key=lambda m: (-m["pass_rate"], -m["mean_score"], m["cost"], m["model"]))
    return [{"rank": i, "model": m["model"], "pass_rate": m["pass_rate"], "mean_score": m["mean_score"],
             "cost": m["cost"]} for i, m in enumerate(ranked, start=1)]


def _compact(result: Result) -> dict[str, Any]:
    return {
        "scenario_key": result.scenario_key,
        "model": result.model,
        "status": result.status,
        "score": round(float(result.score), 4),
        "fault": result.fault,
        "error": result.error,
        "duration_ms": int(result.duration_ms),
        "cost": round(float(result.cost), 6),
        "cached": bool(result.cached),
    }


# -- renderings ---------------------------------------------------------------------------------


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def _pct(rate: float) -> str:
    return f"{rate * 100:.1f}%"


def _money(cost: float) -> str:
    return f"${cost:.4f}"


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _short(text: str | None, limit: int = _ERROR_CHARS) -> str:
    if not text:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _failures(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["status"] != PASSED]


def _headline(report: dict[str, Any]) -> str:
    verdict = report["verdict"]
    if not verdict:
        return "no models"
    best = verdict[0]
    block = next(m for m in report["models"] if m["model"] == best["model"])
    tail = f"{block['passed']}/{block['scenarios']} passed, mean score {best['mean_score']:.3f}"
    if len(verdict) == 1:
        return f"`{best['model']}`: {_pct(best['pass_rate'])} ({tail})"
    return f"best: `{best['model']}` at {_pct(best['pass_rate'])} ({tail})"


def render_markdown(report: dict[str, Any]) -> str:
    """A PR-comment-sized summary: headline verdict, per-model table, failing pairs, details folded."""
    run, summary = report["run"], report["summary"]
    lines = [
        f"### evaljobs · {_cell(run.get('catalog_name') or '?')} — {_headline(report)}",
        "",
        f"Run `{run.get('id')}` · catalog digest `{(run.get('digest') or '')[:12]}` · "
        f"{summary['results']}/{summary['expected']} pairs · {summary['passed']} passed, "
        f"{summary['failed']} failed, {summary['errored']} errored · {_money(summary['cost'])}",
        "",
        "| Rank | Model | Pass rate | Passed | Failed | Errored | Mean score | p50 ms | p95 ms | Cost |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    blocks = {m["model"]: m for m in report["models"]}
    for entry in report["verdict"]:
        m = blocks[entry["model"]]
        lines.append(f"| {entry['rank']} | `{_cell(m['model'])}` | {_pct(m['pass_rate'])} | {m['passed']} | "
                     f"{m['failed']} | {m['errored']} | {m['mean_score']:.3f} | "
                     f"{_ms(m['duration_p50_ms'])} | {_ms(m['duration_p95_ms'])} | {_money(m['cost'])} |")
    failures = _failures(report)
    if failures:
        lines += ["", f"**Failing pairs ({len(failures)})**", "",
                  "| Scenario | Model | Status | Fault | Error |", "|---|---|---|---|---|"]
        for row in failures[:MARKDOWN_FAILURES]:
            lines.append(f"| `{_cell(row['scenario_key'])}` | `{_cell(row['model'])}` | {row['status']} | "
                         f"{_cell(row['fault'] or '')} | {_cell(_short(row['error']))} |")
        if len(failures) > MARKDOWN_FAILURES:
            lines.append(f"\n…and {len(failures) - MARKDOWN_FAILURES} more (see the JSON report).")
    else:
        lines += ["", "All pairs passed."]
    lines += _markdown_details(report)
    return "\n".join(lines) + "\n"


def _markdown_details(report: dict[str, Any]) -> list[str]:
    lines = ["", "<details><summary>Details</summary>", ""]
    if report["criteria"]:
        lines += ["| Criterion | Model | Mean | Min | Max | Passed |", "|---|---|---:|---:|---:|---:|"]
        for c in report["criteria"]:
            lines.append(f"| {_cell(c['criterion'])} | `{_cell(c['model'])}` | {c['mean']:.3f} | "
                         f"{c['min']:.3f} | {c['max']:.3f} | {c['passed']}/{c['total']} |")
        lines.append("")
    lines += ["| Model | Tokens in | Tokens out | Faults |", "|---|---:|---:|---|"]
    for m in report["models"]:
        faults = ", ".join(f"{name} × {n}" for name, n in m["faults"].items()) or "none"
        lines.append(f"| `{_cell(m['model'])}` | {m['input_tokens']:,} | {m['output_tokens']:,} | "
                     f"{_cell(faults)} |")
    lines += ["", "</details>"]
    return lines


def render_table(report: dict[str, Any]) -> str:
    """A fixed-width terminal table, one line per model, then failing pairs and the verdict."""
    run, summary = report["run"], report["summary"]
    header = ("MODEL", "SCEN", "PASS", "FAIL", "ERR", "PASS%", "MEAN", "P50 MS", "P95 MS", "COST")
    rows = [(m["model"], str(m["scenarios"]), str(m["passed"]), str(m["failed"]), str(m["errored"]),
             _pct(m["pass_rate"]), f"{m['mean_score']:.3f}", _ms(m["duration_p50_ms"]),
             _ms(m["duration_p95_ms"]), _money(m["cost"])) for m in report["models"]]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:]))
        return "  ".join([first, *rest]).rstrip()

    out = [f"{run.get('catalog_name') or '?'}  run {run.get('id')}  "
           f"{summary['results']}/{summary['expected']} pairs  "
           f"{_pct(summary['pass_rate'])} passed  {_money(summary['cost'])}",
           line(header), *(line(row) for row in rows)]
    failures = _failures(report)
    if failures:
        out.append("")
        out.append(f"not passed ({len(failures)}):")
        for row in failures:
            fault = f" [{row['fault']}]" if row["fault"] else ""
            error = f": {_short(row['error'], 80)}" if row["error"] else ""
            out.append(f"  {row['scenario_key']} × {row['model']}  {row['status']}{fault}{error}")
    ranking = " > ".join(f"{v['rank']}. {v['model']} ({_pct(v['pass_rate'])})" for v in report["verdict"])
    out += ["", f"verdict: {ranking or 'no models'}"]
    return "\n".join(out) + "\n"
