"""``evaljobs judge-agreement`` on 200 labelled pairs (issue 43): the confusion matrix, Cohen's kappa and its
interval are checked against a hand computation (the textbook formulas written out here, not the module's),
the best threshold against the pairs' scores, and a gating judge under ``--min-kappa`` is one warning line.
"""
from __future__ import annotations

import json
import math

import pytest

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.agreement import cohen_kappa
from evaljobs.reports.build import build_report

RUBRIC = "The answer is polite and names the order number."
CATALOG = "name: judged\nscenarios:\n" + "".join(
    f'  - {{key: s{i:03d}, prompt: "question {i}", expect: {{judge: "{RUBRIC}"}}}}\n' for i in range(100))
#: (judge passes, human passes, judge score) for pairs 0..199: 90 agree on pass, 20 the judge passes and the
#: reviewer fails (scored 0.65, just over the 0.6 threshold), 10 the other way (0.55), 80 agree on fail.
PLAN = ([(True, True, 0.8)] * 90 + [(True, False, 0.65)] * 20 + [(False, True, 0.55)] * 10
        + [(False, False, 0.2)] * 80)


def _by_hand(a: int, b: int, c: int, d: int) -> tuple[float, float]:
    """Cohen (1960): kappa = (po - pe) / (1 - pe); SE = sqrt(po (1 - po) / (n (1 - pe)^2))."""
    n = a + b + c + d
    po = (a + d) / n
    pe = ((a + b) / n) * ((a + c) / n) + ((c + d) / n) * ((b + d) / n)
    return (po - pe) / (1 - pe), math.sqrt(po * (1 - po) / (n * (1 - pe) ** 2))


@pytest.fixture
def judged(tmp_path):
    url = f"sqlite:///{tmp_path}/j.db"
    store.connect(url)
    run = store.create_run(loads_catalog(CATALOG, source="judged.yaml"), ["m1", "m2"], strategy="sequential")
    store.mark_running(run.id)
    pairs = [(f"s{i:03d}", m) for i in range(100) for m in ("m1", "m2")]
    for (key, model), (judge_pass, _, score) in zip(pairs, PLAN):
        judge = {"model": "judge/x", "score": score, "threshold": 0.6, "passed": judge_pass, "gate": True,
                 "reason": "r"}
        store.record_result(run.id, Result(key, model, "passed" if judge_pass else "failed", score,
                                           scores={"llm_judge": score}, output=f"{key} {model}",
                                           details={"judge": judge}))
    store.finalize(run.id, build_report)
    for (key, model), (_, human_pass, _) in zip(pairs, PLAN):
        store.record_label(run.id, key, model, 0, verdict="pass" if human_pass else "fail", reviewer="ana")
    return url, run.id


def test_kappa_matrix_and_best_threshold_of_200_labelled_pairs(cli, judged):
    url, run = judged
    done = cli("judge-agreement", "--db", url, "--json")
    assert done.exit_code == 0, done.output
    found = json.loads(done.output)
    assert found["runs"] == [run] and len(found["agreements"]) == 1
    a = found["agreements"][0]
    assert (a["judge_model"], a["rubric"], a["n"]) == ("judge/x", RUBRIC, 200)
    assert a["matrix"] == [[90, 20], [10, 80]]
    kappa, se = _by_hand(90, 20, 10, 80)
    assert kappa == pytest.approx(0.7) and a["kappa"] == pytest.approx(kappa)
    low, high = a["kappa_ci95"]
    assert low == pytest.approx(kappa - 1.96 * se, abs=1e-3)
    assert high == pytest.approx(kappa + 1.96 * se, abs=1e-3)
    assert a["observed_agreement"] == pytest.approx(0.85) and a["threshold"] == 0.6
    # raising the threshold past 0.65 turns the 20 judge-passes the reviewer failed into agreements
    assert a["best_threshold"] == pytest.approx(0.725) and a["best_agreement"] == pytest.approx(190 / 200)
    assert a["warnings"] == []
    text = cli("judge-agreement", run, "--db", url, "--min-kappa", "0.8")
    assert text.exit_code == 0
    assert "| judge/x |" in text.output and "| 200 | 90 | 20 | 10 | 80 | 85.0% | 0.700 (" in text.output
    warnings = [line for line in text.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "judge judge/x decides a gate" in warnings[0]
    assert "kappa 0.70, under 0.80" in warnings[0]


def test_cohen_kappa_matches_a_published_example():
    # Wikipedia's "Cohen's kappa" worked example: 50 proposals, 20 yes-yes, 5 yes-no, 10 no-yes, 15 no-no
    kappa, _ = cohen_kappa([[20, 5], [10, 15]])
    assert kappa == pytest.approx(0.4)
    assert cohen_kappa([[10, 0], [0, 0]]) == (None, None), "all one class: chance agreement is total"


def test_the_report_and_the_review_page_show_the_agreement(cli, judged):
    url, run = judged
    md = cli("report", run, "--db", url)
    assert md.exit_code == 0 and "## Judge agreement with the reviewers" in md.output
    assert "| 200 | 90 | 20 | 10 | 80 | 85.0% | 0.700 (" in md.output
    as_json = json.loads(cli("report", run, "--db", url, "--format", "json").output)
    assert as_json["judge_agreement"][0]["kappa"] == pytest.approx(0.7)
    from evaljobs.view.review import review_page

    store.connect(url)
    page = review_page(run)
    assert [(a.judge_model, a.matrix) for a in page.agreements] == [("judge/x", [[90, 20], [10, 80]])]
