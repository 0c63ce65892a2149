"""compare: exactly the flipped pairs of a crafted pair of runs, deltas, renderings, and `evaljobs
compare`."""
from __future__ import annotations

import json

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.cli import Group
from evaljobs.cli.reports import compare as compare_command
from evaljobs.reports.compare import (FAILED_ERRORED,
                                      FIXED,
                                      ONLY_A,
                                      ONLY_B,
                                      REGRESSED,
                                      SAME,
                                      compare,
                                      render_comparison)
from evaljobs.reports.build import build_report
from evaljobs.evaluation.result import Result


def _r(
    key: str, model: str, status: str, score: float, *, cost: float = 0.001, fault: str | None = None
) -> Result:
    return Result(scenario_key=key, model=model, status=status, score=score, cost=cost, fault=fault,
                  error="boom" if status == "errored" else None)


BASELINE = [
    _r("same-pass", "m1", "passed", 1.0),
    _r("same-fail", "m1", "failed", 0.2, fault="missing_content"),
    _r("pass-to-fail", "m1", "passed", 1.0, cost=0.002),
    _r("pass-to-err", "m1", "passed", 0.9),
    _r("fail-to-pass", "m1", "failed", 0.4, fault="missing_content"),
    _r("err-to-pass", "m1", "errored", 0.0, fault="run_error"),
    _r("fail-to-err", "m1", "failed", 0.5, fault="tool_error"),
    _r("err-to-fail", "m2", "errored", 0.0, fault="run_error"),
    _r("dropped", "m2", "passed", 1.0),
    _r("same-pass", "m2", "passed", 1.0),
]
CANDIDATE = [
    _r("same-pass", "m1", "passed", 0.95),
    _r("same-fail", "m1", "failed", 0.3, fault="forbidden_content"),  # fault changed, status did not
    _r("pass-to-fail", "m1", "failed", 0.25, cost=0.003, fault="expected_tool_not_called"),
    _r("pass-to-err", "m1", "errored", 0.0, fault="run_error"),
    _r("fail-to-pass", "m1", "passed", 1.0),
    _r("err-to-pass", "m1", "passed", 0.8),
    _r("fail-to-err", "m1", "errored", 0.0, fault="run_error"),
    _r("err-to-fail", "m2", "failed", 0.1, fault="missing_content"),
    _r("same-pass", "m2", "passed", 1.0),
    _r("added", "m2", "failed", 0.0, fault="missing_content"),
]
EXPECTED_FLIPS = {
    ("pass-to-fail", "m1"): REGRESSED, ("pass-to-err", "m1"): REGRESSED,
    ("fail-to-pass", "m1"): FIXED, ("err-to-pass", "m1"): FIXED,
    ("fail-to-err", "m1"): FAILED_ERRORED, ("err-to-fail", "m2"): FAILED_ERRORED,
}


def test_crafted_runs_flip_exactly_the_expected_pairs() -> None:
    c = compare(BASELINE, CANDIDATE, run_a="r_a", run_b="r_b")
    assert {f.pair: f.kind for f in c.flipped} == EXPECTED_FLIPS
    assert [f.kind for f in c.flipped] == [REGRESSED, REGRESSED, FIXED, FIXED, FAILED_ERRORED, FAILED_ERRORED]
    assert [p.pair for p in c.only_a] == [("dropped", "m2")]
    assert [p.pair for p in c.only_b] == [("added", "m2")]
    assert {c_.pair for c_ in c.changes if c_.kind == SAME} == {("same-pass", "m1"), ("same-fail", "m1"),
                                                               ("same-pass", "m2")}
    assert (len(c.regressed), len(c.fixed), len(c.failed_errored), len(c.common)) == (2, 2, 2, 9)
    assert c.changed == []  # no row carries a digest here: no scenario is known to have changed
    assert c.only_a[0].kind == ONLY_A and c.only_b[0].kind == ONLY_B


def test_score_and_cost_deltas_per_pair_and_per_model() -> None:
    c = compare(BASELINE, CANDIDATE)
    by_pair = {x.pair: x for x in c.changes}
    flip = by_pair[("pass-to-fail", "m1")]
    assert (flip.score_delta, flip.cost_delta, flip.transition) == (-0.75, 0.001, "passed → failed")
    assert by_pair[("same-pass", "m1")].score_delta == -0.05
    assert (
        by_pair[("dropped", "m2")].score_delta is None
        and by_pair[("dropped", "m2")].transition == "passed → -"
    )
    assert c.cost_delta == 0.001  # only pass-to-fail changed cost, over the common pairs
    m1, m2 = c.models
    assert (m1.model, m1.pairs, m1.passed_a, m1.passed_b) == ("m1", 7, 3, 3)
    assert (m1.regressed, m1.fixed, m1.failed_errored) == (2, 2, 1)
    assert (m2.model, m2.pairs, m2.passed_a, m2.passed_b, m2.failed_errored) == ("m2", 2, 1, 1, 1)
    assert m1.mean_score_a == round((1 + 0.2 + 1 + 0.9 + 0.4 + 0 + 0.5) / 7, 4)
    assert m1.mean_score_b == round((0.95 + 0.3 + 0.25 + 0 + 1 + 0.8 + 0) / 7, 4)


def test_reports_and_result_lists_compare_the_same_and_carry_run_ids() -> None:
    run = {"catalog_name": "c", "digest": "d", "strategy": "sequential", "models": ["m2", "m1"]}
    a = build_report({**run, "id": "r_base"}, BASELINE)
    b = build_report({**run, "id": "r_new"}, CANDIDATE)
    from_reports = compare(a, b)
    assert (from_reports.run_a, from_reports.run_b) == ("r_base", "r_new")
    assert [m.model for m in from_reports.models] == ["m2", "m1"]  # the reports' model order
    from_rows = compare(BASELINE, [r.to_dict() for r in CANDIDATE])
    assert [x.to_dict() for x in from_rows.changes] == [x.to_dict() for x in from_reports.changes]
    mixed = compare(a, CANDIDATE)
    assert {f.pair for f in mixed.flipped} == set(EXPECTED_FLIPS)


def test_identical_runs_flip_nothing() -> None:
    c = compare(BASELINE, BASELINE)
    assert c.flipped == [] and c.only_a == [] and c.only_b == []
    assert c.mean_score_delta == 0.0 and c.cost_delta == 0.0
    assert "no pair flipped" in render_comparison(c)


def test_table_lists_flips_and_one_sided_pairs_only() -> None:
    text = render_comparison(compare(BASELINE, CANDIDATE, run_a="r_a", run_b="r_b"))
    lines = text.splitlines()
    assert lines[0] == ("compare r_a → r_b: 9 common pairs: 2 regressed, 2 fixed, 2 failed↔errored; "
                        "1 only in r_a, 1 only in r_b")
    flipped = [line.split() for line in lines if line.startswith("  ") and "→" in line]
    assert {(cells[1], cells[2]) for cells in flipped} == set(EXPECTED_FLIPS)
    row = next(cells for cells in flipped if cells[1] == "pass-to-fail")
    assert row[0] == "regressed" and row[3:6] == ["passed", "→", "failed"] and row[6] == "-0.750"
    assert "same-fail" not in text and "same-pass" not in text
    assert "  dropped × m2" in lines and "  added × m2" in lines
    header = next(i for i, line in enumerate(lines) if line.startswith("MODEL"))
    assert lines[header + 1].split()[:5] == ["m1", "7", "42.9%", "42.9%", "+0.0pp"]


def test_to_dict_is_json_and_counts_match() -> None:
    data = json.loads(json.dumps(compare(BASELINE, CANDIDATE, run_a="a", run_b="b").to_dict()))
    assert data["summary"] == {
        "common": 9,
        "regressed": 2,
        "fixed": 2,
        "failed_errored": 2,
        "changed": 0,
        "only_a": 1,
        "only_b": 1,
        "mean_score_delta": data["summary"]["mean_score_delta"],
        "cost_delta": 0.001,
        "cost_unknown": 0,
    }
    assert {(f["scenario_key"], f["model"]): f["kind"] for f in data["flipped"]} == EXPECTED_FLIPS
    assert data["only_a"] == [["dropped", "m2"]] and data["only_b"] == [["added", "m2"]]
    first = data["flipped"][0]
    assert first["before"]["status"] == "passed" and first["after"]["status"] in ("failed", "errored")


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown status 'weird'"):
        compare([{"scenario_key": "s", "model": "m", "status": "weird"}], [])
    with pytest.raises(ValueError, match="'results' rows"):
        compare({"run": {}}, [])


# -- `evaljobs compare` against a real SQLite store and runs made by the simulated provider -------------

CATALOG = """\
name: flips
scenarios:
  - key: steady
    prompt: "Hello [sim: say hello there]"
    expect: {{contains: [hello]}}
  - key: breaks
    prompt: "Tell me the code"
    expect: {{contains: [alpha]}}
  - key: heals
    prompt: "Tell me the word"
    expect: {{contains: [omega]}}
  - key: crashes
    prompt: "Answer [sim@fast: {crashes}] [sim: say fine]"
    expect: {{contains: [fine]}}
"""


#: What the models answer to the unchanged scenarios ``breaks`` and ``heals``: run A's answers, then run B's.
#: The models change their answers, not the catalog: these flips are the models' doing.
ANSWERS: dict[str, str] = {}


def _answers(model: str, messages: list[dict]) -> str | None:
    prompt = str(messages[-1].get("content") or "")
    return ANSWERS.get("breaks" if "code" in prompt else "heals" if "word" in prompt else "", None)


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.001, answers=_answers)


@pytest.fixture
def two_runs(tmp_path, sim, monkeypatch):
    """Run A (baseline) and run B of the same scenario keys, where the models' answers change on purpose
    (``breaks``, ``heals``) and one scenario is edited (``crashes``: the catalog's doing, not a model's)."""
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    db = f"sqlite:///{tmp_path}/compare.db"
    before = tmp_path / "a.yaml"
    before.write_text(CATALOG.format(crashes="say fine"))
    after = tmp_path / "b.yaml"
    after.write_text(CATALOG.format(crashes="status 400 bad request"))
    with Session(db=db, broker="memory") as session:
        ANSWERS.update(breaks="alpha", heals="nothing")
        a = session.submit(str(before), ["sim/fast", "sim/smart"], strategy="sequential")
        ANSWERS.update(breaks="beta", heals="omega")
        b = session.submit(str(after), ["sim/fast", "sim/smart"], strategy="sequential")
        ANSWERS.clear()
    assert (a.status, b.status) == ("complete", "partial")
    return db, a.id, b.id


def _cli(cli, db: str, *args: str):
    group = Group(name="evaljobs", commands={"compare": compare_command})
    return cli(*args, "--db", db, command=group)


def test_cli_compare_shows_exactly_the_flipped_pairs(cli, two_runs) -> None:
    db, a, b = two_runs
    result = _cli(cli, db, "compare", a, b, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {(f["scenario_key"], f["model"]): f["kind"] for f in data["flipped"]} == {
        ("breaks", "sim/fast"): REGRESSED, ("breaks", "sim/smart"): REGRESSED,
        ("heals", "sim/fast"): FIXED, ("heals", "sim/smart"): FIXED}
    # the edited scenario is "changed" on both models, also where its verdict went passed → errored
    assert [(c["scenario_key"], c["model"], c["kind"], c["after"]["status"]) for c in data["changed"]] == [
        ("crashes", "sim/fast", "changed", "errored"), ("crashes", "sim/smart", "changed", "passed")]
    assert data["summary"]["common"] == 8 and data["only_a"] == [] and data["only_b"] == []
    assert (data["summary"]["regressed"], data["summary"]["changed"]) == (2, 2)
    assert {m["model"]: (m["regressed"], m["changed"], m["pairs"]) for m in data["models"]} == {
        "sim/fast": (1, 1, 3), "sim/smart": (1, 1, 3)}
    assert (data["run_a"], data["run_b"]) == (a, b)
    assert "note: " in result.stderr and "different" not in result.stdout  # catalogs differ: said on stderr

    table = _cli(cli, db, "compare", a, b)
    assert table.exit_code == 0
    assert table.stdout.splitlines()[0] == (f"compare {a} → {b}: 8 common pairs: 2 regressed, 2 fixed, "
                                            "0 failed↔errored, 2 changed (scenario or judge changed, "
                                            "not counted)")
    assert "steady" not in table.stdout
    changed = table.stdout.split("changed: the scenario or its judge changed between the runs")[1]
    changed = changed.splitlines()
    assert [line.split()[:2] for line in changed[2:4]] == [["crashes", "sim/fast"], ["crashes", "sim/smart"]]


def test_cli_compare_gate_and_errors(cli, two_runs) -> None:
    db, a, b = two_runs
    gated = _cli(cli, db, "compare", a, b, "--fail-on-regression")
    assert gated.exit_code == 1
    assert f"FAIL: 2 pairs regressed from {a} to {b}" in gated.stderr
    improved = _cli(cli, db, "compare", a, a, "--fail-on-regression")
    assert improved.exit_code == 0 and "no pair flipped" in improved.stdout
    missing = _cli(cli, db, "compare", a, "r_nope")
    assert missing.exit_code == 2
    assert missing.stderr.strip() == "error: unknown run 'r_nope': list runs with `evaljobs runs`"


def test_cli_compare_reads_rows_of_a_run_without_report(cli, two_runs) -> None:
    db, a, _ = two_runs
    store.connect(db)
    catalog = store.load_snapshot(store.get_run(a).digest)
    pending = store.create_run(catalog, ["sim/fast"], strategy="sequential")
    store.record_result(pending.id, Result("steady", "sim/fast", "failed", 0.0, fault="missing_content"))
    result = _cli(cli, db, "compare", a, pending.id, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [(f["scenario_key"], f["kind"]) for f in data["flipped"]] == [("steady", REGRESSED)]
    assert len(data["only_a"]) == 7
