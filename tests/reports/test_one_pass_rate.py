"""One number, one definition: on an ``--epochs 3`` run the run summary, ``compare`` and the viewer show the
same pass rate under the same label, and flips over epochs follow the epoch pass rate against the threshold.

Before: the run summary said sim/smart 95 % (every epoch a row), ``compare`` said 75 % under the same "PASS"
label (a scenario counted only when every epoch passed), and the viewer's scenario page showed no flip
for epoch runs.
"""
from __future__ import annotations

import json
import re

import httpx
import pytest
from helpers import Viewer

from evaljobs import store

# Each scenario's answer goes astray at random (deterministically per conversation and ask): its epochs
# disagree, so "every epoch a row" and "a scenario over its epochs" are different numbers.
CATALOG = "name: epochs-one\nscenarios:\n" + "".join(
    f'  - key: q{i}\n    prompt: "Question {i}. [sim: flaky 0.4] [sim: say answer {i}]"\n'
    f'    expect: {{contains: ["answer {i}"]}}\n' for i in range(8))


@pytest.fixture
def env(tmp_path, simulated_provider, monkeypatch):
    simulated_provider(latency=0.0)  # a fresh provider: its draws depend on how often it was asked
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/one.db")
    monkeypatch.delenv("EVALJOBS_BROKER_URL", raising=False)
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    return tmp_path


def _pct(rate: float) -> str:
    return f"{rate * 100:.1f}%"


def test_an_epoch_run_shows_one_pass_rate_everywhere_and_flips_over_epochs(cli, env):
    for _ in range(2):
        cli.ok("run", str(env / "catalog.yaml"), "-m", "sim/a", "-m", "sim/b", "--epochs", "3", "--strategy",
               "sequential")
    b, a = (r.id for r in store.list_runs()[:2])
    reports = {run: json.loads(cli.ok("report", run, "--format", "json").stdout) for run in (a, b)}
    rates = {run: {m["model"]: m["pass_rate"] for m in rep["models"]} for run, rep in reports.items()}
    flaky = [p for rep in reports.values() for p in rep["epochs"]["pairs"] if p["flaky"]]
    assert flaky, "the epochs disagree somewhere: the two definitions differ on this run"
    for run, rep in reports.items():
        # the report's own blocks agree: the model block and the epochs block are one definition
        assert rates[run] == {m["model"]: m["pass_rate"] for m in rep["epochs"]["models"]}
        table = cli.ok("report", run, "--format", "table").stdout
        md = cli.ok("report", run, "--format", "md").stdout
        html = cli.ok("report", run, "--format", "html").stdout
        junit = cli.ok("report", run, "--format", "junit").stdout
        scenarios = {m["model"]: m for m in rep["epochs"]["models"]}
        for model, rate in rates[run].items():
            assert re.search(rf"^{re.escape(model)}\s.*\s{re.escape(_pct(rate))}\s", table, re.MULTILINE), (
                table
            )
            assert f"`{model}` | {_pct(rate)} |" in md
            assert re.search(
                rf"<td>{re.escape(model)}</td><td class=n>\d</td><td " rf"class=n>{re.escape(_pct(rate))}<",
                html,
            )
            # the second number, under its own name everywhere it is shown
            m = scenarios[model]
            assert f"scenarios passed {m['scenarios_passed']}/{m['scenarios']}" in table
            assert f"| {m['scenarios_passed']}/{m['scenarios']} |" in md and "Scenarios passed" in html
            suite = junit.split(f'<testsuite name="{model}"', 1)[1].split(">", 1)[0]
            assert f'failures="{m["scenarios"] - m["scenarios_passed"]}"' in suite
            # its test cases count scenarios passed; the pass rate rides along as a suite property
            properties = junit.split(f'<testsuite name="{model}"', 1)[1].split("</properties>", 1)[0]
            assert f'<property name="pass_rate" value="{_pct(rate)}" />' in properties, properties

    # compare: PASS A / PASS B are those very numbers; "scenarios passed" is its own column
    compared = json.loads(cli.ok("compare", a, b, "--json").stdout)
    for m in compared["models"]:
        assert (m["pass_rate_a"], m["pass_rate_b"]) == (rates[a][m["model"]], rates[b][m["model"]])
        assert m["trials_a"] == m["trials_b"] == 8 * 3
    text = cli.ok("compare", a, b).stdout
    assert "SCEN A" in text
    for model in ("sim/a", "sim/b"):
        row = next(line for line in text.splitlines() if line.startswith(model))
        assert row.split()[2:4] == [_pct(rates[a][model]), _pct(rates[b][model])], row

    # flips over epochs: a pair flips when its epoch pass rate crosses the scenario's threshold (0.7)
    pairs = {
        run: {(p["scenario_key"], p["model"]): p for p in rep["epochs"]["pairs"]}
        for run, rep in reports.items()
    }
    expected = {pair for pair in pairs[a] if pairs[a][pair]["ok"] != pairs[b][pair]["ok"]}
    listed = {(f["scenario_key"], f["model"]) for f in compared["flipped"]}
    significant_or_flaky = listed | {(f["scenario_key"], f["model"]) for f in compared.get("flaky", [])}
    assert significant_or_flaky == expected and expected, (
        "some scenario crosses its threshold between the runs"
    )

    viewer = Viewer(f"sqlite:///{env}/one.db", "memory", env / "view.log")
    try:
        for run in (a, b):
            page = httpx.get(f"{viewer.url}/runs/{run}", timeout=30).text
            for model, rate in rates[run].items():
                cell = re.search(
                    rf'<tr data-model="{re.escape(model)}">.*?class="num pass-rate">([^<]+)<', page, re.DOTALL
                )
                assert cell and cell.group(1) == _pct(rate), model
        page = httpx.get(f"{viewer.url}/compare?a={a}&b={b}", timeout=30).text
        for model in ("sim/a", "sim/b"):
            row = re.search(
                rf'<tr data-model="{re.escape(model)}">.*?pass-rate-a">([^<]+)<.*?pass-rate-b">([^<]+)<',
                page,
                re.DOTALL,
            )
            assert row and row.groups() == (_pct(rates[a][model]), _pct(rates[b][model])), model
        for key, model in sorted(expected):  # the scenario page with a baseline shows the flip over epochs
            page = httpx.get(f"{viewer.url}/runs/{b}/scenarios/{key}?baseline={a}", timeout=30).text
            article = page.split(f'data-model="{model}"', 1)[1].split("</article>", 1)[0]
            assert 'class="flip' in article and "epochs passed (" in article, (key, model)
    finally:
        viewer.close()
