"""The one report of a run: numbers per model and per criterion, a verdict, and renderings.

Domain code: no Dramatiq, peewee or httpx. ``build_report`` is a pure function of
the run and its results, so the report a finalizer stores is reproducible from
the persisted rows, and two finalizers given the same rows build the same dict.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Iterable, TypeVar

from evaljobs import reports
from evaljobs.reports._format import cell as _cell, code as _code, short as _short, text as _text
from evaljobs.reports.judged import (decided, epochs_note, judge_entry, judged_groups, judgement_passed,
                                     markdown_judge)
from evaljobs.reports._format import (
    cost_line as _cost_line,
    ms_pair as _ms_pair,
    money as _money,
    pct as _pct,
    self_judge_note as _self_judge_note,
    signed_money as _signed_money,
)
from evaljobs.reports.caching import cache_block, cache_note
from evaljobs.reports.headline import headline, ranking as verdict_ranking
from evaljobs.catalog.criteria import judged_names
from evaljobs.catalog.subset import selection_note
from evaljobs.reports.rows import ReportRow, short_digest
from evaljobs.reports.variance import (epochs_block, markdown_lines as _epoch_markdown, pass_rate,
                                       table_lines as _epoch_table)
from evaljobs.evaluation.result import ERRORED, FAILED, PASSED, Result

if TYPE_CHECKING:  # the comparison is imported by the one renderer that shows it (start-up time)
    from evaljobs.reports.compare import Comparison

#: A criterion score at or above this counts as passed (scores are floats in [0, 1]).
CRITERION_PASS = 0.999
#: How many failing pairs the Markdown rendering lists before summarizing the rest.
MARKDOWN_FAILURES = 25
#: Caps for the other Markdown lists (models, flipped pairs, criterion rows).
MARKDOWN_MODELS = 40
MARKDOWN_FLIPS = 25
MARKDOWN_CRITERIA = 80
#: GitHub rejects comments over 65,536 characters; keep room for whatever wraps the report.
MARKDOWN_LIMIT = 60_000
_NAME_CHARS = 80

_RUN_FIELDS = ("id", "catalog_name", "digest", "models", "strategy", "created_at", "started_at",
               "finished_at", "context")
#: Only when set: reports of runs from before schema 5 keep their shape.
_OPTIONAL_RUN_FIELDS = ("order",)


_ORDER = attrgetter("scenario_key", "model", "epoch")


def build_report(run: dict[str, Any], results: "list[Result] | list[ReportRow]") -> dict[str, Any]:
    """Assemble the report for ``run`` (id, catalog_name, digest, models, strategy,
    created_at, finished_at as ISO strings or None, optionally expected, started_at, context,
    scenario_order: the pairs are listed as the catalog lists its scenarios, else by key).

    Only plain JSON types (dict, list, str, int, float, bool, None) are used, so the
    stored report loads back equal to the one built. One pass over the ordered rows
    collects what every section needs (the finalize of 4,000 rows is on the path from
    the last result to the report); sums are still ``sum()`` over lists in row order, so
    the numbers are the same on every Python (3.12's ``sum`` of floats is compensated).
    """
    ordered: list[Result | ReportRow] = sorted(results, key=_ORDER)
    models = _model_order(run.get("models") or [], ordered)
    epochs = int(run.get("epochs") or 1)
    with_epoch = epochs > 1
    by_model: dict[str, list[Any]] = {model: [] for model in models}
    criteria: dict[str, dict[str, list[float]]] = {}
    # per judged criterion (``Criterion.judged``) and model, each judgement's own pass (threshold, pass)
    judged: dict[str, dict[str, list[bool]]] = {}
    judge_criteria = judged_names()
    compact: list[dict[str, Any]] = []
    add = compact.append
    # Each pair's entry; round(float(x), 4 or 6) once per distinct score and cost (round() with digits goes
    # through a decimal string). 0.0 and -0.0 are equal but round to themselves: zeros are not looked up.
    score4: dict[float, float] = {}
    cost6: dict[float, float] = {}
    for r in ordered:
        model = r.model
        by_model[model].append(r)
        for name, value in r.scores.items():
            criteria.setdefault(name, {}).setdefault(model, []).append(float(value))
            if name in judge_criteria:  # as the grader decided it; rows stored before it did: score >= 1
                decision = judgement_passed(r.details)
                judged.setdefault(name, {}).setdefault(model, []).append(
                    value >= CRITERION_PASS if decision is None else decision)
        score, cost = r.score, r.cost
        if score:
            rounded = score4.get(score)
            if rounded is None:
                rounded = score4[score] = round(float(score), 4)
        else:
            rounded = float(score)
        if cost:
            cost_rounded = cost6.get(cost)
            if cost_rounded is None:
                cost_rounded = cost6[cost] = round(float(cost), 6)
        else:
            cost_rounded = None if cost is None else float(cost)
        if with_epoch:
            entry = {"scenario_key": r.scenario_key, "model": model, "epoch": r.epoch, "status": r.status,
                     "score": rounded, "fault": r.fault, "error": r.error, "duration_ms": int(r.duration_ms),
                     "cost": cost_rounded, "cached": bool(r.cached)}
        else:
            entry = {"scenario_key": r.scenario_key, "model": model, "status": r.status,
                     "score": rounded, "fault": r.fault, "error": r.error, "duration_ms": int(r.duration_ms),
                     "cost": cost_rounded, "cached": bool(r.cached)}
        if r.reused_from:
            entry["reused_from"] = r.reused_from
        digest = getattr(r, "scenario_digest", None)
        if digest:  # what `compare` tells a changed scenario by (rows stored before schema 5 have none)
            entry["scenario_digest"] = short_digest(digest)
        if r.answered_by:  # the model version the provider said answered (compare notes a change)
            entry["answered_by"] = r.answered_by
        if r.cache_read_tokens or r.cache_write_tokens:  # only then: reports without caching keep their shape
            entry.update(cache_read_tokens=r.cache_read_tokens, cache_write_tokens=r.cache_write_tokens,
                         cache_saving=r.cache_saving)
        if r.details:
            entry.update(judge_entry(r.details))
        add(entry)
    in_catalog_order = None
    if run.get("scenario_order"):
        # the rows as the catalog lists its scenarios (runs before schema 5: by key); every sum above
        # was taken in key order, so the numbers do not depend on the order the catalog was written in
        position = {key: i for i, key in enumerate(run["scenario_order"])}
        last = len(position)

        def in_catalog_order(entries: list[dict[str, Any]]) -> None:
            entries.sort(key=lambda entry: position.get(entry["scenario_key"], last))  # stable: by model

        in_catalog_order(compact)
        run = {**run, "order": "catalog"}  # the report says so (compare lists its pairs that way)
    per_model = [_model_block(model, by_model[model]) for model in models]
    report: dict[str, Any] = {
        "run": _run_block(run),
        "summary": _summary(run, ordered, per_model),
        "models": per_model,
        "criteria": _criteria(models, criteria, judged),
        "verdict": _verdict(per_model),
        "results": compact,
    }
    if with_epoch:  # only then: a single-epoch report is what it was before epochs existed
        report["run"]["epochs"] = epochs
        report["epochs"] = epochs_block(ordered, models, epochs, run.get("thresholds"))
        if in_catalog_order is not None:  # its per-model figures were taken in key order (above)
            in_catalog_order(report["epochs"]["pairs"])
    return report


_Number = TypeVar("_Number", int, float)


def percentile(values: Iterable[_Number], pct: float) -> _Number | None:
    """Nearest-rank percentile: the smallest value with at least ``pct``% of values at or below it."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def _model_order(models: list[str], results: list[Any]) -> list[str]:
    extra = sorted({r.model for r in results} - set(models))
    return list(models) + extra


def _run_block(run: dict[str, Any]) -> dict[str, Any]:
    block = {name: run.get(name) for name in _RUN_FIELDS}
    block.update({name: run[name] for name in _OPTIONAL_RUN_FIELDS if run.get(name)})
    block["models"] = list(run.get("models") or [])
    # Scenarios an import left out (ActiveAgent production_only): the report must say so.
    block["excluded"] = int((run.get("options") or {}).get("excluded") or 0)
    selection = (run.get("options") or {}).get("selection")
    if selection:  # --filter/--tag/--sample/--limit: the report says what was left out
        block["selection"] = selection
    self_judge = (run.get("options") or {}).get("self_judge")
    if self_judge:  # --allow-self-judge: a model graded its own answers, and every report says so
        block["self_judge"] = list(self_judge)
    return block


def _reused_note(summary: dict[str, Any]) -> str:
    if not summary.get("reused"):
        return ""
    return (f" · {summary['reused']} reused from {', '.join(summary['reused_from'])} "
            f"({summary['calls_saved']} provider calls saved)")


def _excluded_note(run: dict[str, Any]) -> str:
    n = run.get("excluded") or 0
    selected = f" · {selection_note(run.get('selection'))}" if run.get("selection") else ""
    return (f" · {n} production_only scenario{'s' if n != 1 else ''} left out" if n else "") + selected \
        + _self_judge_note(run)


def _summary(run: dict[str, Any], results: list[Any], per_model: list[dict[str, Any]]) -> dict[str, Any]:
    passed = sum(m["passed"] for m in per_model)
    failed = sum(m["failed"] for m in per_model)
    errored = sum(m["errored"] for m in per_model)
    expected = run.get("expected")
    reused = [r for r in results if r.reused_from]
    if reused:  # --reuse: only then, so other reports keep their shape
        saved = sum(int(((r.details or {}).get("reused") or {}).get("calls") or 0) for r in reused)
        extra = {"reused": len(reused), "calls_saved": saved,
                 "reused_from": sorted({r.reused_from for r in reused if r.reused_from})}
    else:
        extra = {}
    batched = _batch_summary(results)
    if batched:  # a batch run: only then, so other reports keep their shape
        extra["batch"] = batched
    cache = cache_block(results)
    if cache:  # the provider's prompt cache was used: only then, so other reports keep their shape
        extra["cache"] = cache
    costs = [r.cost for r in results]
    known = [c for c in costs if c is not None]
    return {**extra,
        "expected": int(expected) if expected is not None else len(results),
        "results": len(results),
        "passed": passed,
        "failed": failed,
        "errored": errored,
        "pass_rate": pass_rate(passed, len(results)),  # the one definition
        "cost": round(sum(known), 6),  # known costs (a lower bound when cost_unknown is not 0)
        "cost_unknown": len(costs) - len(known),
        "duration_ms": int(sum([r.duration_ms for r in results])),
    }


def _batch_summary(results: list[Any]) -> dict[str, Any] | None:
    """What a batch run's batched pairs cost against the same calls one by one (``details.meta.batch``).

    ``saved`` is None when a price is unknown on either side: unknown is not zero.
    """
    marked = [(r, ((r.details or {}).get("meta") or {}).get("batch")) for r in results]
    batched = [(r, b) for r, b in marked if isinstance(b, dict)]
    if not batched:
        return None
    interactive = [cost for _, b in batched if (cost := b.get("interactive_cost")) is not None]
    paid = [r.cost for r, _ in batched if r.cost is not None]
    known = len(interactive) == len(paid) == len(batched)  # no price unknown on either side
    return {"pairs": len(batched),
            "interactive_cost": round(sum(interactive), 6) if known else None,
            "cost": round(sum(paid), 6) if known else None,
            "saved": round(sum(interactive) - sum(paid), 6) if known else None}


def _batch_note(summary: dict[str, Any]) -> str:
    batch = summary.get("batch")
    if not batch:
        return ""
    if batch.get("saved") is None:
        return f" · {batch['pairs']} pairs at batch prices (saving unknown: a price is unknown)"
    return (f" · {batch['pairs']} pairs at batch prices: ${batch['cost']:.4f} instead of "
            f"${batch['interactive_cost']:.4f} (saved ${batch['saved']:.4f})")


def _ms_percentile(values: list[float | None], pct: float) -> int | None:
    found = percentile([v for v in values if v is not None], pct)
    return int(round(found)) if found is not None else None


def _model_block(model: str, results: list[Any]) -> dict[str, Any]:
    statuses = Counter([r.status for r in results])
    passed, failed, errored = statuses[PASSED], statuses[FAILED], statuses[ERRORED]
    durations = sorted([r.duration_ms for r in results])
    faults = Counter([r.fault for r in results if r.fault])
    p50, p95 = percentile(durations, 50), percentile(durations, 95)
    ttfts = sorted([r.ttft_ms for r in results if r.ttft_ms is not None])
    latencies = sorted([r.latency_ms for r in results if r.latency_ms is not None])
    costs = [r.cost for r in results]
    known = [c for c in costs if c is not None]
    cache = cache_block(results)
    return {**({"cache": cache} if cache else {}),
        "model": model,
        "scenarios": len(results),
        "passed": passed,
        "failed": failed,
        "errored": errored,
        "pass_rate": pass_rate(passed, len(results)),  # the one definition
        "mean_score": round(sum([r.score for r in results]) / len(results), 4) if results else 0.0,
        "duration_p50_ms": int(p50) if p50 is not None else None,
        "duration_p95_ms": int(p95) if p95 is not None else None,
        "ttft_p50_ms": _ms_percentile(ttfts, 50),
        "ttft_p95_ms": _ms_percentile(ttfts, 95),
        "latency_p50_ms": _ms_percentile(latencies, 50),
        "latency_p95_ms": _ms_percentile(latencies, 95),
        "input_tokens": sum([r.input_tokens for r in results]),
        "output_tokens": sum([r.output_tokens for r in results]),
        "cost": round(sum(known), 6),
        "cost_unknown": len(costs) - len(known),
        "cached": sum([1 for r in results if r.cached]),
        "faults": {fault: n for fault, n in sorted(faults.items(), key=lambda kv: (-kv[1], kv[0]))},
    }


def _criteria(models: list[str], collected: dict[str, dict[str, list[float]]],
              judged: dict[str, dict[str, list[bool]]]) -> list[dict[str, Any]]:
    """One row per criterion × model, from the scores collected per criterion and model in row order."""
    rows = []
    for name in sorted(collected):
        per_model = collected[name]
        for model in models:
            scores = per_model.get(model)
            if not scores:
                continue
            rows.append({
                "criterion": name,
                "model": model,
                "mean": round(sum(scores) / len(scores), 4),
                "min": round(min(scores), 4),
                "max": round(max(scores), 4),
                "passed": (sum(judged[name][model]) if model in judged.get(name, {})
                           else sum([1 for s in scores if s >= CRITERION_PASS])),
                "total": len(scores),
            })
    return rows


def _verdict(per_model: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ranked = sorted(per_model, key=lambda m: (-m["pass_rate"], -m["mean_score"], m["cost"], m["model"]))
    return [{"rank": i, "model": m["model"], "pass_rate": m["pass_rate"], "mean_score": m["mean_score"],
             "cost": m["cost"], "cost_unknown": m["cost_unknown"]} for i, m in enumerate(ranked, start=1)]


# -- renderings ---------------------------------------------------------------------------------


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _failures(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["status"] != PASSED]


def _headline(report: dict[str, Any]) -> str:
    verdict = report["verdict"]
    if not verdict:
        return "no models"
    def tail(best: dict[str, Any]) -> str:
        block = next(m for m in report["models"] if m["model"] == best["model"])
        return f"{block['passed']}/{block['scenarios']} passed, mean score {best['mean_score']:.3f}"

    return headline(verdict, name=_code, tail=tail)


def render_markdown(report: dict[str, Any], *, baseline: "dict[str, Any] | Comparison | None" = None) -> str:
    """A PR-comment-sized summary: headline verdict, per-model table, failing pairs, details folded.

    With ``baseline`` (the baseline run's report, or a ready :class:`Comparison`) a section
    lists the pairs that flipped. Every list is capped ("…and N more") and the text is kept
    under :data:`MARKDOWN_LIMIT` characters, because GitHub rejects longer comments.
    """
    sections = [_markdown_head(report), _epoch_markdown(report, _code)]
    if baseline is not None:
        compared = reports.compare  # loaded only with a baseline
        comparison = (baseline if isinstance(baseline, compared.Comparison)
                      else compared.compare(baseline, report))
        sections.append(_markdown_baseline(comparison))
    sections.append(_markdown_failures(report))
    text = "\n".join(line for section in [*sections, _markdown_details(report)] for line in section) + "\n"
    if len(text) > MARKDOWN_LIMIT:
        omitted = ["", "_Details omitted to fit a pull-request comment: see the JSON or HTML report._"]
        text = "\n".join(line for section in [*sections, omitted] for line in section) + "\n"
    return _clip(text, MARKDOWN_LIMIT)


def _clip(text: str, limit: int) -> str:
    """Last resort for absurd inputs: cut at a line boundary and say so."""
    if len(text) <= limit:
        return text
    note = f"\n\n…truncated ({len(text) - limit:,}+ more characters): see the JSON or HTML report.\n"
    cut = text.rfind("\n", 0, limit - len(note))
    return text[: max(cut, 0)] + note


def _markdown_head(report: dict[str, Any]) -> list[str]:
    run, summary = report["run"], report["summary"]
    lines = [
        f"### evaljobs · {_text(_short(run.get('catalog_name') or '?', _NAME_CHARS))} — {_headline(report)}",
        "",
        f"Run `{_cell(run.get('id'))}` · catalog digest `{(run.get('digest') or '').split(':')[-1][:12]}` · "
        f"{summary['results']}/{summary['expected']} pairs · {summary['passed']} passed, "
        f"{summary['failed']} failed, {summary['errored']} errored{_cached(report)} · "
        f"{_cost_line(summary, summary['results'])}{_excluded_note(run)}"
        f"{_reused_note(summary)}{_batch_note(summary)}{cache_note(summary.get('cache'))}",
        "",
        "| Rank | Model | Pass rate | Passed | Failed | Errored | Mean score | p50 ms | p95 ms "
        "| TTFT p50/p95 ms | Latency p50/p95 ms | Cost |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    blocks = {m["model"]: m for m in report["models"]}
    for entry in report["verdict"][:MARKDOWN_MODELS]:
        m = blocks[entry["model"]]
        lines.append(f"| {entry['rank']} | {_code(m['model'])} | {_pct(m['pass_rate'])} | {m['passed']} | "
                     f"{m['failed']} | {m['errored']} | {m['mean_score']:.3f} | "
                     f"{_ms(m['duration_p50_ms'])} | {_ms(m['duration_p95_ms'])} | "
                     f"{_ms_pair(m.get('ttft_p50_ms'), m.get('ttft_p95_ms'))} | "
                     f"{_ms_pair(m.get('latency_p50_ms'), m.get('latency_p95_ms'))} | "
                     f"{_money(m['cost'], m.get('cost_unknown', 0), m['scenarios'])} |")
    if len(report["verdict"]) > MARKDOWN_MODELS:
        lines.append(f"\n…and {len(report['verdict']) - MARKDOWN_MODELS} more models (see the JSON report).")
    return lines


def _cached(report: dict[str, Any]) -> str:
    cached = sum(1 for r in report["results"] if r.get("cached"))
    return f" ({cached} cached replay{'s' if cached != 1 else ''})" if cached else ""


def _markdown_failures(report: dict[str, Any]) -> list[str]:
    failures = _failures(report)
    if not failures:
        return ["", "All pairs passed."]
    lines = ["", f"**Failing pairs ({len(failures)})**", "",
             "| Scenario | Model | Status | Fault | Error |", "|---|---|---|---|---|"]
    for row in failures[:MARKDOWN_FAILURES]:
        lines.append(f"| {_code(row['scenario_key'])} | {_code(row['model'])} | {row['status']} | "
                     f"{_text(row['fault'] or '')} | {_text(_short(row['error']))} |")
    if len(failures) > MARKDOWN_FAILURES:
        lines.append(f"\n…and {len(failures) - MARKDOWN_FAILURES} more (see the JSON report).")
    return lines


def _signed_pp(value: float) -> str:
    return f"{value * 100:+.1f}pp"


def _markdown_baseline(comparison: Comparison) -> list[str]:
    c = comparison
    changed = f", {len(c.changed)} changed (scenario or judge changed, not counted)" if c.changed else ""
    lines = ["", f"**Compared with baseline `{_cell(c.run_a or '?')}`**: {len(c.regressed)} regressed, "
                 f"{len(c.fixed)} fixed, {len(c.failed_errored)} failed↔errored of {len(c.common)} "
                 f"common pairs{changed} · "
                 f"mean score {c.mean_score_delta:+.3f} · cost {_signed_money(c.cost_delta, c.cost_unknown)}"]
    if c.models:
        lines += ["", "| Model | Pass rate (baseline → now) | Δ | Regressed | Fixed |",
                  "|---|---:|---:|---:|---:|"]
        for m in c.models[:MARKDOWN_MODELS]:
            lines.append(f"| {_code(m.model)} | {_pct(m.pass_rate_a)} → {_pct(m.pass_rate_b)} | "
                         f"{_signed_pp(m.pass_rate_b - m.pass_rate_a)} | {m.regressed} | {m.fixed} |")
        if len(c.models) > MARKDOWN_MODELS:
            lines.append(f"\n…and {len(c.models) - MARKDOWN_MODELS} more models.")
    flipped = c.flipped
    if flipped:
        lines += ["", f"**Flipped pairs ({len(flipped)})**", "",
                  "| Change | Scenario | Model | Status | Δ score | Fault now |",
                  "|---|---|---|---|---:|---|"]
        for f in flipped[:MARKDOWN_FLIPS]:
            fault = f.after.fault if f.after else None
            lines.append(f"| {f.kind} | {_code(f.scenario_key)} | {_code(f.model)} | {f.transition} | "
                         f"{(f.score_delta or 0.0):+.3f} | {_text(fault or '')} |")
        if len(flipped) > MARKDOWN_FLIPS:
            lines.append(f"\n…and {len(flipped) - MARKDOWN_FLIPS} more (see `evaljobs compare`).")
    else:
        lines += ["", "No pair flipped."]
    if c.changed:
        lines += ["", f"**Changed scenarios ({len(c.changed)})**: the scenario or its judge changed between "
                      "the runs, so not counted as regressions or fixes", "", "| Scenario | Model | Status |",
                  "|---|---|---|"]
        lines += [f"| {_code(f.scenario_key)} | {_code(f.model)} | {f.transition} |"
                  for f in c.changed[:MARKDOWN_FLIPS]]
        if len(c.changed) > MARKDOWN_FLIPS:
            lines.append(f"\n…and {len(c.changed) - MARKDOWN_FLIPS} more (see `evaljobs compare`).")
    for label, pairs in (("Only in the baseline", c.only_a), ("Only in this run", c.only_b)):
        if pairs:
            shown = ", ".join(f"{_code(p.scenario_key, 40)} × {_code(p.model, 40)}" for p in pairs[:10])
            more = f" …and {len(pairs) - 10} more" if len(pairs) > 10 else ""
            lines += ["", f"{label} ({len(pairs)}): {shown}{more}"]
    return lines


def _markdown_details(report: dict[str, Any]) -> list[str]:
    lines = ["", "<details><summary>Details</summary>", ""]
    lines += markdown_judge(report, MARKDOWN_FAILURES)
    if lines[-1]:  # a table glued to the one before is parsed as its rows (CommonMark/GitHub)
        lines.append("")
    if report["criteria"]:
        lines += ["| Criterion | Model | Mean | Min | Max | Passed |", "|---|---|---:|---:|---:|---:|"]
        for c in report["criteria"][:MARKDOWN_CRITERIA]:
            lines.append(f"| {_text(c['criterion'])} | {_code(c['model'])} | {c['mean']:.3f} | "
                         f"{c['min']:.3f} | {c['max']:.3f} | {c['passed']}/{c['total']} |")
        if len(report["criteria"]) > MARKDOWN_CRITERIA:
            more = len(report["criteria"]) - MARKDOWN_CRITERIA
            lines.append(f"\n…and {more} more rows (see the JSON report).")
        lines.append("")
    lines += ["| Model | Tokens in | Tokens out | Faults |", "|---|---:|---:|---|"]
    for m in report["models"][:MARKDOWN_MODELS]:
        faults = ", ".join(f"{name} × {n}" for name, n in m["faults"].items()) or "none"
        lines.append(f"| {_code(m['model'])} | {m['input_tokens']:,} | {m['output_tokens']:,} | "
                     f"{_text(_short(faults, 200))} |")
    if len(report["models"]) > MARKDOWN_MODELS:
        lines.append(f"\n…and {len(report['models']) - MARKDOWN_MODELS} more models.")
    lines += ["", "</details>"]
    return lines


def render_table(report: dict[str, Any]) -> str:
    """A fixed-width terminal table, one line per model, then failing pairs and the verdict."""
    run, summary = report["run"], report["summary"]
    header = ("MODEL", "SCEN", "PASS", "FAIL", "ERR", "PASS%", "MEAN", "P50 MS", "P95 MS", "TTFT P50/P95",
              "LATENCY P50/P95", "COST")
    rows = [(m["model"], str(m["scenarios"]), str(m["passed"]), str(m["failed"]), str(m["errored"]),
             _pct(m["pass_rate"]), f"{m['mean_score']:.3f}", _ms(m["duration_p50_ms"]),
             _ms(m["duration_p95_ms"]), _ms_pair(m.get("ttft_p50_ms"), m.get("ttft_p95_ms")),
             _ms_pair(m.get("latency_p50_ms"), m.get("latency_p95_ms")),
             _money(m["cost"], m.get("cost_unknown", 0), m["scenarios"])) for m in report["models"]]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:]))
        return "  ".join([first, *rest]).rstrip()

    out = [f"{run.get('catalog_name') or '?'}  run {run.get('id')}  "
           f"{summary['results']}/{summary['expected']} pairs  "
           f"{_pct(summary['pass_rate'])} passed  {_cost_line(summary, summary['results'])}"
           f"{_excluded_note(run)}{_reused_note(summary)}{_batch_note(summary)}"
           f"{cache_note(summary.get('cache'))}",
           line(header), *(line(row) for row in rows), *_epoch_table(report)]
    failures = _failures(report)
    if failures:
        out.append("")
        out.append(f"not passed ({len(failures)}):")
        for row in failures:
            fault = f" [{row['fault']}]" if row["fault"] else ""
            error = f": {_short(row['error'], 80)}" if row["error"] else ""
            epoch = f" #{row['epoch']}" if "epoch" in row else ""
            out.append(f"  {row['scenario_key']} × {row['model']}{epoch}  {row['status']}{fault}{error}")
    judged = judged_groups(report)
    if judged:
        out.append("")
        out.append(f"judge ({sum(len(epochs) for _, epochs in judged)}):")
        for row, epochs in judged:
            j = row["judge"]
            score = "-" if j.get("score") is None else f"{float(j['score']):.2f}"
            out.append(
                f"  {row['scenario_key']} × {row['model']}{epochs_note(epochs)}  {j.get('model') or '?'} "
                f"score {score}{decided(j)}: {_short(j.get('reason') or '', 80)}  "
                f"raw: {_short(' '.join((j.get('raw') or '').split()), 80)}"
            )
    ranking = verdict_ranking(report["verdict"])
    out += ["", f"verdict: {ranking or 'no models'}"]
    return "\n".join(out) + "\n"
