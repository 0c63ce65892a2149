"""The report: numbers on crafted results, ranking, determinism, and the three renderings."""
from __future__ import annotations

import json
import random

import pytest

from evaljobs.reports.build import build_report, percentile, render_json, render_markdown, render_table
from evaljobs.evaluation.result import Result

RUN = {"id": "r_0123456789ab", "catalog_name": "support", "digest": "f" * 64, "models": ["a", "b", "c", "d"],
       "strategy": "fanout", "created_at": "2025-01-01T00:00:00+00:00",
       "finished_at": "2025-01-01T00:01:00+00:00", "expected": 16}


def _r(key: str, model: str, status: str, score: float, ms: int, *, cost: float = 0.001,
       fault: str | None = None, error: str | None = None, scores: dict | None = None) -> Result:
    return Result(scenario_key=key, model=model, status=status, score=score, duration_ms=ms, cost=cost,
                  fault=fault, error=error, scores=scores or {}, input_tokens=10, output_tokens=5)


def crafted() -> list[Result]:
    return [
        # a: 2/4 passed, mean 0.6, the errored pair counts as not passed.
        _r("s1", "a", "passed", 1.0, 100, scores={"contains": 1.0, "tools": 0.9995}),
        _r("s2", "a", "passed", 0.9, 200, scores={"contains": 1.0, "tools": 0.998}),
        _r("s3", "a", "failed", 0.5, 300, fault="wrong_tool", scores={"contains": 0.0, "tools": 0.5}),
        _r("s4", "a", "errored", 0.0, 400, fault="run_error", error="provider said | no\nretry later"),
        # b: 2/4 passed like a, higher mean score -> ranks above a.
        _r("s1", "b", "passed", 1.0, 50), _r("s2", "b", "passed", 1.0, 60),
        _r("s3", "b", "failed", 0.6, 70, fault="wrong_tool"),
        _r("s4", "b", "failed", 0.6, 80, fault="missing"),
        # c: same pass rate and mean score as a, cheaper -> ranks above a.
        _r("s1", "c", "passed", 1.0, 10, cost=0.0), _r("s2", "c", "passed", 0.9, 10, cost=0.0),
        _r("s3", "c", "failed", 0.5, 10, cost=0.0, fault="wrong_tool"),
        _r("s4", "c", "failed", 0.0, 10, cost=0.0),
        # d: 3/4 passed -> first whatever its score.
        _r("s1", "d", "passed", 0.7, 5), _r("s2", "d", "passed", 0.7, 5), _r("s3", "d", "passed", 0.7, 5),
        _r("s4", "d", "failed", 0.0, 5000, fault="timeout"),
    ]


def _model(report: dict, name: str) -> dict:
    return next(m for m in report["models"] if m["model"] == name)


def test_percentile_is_nearest_rank() -> None:
    values = [50, 15, 40, 20, 35]
    assert [percentile(values, p) for p in (0, 5, 30, 40, 50, 95, 100)] == [15, 15, 20, 20, 35, 50, 50]
    assert percentile([], 50) is None
    assert percentile([7], 95) == 7


def test_summary_and_per_model_numbers() -> None:
    report = build_report(RUN, crafted())
    assert report["summary"] == {"expected": 16, "results": 16, "passed": 9, "failed": 6, "errored": 1,
                                 "pass_rate": 0.5625, "cost": 0.012, "cost_unknown": 0,
                                     "duration_ms": 6315}
    a = _model(report, "a")
    assert (a["scenarios"], a["passed"], a["failed"], a["errored"]) == (4, 2, 1, 1)
    assert a["pass_rate"] == 0.5
    assert a["mean_score"] == 0.6
    assert (a["duration_p50_ms"], a["duration_p95_ms"]) == (200, 400)
    assert (a["input_tokens"], a["output_tokens"], a["cost"]) == (40, 20, 0.004)
    assert a["faults"] == {"run_error": 1, "wrong_tool": 1}
    b = _model(report, "b")
    assert list(b["faults"].items()) == [("missing", 1), ("wrong_tool", 1)]
    d = _model(report, "d")
    assert (d["pass_rate"], d["duration_p50_ms"], d["duration_p95_ms"]) == (0.75, 5, 5000)
    assert [m["model"] for m in report["models"]] == ["a", "b", "c", "d"]


def test_fault_tally_orders_most_frequent_first() -> None:
    results = [_r(f"s{i}", "a", "failed", 0.0, 1, fault=f) for i, f in
               enumerate(["timeout", "wrong_tool", "wrong_tool", "run_error", "wrong_tool", "timeout"])]
    report = build_report({**RUN, "models": ["a"]}, results)
    faults = report["models"][0]["faults"]
    assert list(faults.items()) == [("wrong_tool", 3), ("timeout", 2), ("run_error", 1)]


def test_verdict_ranks_pass_rate_then_score_then_cost() -> None:
    verdict = build_report(RUN, crafted())["verdict"]
    assert [(v["rank"], v["model"]) for v in verdict] == [(1, "d"), (2, "b"), (3, "c"), (4, "a")]
    assert verdict[0] == {"rank": 1, "model": "d", "pass_rate": 0.75, "mean_score": 0.525, "cost": 0.004,
                          "cost_unknown": 0}


def test_criteria_count_near_one_as_passed() -> None:
    criteria = build_report(RUN, crafted())["criteria"]
    assert [(c["criterion"], c["model"]) for c in criteria] == [("contains", "a"), ("tools", "a")]
    tools = criteria[1]
    assert tools == {"criterion": "tools", "model": "a", "mean": round((0.9995 + 0.998 + 0.5) / 3, 4),
                     "min": 0.5, "max": 0.9995, "passed": 1, "total": 3}
    assert criteria[0]["passed"] == 2


def test_errored_counts_as_not_passed_and_empty_runs_do_not_divide_by_zero() -> None:
    report = build_report({**RUN, "models": ["a", "b"], "expected": 2},
                          [Result.errored("s1", "a", "quota exhausted after 5 attempts")])
    assert _model(report, "a")["pass_rate"] == 0.0
    empty = _model(report, "b")
    assert (empty["scenarios"], empty["pass_rate"], empty["duration_p50_ms"]) == (0, 0.0, None)
    assert report["summary"]["expected"] == 2
    render_markdown(report), render_table(report)


def test_deterministic_whatever_the_result_order() -> None:
    results = crafted()
    shuffled = results[:]
    random.Random(7).shuffle(shuffled)
    assert render_json(build_report(RUN, results)) == render_json(build_report(RUN, shuffled))
    compact = build_report(RUN, shuffled)["results"]
    assert [(r["scenario_key"], r["model"]) for r in compact] == sorted(r.pair for r in results)
    assert compact[3] == {"scenario_key": "s1", "model": "d", "status": "passed", "score": 0.7, "fault": None,
                          "error": None, "duration_ms": 5, "cost": 0.001, "cached": False}


def test_report_is_plain_json_and_survives_a_round_trip() -> None:
    report = build_report({**RUN, "context": {"tenant": "acme"}}, crafted())
    assert json.loads(render_json(report)) == report
    assert report["run"]["context"] == {"tenant": "acme"}
    assert report["run"]["id"] == RUN["id"]


def test_markdown_has_headline_models_and_failing_pairs() -> None:
    text = render_markdown(build_report(RUN, crafted()))
    headline = text.splitlines()[0]
    assert headline.startswith("### ") and "support" in headline and "`d`" in headline and "75.0%" in headline
    for model in ("a", "b", "c", "d"):
        assert f"| `{model}` |" in text
    assert "**Failing pairs (7)**" in text
    assert "| `s4` | `a` | errored | run_error | provider said \\| no retry later |" in text
    assert "| `s4` | `d` | failed | timeout |" in text
    assert "<details>" in text and "</details>" in text
    assert "| tools | `a` | 0.833 | 0.500 | 1.000 | 1/3 |" in text


def test_markdown_caps_failing_pairs() -> None:
    results = [_r(f"s{i:03d}", "a", "failed", 0.0, 1, fault="wrong") for i in range(40)]
    text = render_markdown(build_report({**RUN, "models": ["a"]}, results))
    assert "`s024`" in text and "`s025`" not in text
    assert "…and 15 more" in text


def test_table_is_fixed_width_with_failures_and_verdict() -> None:
    text = render_table(build_report(RUN, crafted()))
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("MODEL"))
    rows = lines[header + 1: header + 5]
    assert [row.split()[0] for row in rows] == ["a", "b", "c", "d"]
    assert len({len(row) for row in [lines[header], *rows]}) == 1
    assert rows[0].split()[1:6] == ["4", "2", "1", "1", "50.0%"]
    assert "  s4 × a  errored [run_error]: provider said | no retry later" in lines
    assert "  s3 × b  failed [wrong_tool]" in lines
    # b, c and a tie at 50.0% as printed: "=" says so, "b > c" would claim a difference it does not show.
    assert lines[-1] == "verdict: 1. d (75.0%) > 2. b (50.0%) = c (50.0%) = a (50.0%)"


@pytest.mark.parametrize("render", [render_json, render_markdown, render_table])
def test_renderings_accept_a_report_loaded_back_from_json(render) -> None:
    report = json.loads(json.dumps(build_report(RUN, crafted())))
    assert render(report) == render(build_report(RUN, crafted()))
