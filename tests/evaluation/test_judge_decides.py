"""The judge decides its criterion: its own threshold, its own ``pass``, a gate unless the catalog says not.

Before: the judged criterion was averaged with an always-1 "response present" check, so a judge score
of 0.10 passed the starter's ``refund-policy`` at threshold 0.7 (mean (1 + 0.1 + 1) / 3 = 0.7).
"""
from __future__ import annotations

import httpx
import pytest
from helpers import Viewer

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import CatalogError, catalog_from_body, load_catalog, loads_catalog
from evaljobs.starter import CATALOG, init_project
from evaljobs.evaluation.grading import JudgeVerdict, grade
from evaljobs.evaluation.judge import parse_judge_verdict
from evaljobs.evaluation.replay import Replay
from evaljobs.evaluation.result import FAILED, PASSED


def _judge(score: float, passed: bool | None = None):
    return lambda scenario, replay: JudgeVerdict(score, "the judge's reason", passed=passed)


def _one(expect: str, **settings: str) -> object:
    extra = "".join(f"    {k}: {v}\n" for k, v in settings.items())
    return loads_catalog(
        f"name: j\ndefaults: {{judge_model: sim/judge}}\nscenarios:\n  - key: a\n    prompt: hi\n"
        f"{extra}    expect: {expect}\n"
    ).scenario("a")


def test_a_judge_score_under_the_threshold_fails_whatever_the_mean():
    scenario = _one("{contains: [refund], max_latency_ms: 30000, judge: 'apologises and refunds'}")
    assert scenario.expect.judge_gate and scenario.expect.judge_threshold is None
    low = grade(scenario, Replay(answer="refund", duration_ms=10), judge=_judge(0.4))
    # mean (1 + 1 + 0.4) / 3 = 0.8 clears 0.7; the judgement alone does not.
    assert low.score == pytest.approx(0.8) and (low.status, low.fault) == (FAILED, "low_quality")
    assert low.details["failed_gates"] == ["llm_judge"]
    judge = low.details["judge"]
    assert (judge["threshold"], judge["passed"], judge["gate"]) == (0.7, False, True)
    assert grade(scenario, Replay(answer="refund", duration_ms=10), judge=_judge(0.7)).status == PASSED


def test_the_judge_threshold_and_gate_false_are_the_catalogs_to_set():
    own = _one("{contains: [x], judge: {rubric: 'apologises', threshold: 0.3}}", pass_threshold="0.5")
    assert own.expect.judge_threshold == 0.3
    assert grade(own, Replay(answer="x"), judge=_judge(0.4)).status == PASSED
    # mean (1 + 0.2) / 2 = 0.6 clears 0.5; the judgement misses its own 0.3.
    assert grade(own, Replay(answer="x"), judge=_judge(0.2)).status == FAILED
    # Its score still joins the scenario's: a judgement that passes does not pass a low mean.
    alone = _one("{judge: {rubric: 'apologises', threshold: 0.3}}")
    assert grade(alone, Replay(answer="x"), judge=_judge(0.4)).status == FAILED
    # gate: false -- the judgement only joins the mean, like any criterion.
    soft = _one("{contains: [x], not_contains: [y], judge: {rubric: 'apologises', gate: false}}")
    result = grade(soft, Replay(answer="x"), judge=_judge(0.4))
    assert (
        result.status == PASSED and result.score == pytest.approx(0.8) and not result.details["judge"]["gate"]
    )
    # expect.gate: false says the same for the whole block.
    off = _one("{contains: [x], not_contains: [y], judge: 'apologises', gate: false}")
    assert not off.expect.judge_gate and grade(off, Replay(answer="x"), judge=_judge(0.4)).status == PASSED
    # The threshold follows the scenario's pass_threshold unless the judge has its own.
    strict = _one("{judge: apologises}", pass_threshold="0.9")
    assert grade(strict, Replay(answer="x"), judge=_judge(0.85)).status == FAILED


def test_a_judge_answer_may_carry_pass_as_promptfoos_llm_rubric_does():
    assert parse_judge_verdict('{"score": 0.9, "pass": false, "reason": "leaks the card"}') == \
        (0.9, "leaks the card", False)
    assert parse_judge_verdict('{"pass": "yes"}') == (1.0, "", True)
    assert parse_judge_verdict('{"score": 0.5}') == (0.5, "", None)
    assert "no numeric 'score'" in parse_judge_verdict('{"reason": "?"}')
    scenario = _one("{judge: 'no card numbers'}")
    vetoed = grade(scenario, Replay(answer="x"), judge=_judge(0.95, passed=False))
    assert (vetoed.status, vetoed.fault) == (FAILED, "low_quality") and vetoed.details["judge"][
        "judge_pass"
    ] is False
    # In a weighted (promptfoo) list: its pass, then the entry's threshold.
    weighted = loads_catalog(
        "name: w\ndefaults: {judge_model: sim/judge}\nscenarios:\n  - key: a\n    prompt: hi\n    expect:\n"
        "      weighted: true\n      assertions: [{kind: judge, rubric: polite, threshold: 0.5}]\n"
    ).scenario("a")
    assert grade(weighted, Replay(answer="x"), judge=_judge(0.6, passed=True)).status == PASSED
    assert grade(weighted, Replay(answer="x"), judge=_judge(0.6, passed=False)).status == FAILED
    assert grade(weighted, Replay(answer="x"), judge=_judge(0.4, passed=True)).status == FAILED


def test_judge_settings_are_checked_and_read_back_from_the_snapshot():
    with pytest.raises(CatalogError) as info:
        loads_catalog(
            "name: j\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {judge: {rubric: x, threshold: 2, "
            "gates: true}}\n",
            source="j.yaml",
        )
    assert info.value.problems == [
        "j.yaml:5: scenario 'a': expect.judge: unknown key 'gates' (did you mean 'gate'?)",
        ("j.yaml:5: scenario 'a': expect.judge.threshold must be a number from 0 to 1 (the score needed to "
         "pass), not 2")]
    catalog = loads_catalog(
        "name: j\ndefaults: {judge_model: sim/judge}\nscenarios:\n  - key: a\n    prompt: hi\n"
        "    expect: {judge: {rubric: x, threshold: 0.4, gate: false}}\n  - key: b\n    prompt: hi\n"
        "    expect: {judge: y}\n"
    )
    again = catalog_from_body(catalog.body)
    assert again.scenarios == catalog.scenarios and again.digest == catalog.digest
    assert catalog.body["scenarios"][1]["expect"]["judge"] == "y"  # a plain rubric keeps its digest


def test_the_starter_no_longer_passes_a_low_judge_score(tmp_path):
    init_project(tmp_path / "evals")
    catalog = load_catalog(tmp_path / "evals" / CATALOG)
    judged = [s for s in catalog.scenarios if s.expect.judge]
    assert judged, "the starter shows an LLM-judge scenario"
    for scenario in judged:
        result = grade(scenario, Replay(answer="Sorry about that.", duration_ms=100), judge=_judge(0.10))
        assert (result.status, result.fault) == (FAILED, "low_quality"), scenario.key


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.001)


def test_the_starters_judged_scenario_run_with_a_low_judge_score_fails(tmp_path, sim, monkeypatch):
    """The starter as ``evaljobs init`` writes it, run on the simulated provider: sim/fast's answer misses
    the rubric, the simulated judge says so with a low score, and the scenario fails."""
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    init_project(tmp_path / "evals")
    catalog = load_catalog(tmp_path / "evals" / CATALOG)
    judged = {s.key for s in catalog.scenarios if s.expect.judge}
    with Session(db=f"sqlite:///{tmp_path}/runs.db", broker="memory", width=2) as session:
        # sim/fast: the starter's directives make it answer "Please contact your bank."
        run = session.wait(session.submit(catalog, ["sim/fast"], strategy="sequential").id, timeout=120)
        rows = [r for r in store.list_results(run.id) if r.scenario_key in judged]
        assert rows
        for row in rows:
            judge = row.details["judge"]
            assert judge["score"] < judge["threshold"], "the simulated judge no longer scores this answer low"
            assert (row.status, row.fault) == (FAILED, "low_quality"), (row.scenario_key, judge["score"])
            report_row = next(r for r in run.report["results"] if r["scenario_key"] == row.scenario_key)
            assert report_row["status"] == FAILED
    # The viewer's scenario and transcript pages say what the judge decided, against which threshold.
    viewer = Viewer(f"sqlite:///{tmp_path}/runs.db", "memory", tmp_path / "view.log")
    try:
        for key in judged:
            for path in (
                f"/runs/{run.id}/scenarios/{key}",
                f"/runs/{run.id}/transcript?key={key}&model=sim%2Ffast",
            ):
                page = httpx.get(viewer.url + path, timeout=30)
                assert page.status_code == 200 and "(threshold 0.7: failed)" in page.text, path
    finally:
        viewer.close()


def test_the_criteria_table_counts_a_judgement_as_the_judge_decided_it():
    """A judge score of 0.78 at threshold 0.7 passes its criterion: the report's criteria table (JSON,
    Markdown, HTML) counts it passed, as the scenario's verdict does -- not 0/1 because 0.78 < 1."""
    from evaljobs.evaluation.result import Result
    from evaljobs.reports.build import build_report, render_markdown

    scenario = _one("{contains: [sorry], judge: 'says sorry and offers help'}")
    rows = []
    for model, score in (("sim/smart", 0.78), ("sim/fast", 0.21)):
        grades = grade(scenario, Replay(answer="sorry", duration_ms=10), judge=_judge(score))
        rows.append(Result("a", model, grades.status, grades.score, output="sorry", scores=grades.scores,
                           fault=grades.fault, details=grades.details))
    assert [r.status for r in rows] == [PASSED, FAILED]
    report = build_report(
        {
            "id": "r_1",
            "catalog_name": "j",
            "digest": "d",
            "models": ["sim/smart", "sim/fast"],
            "strategy": "sequential",
            "created_at": None,
            "finished_at": None,
        },
        rows,
    )
    judged = {
        c["model"]: (c["passed"], c["total"]) for c in report["criteria"] if c["criterion"] == "llm_judge"
    }
    assert judged == {"sim/smart": (1, 1), "sim/fast": (0, 1)}
    assert "| llm_judge | `sim/smart` | 0.780 | 0.780 | 0.780 | 1/1 |" in render_markdown(report)


def test_every_judge_line_states_the_threshold_and_what_the_judge_decided():
    """A scenario that fails at score 0.89 on a judge score of 0.78 says why: the threshold it missed."""
    from evaljobs.evaluation.result import Result
    from evaljobs.reports.build import build_report, render_markdown, render_table

    scenario = _one("{contains: [sorry], judge: {rubric: 'says sorry', threshold: 0.8}}")
    rows = []
    for model, score in (("sim/smart", 0.78), ("sim/fast", 0.9)):
        grades = grade(scenario, Replay(answer="sorry", duration_ms=10), judge=_judge(score))
        rows.append(Result("a", model, grades.status, grades.score, output="sorry", scores=grades.scores,
                           fault=grades.fault, details=grades.details))
    report = build_report(
        {
            "id": "r_1",
            "catalog_name": "j",
            "digest": "d",
            "models": ["sim/smart", "sim/fast"],
            "strategy": "sequential",
            "created_at": None,
            "finished_at": None,
        },
        rows,
    )
    judges = {r["model"]: r["judge"] for r in report["results"]}
    assert (judges["sim/smart"]["threshold"], judges["sim/smart"]["passed"]) == (0.8, False)
    assert (judges["sim/fast"]["threshold"], judges["sim/fast"]["passed"]) == (0.8, True)
    table, md = render_table(report), render_markdown(report)
    assert " score 0.78 (threshold 0.80: failed): " in table
    assert " score 0.90 (threshold 0.80: passed): " in table
    assert " | 0.78 (threshold 0.80: failed) | " in md
    from evaljobs.reports.junit import render_junit
    assert "judge (?): 0.780 (threshold 0.80: failed) the judge's reason" in render_junit(report, rows)
