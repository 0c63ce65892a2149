"""Statistics over epochs, flaky scenarios and the significance rule, on crafted runs.

Every expected number here was computed by hand (the working is in the comments), or is
a published value: Wilson 7/10 = [0.3968, 0.8922]; Fisher's tea-tasting table [[3,1],[1,3]]
two-sided p = 0.4857 (R's fisher.test); Wikipedia's dieting example [[1,9],[11,3]] p = 0.002759.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from evaljobs import store
from evaljobs.catalog import parse_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import render_markdown, render_table
from evaljobs.reports.compare import FLAKY, REGRESSED, SAME, compare, render_comparison
from evaljobs.reports.html import render_html
from evaljobs.reports.junit import render_junit
from evaljobs.reports.variance import (fisher_exact, flaky_text, mean_and_stderr, pass_at_k, pass_hat_k,
                                       wilson)
from evaljobs.reports.build import build_report


def test_wilson_interval_against_published_and_hand_numbers():
    # 7/10: p=.7, z²=3.8415, centre=(.7+.19207)/1.38415=.64449, half=1.96·√(.021+.0096)/1.38415=.24772
    low, high = wilson(7, 10)
    assert (round(low, 4), round(high, 4)) == (0.3968, 0.8922)
    low, high = wilson(0, 10)  # 0/10: centre = half = .19207/1.38415 = .13876 → [0, .2775]
    assert low == 0.0 and round(high, 4) == 0.2775
    low, high = wilson(10, 10)
    assert round(low, 4) == 0.7225 and round(high, 6) == 1.0
    assert wilson(0, 0) == (0.0, 1.0)


def test_pass_at_k_and_pass_hat_k_by_hand():
    # n=5 epochs, c=2 passed: pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; pass^2 = C(2,2)/C(5,2) = 1/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7) and pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4) == pass_hat_k(5, 2, 1)  # k=1: the pass rate
    assert pass_at_k(5, 2, 5) == 1.0 and pass_hat_k(5, 2, 5) == 0.0     # any of 5 / all of 5
    assert pass_at_k(5, 0, 3) == 0.0 and pass_hat_k(5, 5, 5) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(5, 2, 6)


def test_mean_and_standard_error_by_hand():
    # [1, 1, 0, 0, .5]: mean .5, squared deviations sum to 1, variance 1/4, sd .5, se .5/√5 = .22361
    mean, se = mean_and_stderr([1, 1, 0, 0, 0.5])
    assert mean == 0.5 and round(se, 5) == 0.22361
    assert mean_and_stderr([0.3]) == (0.3, 0.0)


@pytest.mark.parametrize("table,p", [
    ((3, 1, 1, 3), 0.485714),        # tea tasting: (1+16+16+1)/70 = 34/70
    ((1, 9, 11, 3), 0.002759),       # Wikipedia's dieting example
    ((5, 0, 0, 5), 0.007937),        # 2 / C(10,5) = 2/252
    ((10, 0, 0, 10), 1.0825e-05),    # 2 / C(20,10) = 2/184756
    ((5, 0, 1, 4), 0.047619),        # weights 5,50,100,50,5 of 210: (5+5)/210
    ((3, 2, 5, 0), 0.444444),        # x=3,4,5 weigh 10,25,10 of C(10,8)=45: (10+10)/45
    ((5, 0, 4, 1), 1.0),             # x=4,5 weigh 5,5 of C(10,9)=10: both as likely
])
def test_fisher_exact_two_sided_on_crafted_tables(table, p):
    assert fisher_exact(*table) == pytest.approx(p, rel=2e-4, abs=1e-9)  # the published digits
    a, b, c, d = table
    assert fisher_exact(c, d, a, b) == pytest.approx(fisher_exact(*table))  # symmetric in the runs


# -- a crafted run: 3 scenarios × 2 models × 5 epochs, stored and finalized -----------------------------

P, F, E = "passed", "failed", "errored"
CRAFTED = {  # (scenario, model) → the five epochs
    ("s1", "m1"): [P, P, P, P, P],
    ("s2", "m1"): [P, F, P, F, P],   # flaky, 3/5 = 60 % < threshold 70 % → JUnit failure
    ("s3", "m1"): [F, F, F, F, F],
    ("s1", "m2"): [P, P, P, P, F],   # flaky, 4/5 = 80 % ≥ 70 %
    ("s2", "m2"): [P, P, P, P, P],
    ("s3", "m2"): [E, P, P, P, P],   # an errored epoch is not a verdict: not flaky
}


def crafted_run(statuses=CRAFTED, epochs=5):
    body = {"name": "crafted", "scenarios": [{"key": k, "prompt": f"ask {k}"} for k in ("s1", "s2", "s3")]}
    catalog = parse_catalog(body, source="crafted.yaml")
    run = store.create_run(catalog, ["m1", "m2"], strategy="sequential", epochs=epochs)
    for (key, model), per_epoch in statuses.items():
        for epoch, status in enumerate(per_epoch):
            score = 1.0 if status == P else 0.0
            fault = None if status == P else "missing_content"
            result = Result(key, model, status, score=score, epoch=epoch, duration_ms=10, fault=fault)
            store.record_result(run.id, result)
    store.finalize(run.id, build_report)
    return store.get_run(run.id)


@pytest.fixture
def db(sqlite_url):
    store.connect(sqlite_url)
    return sqlite_url


def test_report_statistics_match_the_hand_numbers(db):
    report = crafted_run().report
    block = report["epochs"]
    assert block["epochs"] == 5 and report["summary"]["results"] == 30
    pairs = {(p["scenario_key"], p["model"]): p for p in block["pairs"]}
    s2 = pairs[("s2", "m1")]
    # scores 1,0,1,0,1: mean .6; deviations .4,-.6,.4,-.6,.4 → 1.2/4 = .3, sd .5477, se .5477/√5 = .2449
    assert (s2["passed"], s2["pass_rate"], s2["mean_score"], s2["stderr"]) == (3, 0.6, 0.6, 0.2449)
    # pass@2 = 1 - C(2,2)/C(5,2) = .9; pass^2 = C(3,2)/C(5,2) = .3; pass@5 = 1; pass^5 = 0
    assert s2["pass_at_k"]["2"] == 0.9 and s2["pass_hat_k"]["2"] == 0.3
    assert s2["pass_at_k"]["5"] == 1.0 and s2["pass_hat_k"]["5"] == 0.0
    assert s2["flaky"] and s2["threshold"] == 0.7 and s2["ok"] is False
    assert pairs[("s1", "m2")]["flaky"] and pairs[("s1", "m2")]["ok"] is True
    assert not pairs[("s3", "m2")]["flaky"] and pairs[("s3", "m2")]["errored"] == 1
    models = {m["model"]: m for m in block["models"]}
    # m1: 5+3+0 = 8 of 15; Wilson: centre (.53333+.12805)/1.25610 = .52654, half .22537 → [.3012, .7519]
    assert (models["m1"]["trials"], models["m1"]["passed"], models["m1"]["pass_rate"]) == (15, 8, 0.5333)
    assert (models["m1"]["ci_low"], models["m1"]["ci_high"]) == (0.3012, 0.7519)
    assert models["m1"]["flaky"] == ["s2"] and models["m2"]["flaky"] == ["s1"]
    # m2: 4+5+4 = 13 of 15 → Wilson [.6212, .9626]
    assert (models["m2"]["passed"], models["m2"]["ci_low"], models["m2"]["ci_high"]) == (13, 0.6212, 0.9626)
    assert json.loads(json.dumps(report)) == report
    assert {r["epoch"] for r in report["results"]} == set(range(5))


def test_every_format_shows_the_statistics_and_flags_flaky_scenarios(db):
    info = crafted_run()
    report, results = info.report, store.list_results(info.id)
    table = render_table(report)
    # pass rate over every epoch (8/15), and, under its own name, scenarios whose epoch pass rate reaches 0.7
    assert "m1  8/15 passed 53.3% (95% CI 30.1%–75.2%) · scenarios passed 1/3 · 1 flaky" in table
    assert (
        "flaky (2):" in table
        and ("s2 × m1  3/5 passed (60.0%) · mean 0.600 ± 0.245 · pass@5 100.0% · pass^5 0.0%") in table
    )
    md = render_markdown(report)
    assert "| `m2` | 13/15 | 86.7% | 62.1%–96.3% | 3/3 | 1 |" in md
    assert "**Flaky scenarios (2)**" in md and "| `s1` | `m2` | 4/5 | 0.800 ± 0.200 | 100.0% | 0.0% |" in md
    html = render_html(report, results)
    assert 'id="epochs"' in html and "30.1%–75.2%" in html and '<span class="flaky">flaky</span>' in html
    root = ET.fromstring(render_junit(report, results).split("\n", 1)[1])
    assert root.get("tests") == "6" and root.get("failures") == "2"
    cases = {(s.get("name"), c.get("name")): c for s in root.iter("testsuite") for c in s.iter("testcase")}
    assert len(cases) == 6  # one test case per scenario and model, not per epoch
    failure = cases[("m1", "s2")].find("failure")
    assert failure.get("message") == "3/5 epochs passed, under the threshold 0.7"
    assert "epoch 1: failed (score 0.000) [missing_content]" in failure.text
    assert (
        cases[("m2", "s1")].find("failure") is None
        and "epoch 4: failed" in cases[("m2", "s1")].find("system-out").text
    )
    assert cases[("m1", "s3")].find("failure") is not None
    flaky = {(p.get("name"), p.get("value")) for c in cases.values() for p in c.iter("property")}
    assert ("flaky", "true") in flaky
    listed = flaky_text(report)
    assert listed.startswith(f"run {info.id}: 2 flaky of 6 scenario × model pairs (5 epochs each)")
    assert (
        "m1: 8/15 passed 53.3% (95% CI 30.1%–75.2%) · scenarios passed 1/3 · 1 flaky" in listed
        and "  s2  3/5 passed" in listed
        and "[P F P F P]" in listed
    )


def test_compare_does_not_call_a_flaky_flip_a_regression_unless_significant(db):
    before = crafted_run()
    after = dict(CRAFTED)
    after[("s2", "m1")] = [P] * 5           # flaky 3/5 → 5/5: Fisher p = .4444, not a fix
    after[("s1", "m2")] = [P] * 5           # 4/5 → 5/5: both reach the threshold 0.7, no flip at all
    after[("s1", "m1")] = [P, F, F, F, F]   # 5/5 → 1/5, flaky now: p = 10/210 = .0476 < .05: a regression
    after[("s2", "m2")] = [F] * 5           # 5/5 → 0/5, not flaky: a regression (p = .0079)
    now = crafted_run(after)
    c = compare(before.report, now.report)
    kinds = {c_.pair: c_.kind for c_ in c.changes}
    assert kinds[("s2", "m1")] == FLAKY and kinds[("s1", "m2")] == SAME
    assert kinds[("s1", "m1")] == REGRESSED and kinds[("s2", "m2")] == REGRESSED
    assert sorted(x.pair for x in c.regressed) == [("s1", "m1"), ("s2", "m2")]
    by_pair = {x.pair: x for x in c.changes}
    assert by_pair[("s1", "m1")].p_value == pytest.approx(10 / 210)
    assert by_pair[("s2", "m1")].p_value == pytest.approx(0.444444, rel=1e-5)
    text = render_comparison(c)
    assert "2 regressed, 0 fixed, 0 failed↔errored, 1 flaky (not significant)" in text
    assert "s2 × m1  3/5 → 5/5 passed  p=0.444" in text
    assert c.to_dict()["summary"]["flaky"] == 1


def test_gate_ci_judges_the_wilson_lower_bound(cli, db, monkeypatch):
    info = crafted_run()
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", db)

    point = cli("report", info.id, "--format", "json", "--fail-under", "0.6")
    assert point.exit_code == 0 and "OK: pass rate 70.0% meets --fail-under 60.0%" in point.output
    ci = cli("report", info.id, "--format", "json", "--fail-under", "0.6", "--gate", "ci")
    assert ci.exit_code == 1
    assert (
        "FAIL: m1: 95% CI lower bound 30.1% (pass rate 53.3%, CI 30.1%–75.2%) is under --fail-under 60.0% "
        "(--gate ci)"
    ) in ci.output
    assert cli("report", info.id, "--fail-under", "0.3", "--gate", "ci").exit_code == 0
    flaky = cli("report", info.id, "--flaky")
    assert flaky.exit_code == 0 and "2 flaky of 6" in flaky.output and "[P P P P F]" in flaky.output
