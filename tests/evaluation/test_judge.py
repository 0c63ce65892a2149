"""The LLM judge, end to end against the simulated provider (a real HTTP server on loopback).

A judge that cannot give a verdict never counts against the model under test; a
judged catalog needs a judge model (no self-judging); what the judge was asked
and answered is stored with the result and shown in every report format; and
the simulated judge grades the answer itself, deterministically.
"""
from __future__ import annotations

import json
import uuid

import pytest

from evaljobs import store
from evaljobs.api import Session, UsageError
from evaljobs.catalog import loads_catalog
from evaljobs.simulated.judge import grade as sim_grade, judge_answer
from evaljobs.evaluation.judge import JUDGE_SYSTEM, judge_prompt
from evaljobs.catalog import Expect, Scenario

CATALOG = """
name: judged
defaults:
  judge_model: sim/judge
scenarios:
  - key: kind
    prompt: "My parcel is late. [sim: say I'm sorry the parcel is late; I will help and track it now. TAG]"
    expect:
      judge: "The answer says sorry, offers help and tracks the parcel."
  - key: curt
    prompt: "My parcel is late. [sim: say Wait. TAG]"
    expect:
      judge: "The answer says sorry, offers help and tracks the parcel."
  - key: refusing-judge
    prompt: "Hello [sim: say Hello there TAG]"
    expect:
      contains: [hello]
      judge: "Friendly. [sim@judge: say I would rather not grade this.]"
  - key: broken-judge
    prompt: "Hello [sim: say Hello again TAG]"
    expect:
      judge: "Friendly. [sim@judge: status 400 judge model is gone]"
"""


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.001)


@pytest.fixture
def session(tmp_path, sim, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    with Session(db=f"sqlite:///{tmp_path}/runs.db", broker="memory", width=2) as s:
        yield s


def test_judge_verdicts_failures_and_what_is_stored(session):
    catalog = loads_catalog(CATALOG.replace("TAG", uuid.uuid4().hex[:6]), source="judged.yaml")
    run = session.wait(session.submit(catalog, ["sim/fast"], strategy="sequential").id, timeout=60)
    results = {r.scenario_key: r for r in store.list_results(run.id)}

    kind, curt = results["kind"], results["curt"]
    # The simulated judge graded the answers: the one that does what the rubric asks scores higher.
    assert kind.scores["llm_judge"] > curt.scores["llm_judge"]
    assert kind.status == "passed" and curt.status == "failed" and curt.fault == "low_quality"
    judge = kind.details["judge"]
    assert judge["model"] == "sim/judge" and judge["score"] == kind.scores["llm_judge"]
    assert "RUBRIC:\nThe answer says sorry" in judge["prompt"] and "ANSWER:\nI'm sorry" in judge["prompt"]
    assert json.loads(judge["raw"])["score"] == judge["score"] and judge["reason"].startswith("uses ")

    # A judge that answers something else, or cannot be reached: errored, judge_unavailable, never failed.
    refusing = results["refusing-judge"]
    assert (refusing.status, refusing.fault) == ("errored", "judge_unavailable")
    assert refusing.details["judge"]["raw"] == "I would rather not grade this."
    assert "not JSON" in refusing.error and refusing.output.startswith("Hello there")
    broken = results["broken-judge"]
    assert (broken.status, broken.fault) == ("errored", "judge_unavailable")
    assert "judge model is gone" in broken.error

    # Every report format shows the judge's verdict.
    from evaljobs.reports import junit
    from evaljobs.reports.html import render_html
    from evaljobs.reports.build import render_json, render_markdown, render_table

    report = run.report
    row = next(r for r in report["results"] if r["scenario_key"] == "kind")
    assert row["judge"]["raw"] == judge["raw"] and row["judge"]["prompt"] == judge["prompt"]
    assert json.loads(render_json(report))["results"] == report["results"]
    assert "judge (4):" in render_table(report) and "I would rather not grade this." in render_table(report)
    assert "**Judge**" in render_markdown(report) and "judge model is gone" in render_markdown(report)
    xml = junit.render_junit(report, store.list_results(run.id))
    assert "judge answer: I would rather not grade this." in xml and "judge prompt: RUBRIC:" in xml
    html = render_html(report, store.list_results(run.id))
    assert "I would rather not grade this." in html and "judge_unavailable" in html


def test_no_self_judging_a_judged_catalog_needs_a_judge_model(session, tmp_path):
    text = "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {judge: be kind}\n"
    catalog = loads_catalog(text, source="nojudge.yaml")
    before = len(store.list_runs()) if hasattr(store, "list_runs") else None
    with pytest.raises(UsageError) as info:
        session.submit(catalog, ["sim/fast"], strategy="sequential")
    assert str(info.value) == (
        "nojudge.yaml: scenario 'a' has an llm_judge rubric but no judge model; set 'judge_model' in the "
        "catalog's defaults, pass --judge-model provider/model, or set 'judge_model' in the providers file "
        "(a model does not judge its own answers)")
    if before is not None:
        assert len(store.list_runs()) == before  # nothing was created
    # --judge-model supplies it, and overrides the catalog's.
    run = session.wait(session.submit(catalog, ["sim/fast"], strategy="sequential",
                                      judge_model="sim/smart").id, timeout=60)
    assert store.list_results(run.id)[0].details["judge"]["model"] == "sim/smart"
    overridden = loads_catalog(text.replace("name: x\n", "name: x\ndefaults: {judge_model: sim/judge}\n"))
    run = session.wait(session.submit(overridden, ["sim/fast"], strategy="sequential",
                                      judge_model="sim/smart").id, timeout=60)
    assert store.list_results(run.id)[0].details["judge"]["model"] == "sim/smart"


def test_the_simulated_judge_grades_the_answer_against_rubric_and_reference():
    good, _ = sim_grade("Mentions the refund window of 30 days.", "Refunds are accepted within 30 days.")
    bad, reason = sim_grade("Mentions the refund window of 30 days.", "Please hold.")
    assert good > bad and "0 of" in reason
    assert sim_grade("anything", "") == (0.0, "the answer is empty")
    fact, _ = sim_grade("Is factually consistent with the reference.", "Use parameterized queries.",
                        reference="use parameterized queries and prepared statements")
    wrong, _ = sim_grade("Is factually consistent with the reference.", "Escape quotes by hand.",
                         reference="use parameterized queries and prepared statements")
    assert fact > wrong
    scenario = Scenario(key="s", messages=({"role": "user", "content": "q"},),
                        expect=Expect(judge="Says Paris.", reference="Paris"))
    messages = judge_prompt(scenario, "It is Paris.")
    assert messages[0]["content"] == JUDGE_SYSTEM and "REFERENCE ANSWER:\nParis" in messages[1]["content"]
    verdict = json.loads(judge_answer(messages))
    assert verdict == json.loads(judge_answer(messages))  # deterministic: same prompt, same grade
    assert verdict["score"] == 0.89  # all of the reference, half of the rubric ("says" is missing)
    assert judge_answer([{"role": "user", "content": "RUBRIC:\nx\n\nANSWER:\ny"}]) is None  # not a judge call


def test_the_providers_file_can_name_the_default_judge(tmp_path):
    from evaljobs.catalog.modelspec import ModelSpecError, load_providers
    from evaljobs.evaluation.judge_models import JudgeModelMissing, judge_model_for, require_judge_models

    scenario = Scenario(key="s", messages=({"role": "user", "content": "q"},), expect=Expect(judge="kind"))
    bare = load_providers(None)
    with pytest.raises(JudgeModelMissing):
        require_judge_models([scenario], None, bare)
    path = tmp_path / "providers.yaml"
    path.write_text("judge_model: sim/judge\nproviders: {}\n")
    config = load_providers(path)
    require_judge_models([scenario], None, config)  # no error: the file names a judge
    assert judge_model_for(scenario, None, config) == "sim/judge"
    assert judge_model_for(scenario, "sim/other", config) == "sim/other"  # --judge-model wins
    path.write_text("judge_model: 42\n")
    with pytest.raises(ModelSpecError, match="judge_model must be a model spec"):
        load_providers(path)


RATE_LIMITED_JUDGE = """
name: capped
defaults:
  judge_model: sim/judge
scenarios:
  - key: limited
    prompt: "My parcel is late. [sim: say I'm sorry the parcel is late; I will help and track it now.]"
    expect:
      judge: "The answer says sorry, offers help and tracks the parcel. [sim@judge: fail-first 1 429]"
  - key: plain
    prompt: "My parcel is late. [sim: say I'm sorry the parcel is late; I will help and track it now.]"
    expect:
      judge: "The answer says sorry, offers help and tracks the parcel."
"""


@pytest.mark.parametrize("strategy", ["sequential", "fanout"])
def test_a_rate_limited_judge_call_takes_one_call_of_the_cap(simulated_provider, sqlite_url, tmp_path,
                                                             strategy):
    """``--judge-cap 2``, two judged pairs, the first judge call answered 429: the pair asks again, and
    its judgement still takes one of the cap's calls — both pairs are judged."""
    simulated_provider()
    path = tmp_path / "capped.yaml"
    path.write_text(RATE_LIMITED_JUDGE, encoding="utf-8")
    with Session(db=sqlite_url, broker="memory", width=1) as session:
        info = session.wait(session.submit(path, ["sim/fast"], judge_cap=2, strategy=strategy).id, timeout=60)
        judges = {r.scenario_key: r.details.get("judge") for r in session.results(info.id)}
    assert all(isinstance(judge, dict) and "score" in judge for judge in judges.values()), judges
