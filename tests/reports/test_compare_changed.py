"""A catalog edit is not a model's regression: a pair whose scenario changed between two runs is "changed" in
``evaljobs compare`` (table and JSON), in the report against a baseline (Markdown, HTML) and in the viewer's
compare page; reports and the viewer list scenarios as the catalog's author wrote them.

Real runs on the simulated provider (over loopback) into a real SQLite store; the viewer is a real
``evaljobs view`` process read over HTTP.
"""
from __future__ import annotations

import json
import re

import httpx
import pytest

from evaljobs import store
from evaljobs.api import Session
from helpers import Viewer

#: Written out of key order on purpose: zeta, alpha, mid.
CATALOG = """\
name: edits
scenarios:
  - key: zeta
    prompt: "Say hello [sim: say hello there]"
    expect: {{contains: [hello]}}
  - key: alpha
    prompt: "Give the code [sim: say the code is 41]"
    expect: {{contains: ["{code}"]}}
  - key: mid
    prompt: "Say bye [sim: say bye now]"
    expect: {{contains: [bye]}}
"""
MODELS = ["sim/fast", "sim/smart"]


@pytest.fixture
def edited(tmp_path, simulated_provider):
    """Run 1 expects the code 41 (passes), run 2 the code 42 (fails): only the catalog changed."""
    simulated_provider(latency=0.0)
    db = f"sqlite:///{tmp_path}/edits.db"
    first, second = tmp_path / "v1.yaml", tmp_path / "v2.yaml"
    first.write_text(CATALOG.format(code="41"))
    second.write_text(CATALOG.format(code="42"))
    with Session(db=db, broker="memory") as session:
        a = session.submit(str(first), MODELS, strategy="sequential")
        b = session.submit(str(second), MODELS, strategy="sequential")
    assert (a.status, b.status) == ("complete", "complete") and b.report is not None
    assert b.report["summary"]["failed"] == 2
    return db, a.id, b.id



def test_compare_lists_an_edited_scenario_as_changed_never_as_a_regression(cli, edited):
    db, a, b = edited
    data = json.loads(cli("compare", a, b, "--json", "--db", db).stdout)
    assert data["flipped"] == [] and data["summary"]["regressed"] == 0
    assert data["summary"]["changed"] == 2
    assert [(c["scenario_key"], c["model"], c["kind"], c["before"]["status"], c["after"]["status"])
            for c in data["changed"]] == [("alpha", "sim/fast", "changed", "passed", "failed"),
                                          ("alpha", "sim/smart", "changed", "passed", "failed")]
    # like with like: the per-model rates leave the edited scenario out
    assert {m["model"]: (m["pairs"], m["regressed"], m["changed"], m["pass_rate_delta"])
            for m in data["models"]} == {"sim/fast": (2, 0, 1, 0.0), "sim/smart": (2, 0, 1, 0.0)}

    table = cli("compare", a, b, "--db", db, "--fail-on-regression")
    assert table.exit_code == 0, table.output  # a catalog edit fails no regression gate
    assert table.stdout.splitlines()[0] == (
        f"compare {a} → {b}: 6 common pairs: 0 regressed, 0 fixed, 0 failed↔errored, "
        "2 changed (scenario or judge changed, not counted)")
    assert "no pair flipped" in table.stdout


def test_the_report_against_a_baseline_says_changed(cli, edited, tmp_path):
    db, a, b = edited
    markdown = cli("report", b, "--baseline", a, "--db", db).stdout
    assert "0 regressed, 0 fixed" in markdown
    assert "2 changed (scenario or judge changed, not counted)" in markdown
    assert "**Changed scenarios (2)**" in markdown
    assert "| `alpha` | `sim/fast` | passed → failed |" in markdown
    html = cli("report", b, "--baseline", a, "--format", "html", "--db", db).stdout
    section = html.split('<section id="changed">')[1].split("</section>")[0]
    assert "Changed scenarios (2)" in section and section.count('class="k-changed"') == 2
    assert '<section id="flipped">' not in html


def test_reports_keep_the_catalogs_own_order(cli, edited):
    db, _, b = edited
    report = json.loads(cli("report", b, "--format", "json", "--db", db).stdout)
    assert [r["scenario_key"] for r in report["results"]] == ["zeta", "zeta", "alpha", "alpha", "mid", "mid"]
    assert report["run"]["order"] == "catalog"
    table = cli("report", b, "--format", "table", "--db", db).stdout
    html = cli("report", b, "--format", "html", "--db", db).stdout
    grid = html.split('<table id="grid">')[1].split("</table>")[0]
    assert re.findall(r"<tr><th>(\w+)</th>", grid) == ["Scenario", "zeta", "alpha", "mid"]
    assert "alpha × sim/fast" in table


def test_rows_stored_before_digests_were_kept_still_read_back_and_compare(edited):
    """Invariant 16: a row without a digest (schema 4) reads back; its run's snapshot tells its scenario."""
    db, a, b = edited
    store.connect(db)
    store.ResultRow.update(scenario_digest=None).execute()
    assert all(r.scenario_digest is None for r in store.list_results(a))
    with Session(db=db) as session:
        same = session.compare(a, a)  # a run against itself: nothing changed
        assert same.changed == [] and same.flipped == []
        comparison = session.compare(a, b)
    assert [c.pair for c in comparison.changed] == [("alpha", "sim/fast"), ("alpha", "sim/smart")]
    assert comparison.regressed == []


def test_the_viewer_compare_page_lists_the_changed_pairs(edited, tmp_path):
    db, a, b = edited
    viewer = Viewer(db, "memory", tmp_path / "view.log")
    try:
        with httpx.Client(base_url=viewer.url, timeout=30) as client:
            page = client.get("/compare", params={"a": a, "b": b})
            run_page = client.get(f"/runs/{b}")
    finally:
        viewer.close()
    assert page.status_code == 200, page.text
    changed = re.split(r'<table class="list" id="changed"[^>]*>', page.text)[1].split("</table>")[0]
    assert re.findall(r'data-kind="changed" data-key="(\w+)" data-model="([\w/]+)"', changed) == [
        ("alpha", "sim/fast"), ("alpha", "sim/smart")]
    flips = re.split(r'<table class="list" id="flips"[^>]*>', page.text)[1].split("</table>")[0]
    assert "No pair flipped." in flips
    assert "0 regressed" in page.text
    # the run page lists the scenarios as the catalog does
    assert run_page.status_code == 200
    order = [key for key in re.findall(r'data-key="(\w+)"', run_page.text) if key in ("zeta", "alpha", "mid")]
    assert list(dict.fromkeys(order)) == ["zeta", "alpha", "mid"], order


def test_the_epochs_block_keeps_the_catalogs_own_order_too(cli, tmp_path, simulated_provider):
    """With epochs the per-pair statistics (JSON ``epochs.pairs``, the HTML section, JUnit's test cases)
    follow the catalog's order."""
    simulated_provider(latency=0.0)
    db = f"sqlite:///{tmp_path}/epochs.db"
    path = tmp_path / "v1.yaml"
    path.write_text(CATALOG.format(code="41"))
    with Session(db=db, broker="memory") as session:
        run = session.submit(str(path), MODELS, strategy="sequential", epochs=2)
    report = json.loads(cli("report", run.id, "--format", "json", "--db", db).stdout)
    assert [(p["scenario_key"], p["model"]) for p in report["epochs"]["pairs"]] == [
        (key, model) for key in ("zeta", "alpha", "mid") for model in MODELS]
    html = cli("report", run.id, "--format", "html", "--db", db).stdout
    section = html.split('id="epoch-pairs"')[1].split("</table>")[0]
    assert re.findall(r"<tr><td>(\w+)</td><td>sim/fast</td>", section) == ["zeta", "alpha", "mid"], section
    junit = cli("report", run.id, "--format", "junit", "--db", db).stdout
    cases = re.findall(r'<testcase classname="edits\.sim/fast" name="(\w+)"', junit)
    assert cases == ["zeta", "alpha", "mid"]


#: Two judges that disagree on the same answer: ``sim/lenient`` passes it, ``sim/strict`` fails it.
VERDICTS = ('[sim@lenient: say {\\"score\\": 1, \\"reason\\": \\"kind\\"}] '
            '[sim@strict: say {\\"score\\": 0, \\"reason\\": \\"curt\\"}]')
JUDGED = f"""\
name: judged
scenarios:
  - key: plain
    prompt: "Say hello [sim: say hello there]"
    expect: {{contains: [hello]}}
  - key: kind
    prompt: "Say sorry [sim: say sorry about that]"
    expect:
      judge: "Apologises. {VERDICTS}"
"""


def test_a_changed_judge_model_is_changed_not_a_regression(cli, tmp_path, simulated_provider):
    """The same catalog judged by another judge (``--judge-model``): what decided the verdict changed, so the
    judged pair is "changed" in compare, never a regression; the unjudged pair compares as before."""
    simulated_provider(latency=0.0)
    db = f"sqlite:///{tmp_path}/judge.db"
    path = tmp_path / "judged.yaml"
    path.write_text(JUDGED)
    with Session(db=db, broker="memory") as session:
        a = session.submit(str(path), ["sim/fast"], strategy="sequential", judge_model="sim/lenient")
        b = session.submit(str(path), ["sim/fast"], strategy="sequential", judge_model="sim/strict")
    assert [r.status for r in store.list_results(b.id) if r.scenario_key == "kind"] == ["failed"]
    data = json.loads(cli("compare", a.id, b.id, "--json", "--db", db).stdout)
    assert data["summary"]["regressed"] == 0 and data["flipped"] == []
    assert [(c["scenario_key"], c["kind"]) for c in data["changed"]] == [("kind", "changed")]
    same = json.loads(cli("compare", a.id, a.id, "--json", "--db", db).stdout)  # same judge: nothing changed
    assert same["summary"]["changed"] == 0


def test_reuse_judges_again_a_pair_whose_judge_changed_in_the_providers_file(cli, tmp_path,
                                                                             simulated_provider):
    """``--reuse`` copies a judged verdict only when the judge that gave it is the one this run would ask: a
    providers file's ``judge_model`` counts, not only ``--judge-model``."""
    simulated_provider(latency=0.0)
    db = f"sqlite:///{tmp_path}/reuse.db"
    path = tmp_path / "judged.yaml"
    path.write_text(JUDGED)
    lenient, strict = tmp_path / "lenient.yaml", tmp_path / "strict.yaml"
    lenient.write_text("judge_model: sim/lenient\n")
    strict.write_text("judge_model: sim/strict\n")
    with Session(db=db, broker="memory", providers=str(lenient)) as session:
        a = session.submit(str(path), ["sim/fast"], strategy="sequential")
    with Session(db=db, broker="memory", providers=str(strict)) as session:
        b = session.submit(str(path), ["sim/fast"], strategy="sequential", reuse=a.id)
        line = session.reuse_note
    rows = {r.scenario_key: r for r in store.list_results(b.id)}
    assert rows["plain"].reused_from == a.id  # unjudged and unchanged: copied
    assert rows["kind"].reused_from is None and rows["kind"].status == "failed"  # judged again, by sim/strict
    assert line == f"reused 1 of 2 pairs from {a.id} (1 changed, 0 new)"
    # and compare says the same of it: another judge (named by the providers file) decided it
    data = json.loads(cli("compare", a.id, b.id, "--json", "--db", db).stdout)
    assert [(c["scenario_key"], c["kind"]) for c in data["changed"]] == [("kind", "changed")]
    assert data["summary"]["regressed"] == 0
