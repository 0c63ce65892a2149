"""One self-contained HTML file per run: header, verdict, tables, and a scenario × model grid.

The file works offline and fetches nothing: CSS and JavaScript are inline, and a
Content-Security-Policy (``default-src 'none'``, the script allowed by its hash)
makes the browser refuse any other script or resource, so even a model answer
that slipped through escaping could not run or phone home.

The grid is server-rendered (one small link per pair, so thousands of cells stay
compact and readable without JavaScript). Each pair's conversation, tool calls and
grades travel once, as JSON in a non-executed ``<script type="application/json">``
block with ``<``, ``>`` and ``&`` escaped; the page's script builds the detail panel
for the pair in the URL fragment (``#p12``) with ``textContent`` only, never
``innerHTML``. Links to a pair are therefore shareable.

Domain code: no Dramatiq, peewee or httpx.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from datetime import datetime
from typing import Any, Iterable

from evaljobs.reports._html_assets import SCRIPT as _SCRIPT, STYLE as _STYLE
from evaljobs.reports.caching import cache_note
from evaljobs.reports._format import (
    cost_line as _cost_line,
    ms_pair as _ms_pair,
    money as _money,
    pct as _pct,
    signed_money as _signed_money,
)
from evaljobs.reports.compare import Comparison, PairChange, compare
from evaljobs.reports.headline import headline
from evaljobs.evaluation.result import ERRORED, FAILED, PASSED, Result

#: Longest message, answer, argument or tool result kept per pair (the file must stay openable).
TEXT_CAP = 6000
_SURROGATES = re.compile("[\ud800-\udfff]")
_STATUS_CLASS = {PASSED: "p", FAILED: "f", ERRORED: "e"}


def _e(value: Any) -> str:
    """Escaped text for HTML content and quoted attributes."""
    return html.escape(_SURROGATES.sub("\ufffd", "" if value is None else str(value)), quote=True)


def _cap(text: str, limit: int = TEXT_CAP) -> str:
    return text if len(text) <= limit else text[:limit] + f"…[{len(text) - limit} more characters]"


def _capped(value: Any) -> Any:
    """A JSON value, or its truncated JSON text when it is too big to embed whole."""
    if isinstance(value, str):
        return _cap(value)
    text = json.dumps(value, default=str)
    return value if len(text) <= TEXT_CAP else _cap(text)


def _parse_time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def render_html(report: dict[str, Any], results: Iterable[Result] = (), *,
                baseline: "dict[str, Any] | Comparison | None" = None, title: str | None = None) -> str:
    """The run's report as one HTML document (a str; write it as UTF-8).

    ``results`` are the run's rows (``store.list_results``): they carry each pair's
    conversation, tool calls and grades, which the report dict does not keep.
    ``baseline`` (the baseline run's report, or a Comparison) marks flipped pairs.
    """
    run = report["run"]
    by_ident = {r.ident: r for r in results}
    comparison = None
    if baseline is not None:
        comparison = baseline if isinstance(baseline, Comparison) else compare(baseline, report)
    changes = {c.pair: c for c in comparison.changes} if comparison else {}
    rows = report["results"]
    index = {(r["scenario_key"], r["model"]): i for i, r in enumerate(rows)}
    texts = _Texts()
    pairs = [_pair_data(r, by_ident.get((r["scenario_key"], r["model"], r.get("epoch", 0))),
                        changes.get((r["scenario_key"], r["model"])), texts) for r in rows]
    page_title = title or f"evaljobs · {run.get('catalog_name') or '?'} · {run.get('id') or ''}"
    script_hash = base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode("ascii")
    csp = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src 'sha256-{script_hash}'; base-uri 'none'; form-action 'none'")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>{_e(page_title)}</title>",
        f"<style>{_STYLE}</style></head>",
        "<body>",
        '<ul id="errors" class="errors" hidden></ul>',
        '<main id="main">',
        *_header(report),
        *_verdict(report),
        *_models_table(report),
        *_epochs_tables(report),
        *(_baseline(comparison, index) if comparison else []),
        *_grid(report, index, changes),
        *_criteria_table(report),
        "</main>",
        '<aside id="panel" hidden><a id="close" href="#" title="Close (Esc)">×</a>'
        '<div id="panel-body"></div></aside>',
        '<noscript><p class="note">Enable JavaScript to open a pair\'s conversation, tool calls and grades.'
        "</p></noscript>",
        f'<script type="application/json" id="pairs">{_embed({"pairs": pairs, "texts": texts.items})}'
        "</script>",
        f"<script>{_SCRIPT}</script>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _embed(value: Any) -> str:
    """JSON that cannot end its <script> element or open a comment: <, > and & are \\u-escaped."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class _Texts:
    """Long message texts stored once: every model of a scenario shares its system prompt and
    user turns, and a long system prompt repeated over thousands of pairs would dominate the file."""

    MIN_CHARS = 64

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def ref(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.items)
            self.items.append(text)
        return self._index[text]


def _trim(data: dict[str, Any], keep: tuple[str, ...]) -> dict[str, Any]:
    """Drop empty fields (the script treats a missing field as empty) to keep thousands of pairs small."""
    return {k: v for k, v in data.items()
            if k in keep or not (v is None or v is False or v == "" or v == [] or v == {})}


def _pair_data(row: dict[str, Any], result: Result | None, change: PairChange | None,
               texts: _Texts) -> dict[str, Any]:
    data: dict[str, Any] = {
        "key": row["scenario_key"], "model": row["model"], "status": row["status"], "score": row["score"],
        "fault": row.get("fault"), "error": _cap(row["error"]) if row.get("error") else None,
        "duration_ms": row["duration_ms"], "cost": row["cost"], "cached": bool(row.get("cached")),
    }
    if change is not None and change.before is not None:
        data["baseline"] = {"kind": change.kind, "status": change.before.status, "score": change.before.score,
                            "score_delta": change.score_delta}
    if result is not None:
        details = dict(result.details or {})
        messages = details.pop("messages", None) or []
        data.update({
            "scores": result.scores,
            "grades": {k: _capped(v) for k, v in details.items() if k not in ("turns", "meta")},
            "turns": details.get("turns"),
            "meta": _capped(details["meta"]) if details.get("meta") else None,
            "input_tokens": result.input_tokens, "output_tokens": result.output_tokens,
            "attempts": result.attempts, "output": _cap(result.output or ""),
            "tool_calls": [_trim({"name": c.get("name"), "arguments": _capped(c.get("arguments")),
                                  "result": _capped(c.get("result")), "error": c.get("error"),
                                  "duration_ms": c.get("duration_ms")}, ("name",))
                           for c in result.tool_calls or []],
            # Always present with the rows (even empty): its absence tells the script there were no rows.
            "messages": [_message(m, texts) for m in messages if isinstance(m, dict)],
        })
    return _trim(data, ("key", "model", "status", "score", "duration_ms", "cost", "messages"))


def _message(message: dict[str, Any], texts: _Texts) -> dict[str, Any]:
    content = _capped(message.get("content"))
    out: dict[str, Any] = {"role": message.get("role")}
    if isinstance(content, str) and len(content) >= _Texts.MIN_CHARS:
        out["ref"] = texts.ref(content)
    else:
        out["content"] = content
    for key in ("tool_calls", "tool_call_id", "name"):
        if message.get(key):
            out[key] = _capped(message[key])
    return out


# -- server-rendered sections -----------------------------------------------------------------------


def _headline(report: dict[str, Any]) -> str:
    verdict = report["verdict"]
    if not verdict:
        return "no models"
    return headline(verdict)


def _header(report: dict[str, Any]) -> list[str]:
    run, s = report["run"], report["summary"]
    started, finished = _parse_time(run.get("started_at")), _parse_time(run.get("finished_at"))
    wall = f"{(finished - started).total_seconds():.1f} s" if started and finished else "-"
    facts = [
        ("Run", run.get("id")), ("Catalog", run.get("catalog_name")), ("Digest", run.get("digest")),
        ("Models", ", ".join(run.get("models") or [])), ("Strategy", run.get("strategy")),
        ("Created", run.get("created_at")), ("Started", run.get("started_at")),
        ("Finished", run.get("finished_at")), ("Wall time", wall),
        ("Pairs", f"{s['results']}/{s['expected']}: {s['passed']} passed, {s['failed']} failed, "
                  f"{s['errored']} errored ({_pct(s['pass_rate'])})" + _cached_note(report)),
        ("Cost", _cost_line(s, s["results"])),
    ]
    if s.get("cache"):
        facts.append(("Prompt cache", cache_note(s["cache"], lead="")))
    if run.get("self_judge"):
        facts.append(
            ("Self-judged", ", ".join(run["self_judge"]) + " judged its own answers (--allow-self-judge)")
        )
    if run.get("context"):
        facts.append(("Context", json.dumps(run["context"], ensure_ascii=False, sort_keys=True, default=str)))
    out = [f"<header><h1>evaljobs · {_e(run.get('catalog_name') or '?')} — {_e(_headline(report))}</h1>",
           '<dl class="facts">']
    out += [f"<dt>{_e(k)}</dt><dd>{_e(v if v is not None else '-')}</dd>" for k, v in facts]
    out += ["</dl></header>"]
    return out


def _cached_note(report: dict[str, Any]) -> str:
    cached = sum(1 for r in report["results"] if r.get("cached"))
    return f"; {cached} cached replay{'s' if cached != 1 else ''}" if cached else ""


def _verdict(report: dict[str, Any]) -> list[str]:
    pairs = {m["model"]: m["scenarios"] for m in report["models"]}
    items = [
        f"<li><b>{_e(v['model'])}</b> {_pct(v['pass_rate'])} passed · mean score {v['mean_score']:.3f} · "
        f"{_e(_money(v['cost'], v.get('cost_unknown', 0), pairs.get(v['model'])))}</li>"
        for v in report["verdict"]
    ]
    return ['<section id="verdict"><h2>Verdict</h2><ol>', *items, "</ol></section>"]


def _table(section_id: str, title: str, header: list[str], rows: list[list[str]],
           numeric: Iterable[int] = ()) -> list[str]:
    """A data table; ``rows`` hold already-escaped HTML; columns in ``numeric`` align right."""
    right = set(numeric)

    def cls(i: int) -> str:
        return " class=n" if i in right else ""

    head = "".join(f"<th{cls(i)}>{_e(h)}</th>" for i, h in enumerate(header))
    body = ["<tr>" + "".join(f"<td{cls(i)}>{cell}</td>" for i, cell in enumerate(row)) + "</tr>"
            for row in rows]
    return [f'<section id="{section_id}"><h2>{_e(title)}</h2>',
            f'<table class="data"><thead><tr>{head}</tr></thead><tbody>', *body, "</tbody></table></section>"]


def _models_table(report: dict[str, Any]) -> list[str]:
    blocks = {m["model"]: m for m in report["models"]}
    rows = []
    for v in report["verdict"]:
        m = blocks[v["model"]]
        faults = ", ".join(f"{k} × {n}" for k, n in m["faults"].items()) or "-"
        rows.append(
            [
                _e(m["model"]),
                str(v["rank"]),
                _pct(m["pass_rate"]),
                str(m["passed"]),
                str(m["failed"]),
                str(m["errored"]),
                f"{m['mean_score']:.3f}",
                _e(m["duration_p50_ms"] or "-"),
                _e(m["duration_p95_ms"] or "-"),
                _e(_ms_pair(m.get("ttft_p50_ms"), m.get("ttft_p95_ms"))),
                _e(_ms_pair(m.get("latency_p50_ms"), m.get("latency_p95_ms"))),
                f"{m['input_tokens']:,}",
                f"{m['output_tokens']:,}",
                _e(_money(m["cost"], m.get("cost_unknown", 0), m["scenarios"])),
                f'<span class="t">{_e(faults)}</span>',
            ]
        )
    header = ["Model", "Rank", "Pass rate", "Passed", "Failed", "Errored", "Mean score", "p50 ms", "p95 ms",
              "TTFT p50/p95 ms", "Latency p50/p95 ms", "Tokens in", "Tokens out", "Cost", "Faults"]
    return _table("models", "Models", header, rows, numeric=range(1, 14))



def _epochs_tables(report: dict[str, Any]) -> list[str]:
    """With ``--epochs``: each model's pass rate with its 95 % Wilson interval, and every scenario's
    statistics."""
    block = report.get("epochs")
    if not block:
        return []
    k = str(block["epochs"])
    models = [[_e(m["model"]), f"{m['passed']}/{m['trials']}", _pct(m["pass_rate"]),
               f"{_pct(m['ci_low'])}–{_pct(m['ci_high'])}",
               f"{m['scenarios_passed']}/{m['scenarios']}" if "scenarios" in m else "-", str(len(m["flaky"]))]
              for m in block["models"]]
    pairs = [[_e(p["scenario_key"]), _e(p["model"]), f"{p['passed']}/{p['epochs']}", _pct(p["pass_rate"]),
              f"{p['mean_score']:.3f} ± {p['stderr']:.3f}", _pct(p["pass_at_k"][k]), _pct(p["pass_hat_k"][k]),
              '<span class="flaky">flaky</span>' if p["flaky"] else ""] for p in block["pairs"]]
    return [
        *_table(
            "epochs",
            f"Epochs: {k} per pair (95 % Wilson interval)",
            ["Model", "Passed", "Pass rate", "95 % CI", "Scenarios passed", "Flaky"],
            models,
            numeric=range(1, 6),
        ),
        *_table(
            "epoch-pairs",
            "Scenarios over epochs",
            ["Scenario", "Model", "Passed", "Pass rate", "Mean ± SE", f"pass@{k}", f"pass^{k}", "Flaky"],
            pairs,
            numeric=range(2, 7),
        ),
    ]


def _criteria_table(report: dict[str, Any]) -> list[str]:
    if not report["criteria"]:
        return []
    rows = [[_e(c["criterion"]), _e(c["model"]), f"{c['mean']:.3f}", f"{c['min']:.3f}", f"{c['max']:.3f}",
             f"{c['passed']}/{c['total']}"] for c in report["criteria"]]
    return _table("criteria", "Criteria", ["Criterion", "Model", "Mean", "Min", "Max", "Passed"], rows,
                  numeric=range(2, 6))


def _baseline(c: Comparison, index: dict[tuple[str, str], int]) -> list[str]:
    out = [f'<section id="baseline"><h2>Compared with baseline {_e(c.run_a or "?")}</h2>',
           f"<p>{_e(c.headline())} · mean score {c.mean_score_delta:+.3f} · cost "
           f"{_e(_signed_money(c.cost_delta, c.cost_unknown))}</p>"]
    if c.models:
        rows = [[_e(m.model), f"{_pct(m.pass_rate_a)} → {_pct(m.pass_rate_b)}",
                 f"{(m.pass_rate_b - m.pass_rate_a) * 100:+.1f}pp", f"{m.mean_score_b - m.mean_score_a:+.3f}",
                 str(m.regressed), str(m.fixed)] for m in c.models]
        out += _table("baseline-models", "Per model (common pairs)",
                      ["Model", "Pass rate", "Δ", "Δ score", "Regressed", "Fixed"], rows, numeric=range(1, 6))
    flipped = c.flipped
    if flipped:
        rows = []
        for f in flipped:
            i = index.get(f.pair)
            key = f'<a href="#p{i}">{_e(f.scenario_key)}</a>' if i is not None else _e(f.scenario_key)
            rows.append([f'<span class="k-{f.kind}">{_e(f.kind)}</span>', key, _e(f.model), _e(f.transition),
                         f"{(f.score_delta or 0.0):+.3f}", _e((f.after.fault if f.after else None) or "")])
        out += _table("flipped", f"Flipped pairs ({len(flipped)})",
                      ["Change", "Scenario", "Model", "Status", "Δ score", "Fault now"], rows, numeric=[4])
    if c.changed:
        rows = [['<span class="k-changed">changed</span>', _e(f.scenario_key), _e(f.model), _e(f.transition)]
                for f in c.changed]
        out += _table("changed", f"Changed scenarios ({len(c.changed)}): the scenario or its judge changed, "
                                 "not counted as regressions or fixes",
                      ["Change", "Scenario", "Model", "Status"], rows, numeric=[])
    for label, pairs in (("Only in the baseline", c.only_a), ("Only in this run", c.only_b)):
        if pairs:
            out.append(f"<p><b>{_e(label)} ({len(pairs)}):</b> "
                       + ", ".join(f"{_e(p.scenario_key)} × {_e(p.model)}" for p in pairs) + "</p>")
    out.append("</section>")
    return out


_MARK = {"regressed": "▼", "fixed": "▲", "failed_errored": "◆", "changed": "✎"}


def _grid(report: dict[str, Any], index: dict[tuple[str, str], int], changes: dict) -> list[str]:
    models = [m["model"] for m in report["models"]]
    keys = list(dict.fromkeys(r["scenario_key"] for r in report["results"]))  # as the catalog lists them
    rows = {(r["scenario_key"], r["model"]): r for r in report["results"]}
    head = "".join(f'<th class="m" title="{_e(m)}"><span>{_e(m)}</span></th>' for m in models)
    out = ['<section id="pairs-grid"><h2>Scenarios × models</h2>',
           '<p class="legend"><span class="c p">passed</span> <span class="c f">failed</span> '
           '<span class="c e">errored</span> · <i>italic</i>: cached replay'
           + (" · ▼ regressed ▲ fixed ◆ failed↔errored ✎ changed (scenario or judge) vs baseline"
              if changes else "")
           + " · click a cell for the conversation</p>",
           f'<table id="grid"><thead><tr><th>Scenario</th>{head}</tr></thead><tbody>']
    for key in keys:
        cells = []
        for model in models:
            row = rows.get((key, model))
            if row is None:
                cells.append('<td class="x">·</td>')
                continue
            change = changes.get((key, model))
            mark = _MARK.get(change.kind, "") if change is not None else ""
            text = "ERR" if row["status"] == ERRORED else f"{row['score']:.2f}"
            tip = row["status"] + (f": {row['fault']}" if row.get("fault") else "")
            cls = _STATUS_CLASS[row["status"]]
            if row.get("cached"):
                cls, tip = cls + " k", tip + " (cached replay)"
            cells.append(f'<td class="{cls}"><a href="#p{index[(key, model)]}" '
                         f'title="{_e(tip)}">{mark}{text}</a></td>')
        out.append(f"<tr><th>{_e(key)}</th>{''.join(cells)}</tr>")
    out += ["</tbody></table></section>"]
    return out
