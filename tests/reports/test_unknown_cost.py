"""Unknown is not zero: a judged catalog against a provider with no prices, end to end.

Before: the judge summed its calls' costs with ``cost += None`` (an unknown price became ``null``), so
every judged pair on a local or gateway judge model ended ``errored`` with a TypeError; reports showed
"≥ $0.0000" for a run whose every cost was unknown; ``compare`` counted unknown costs as 0 and the
viewer's compare page raised on a ``None`` cost difference.
"""
from __future__ import annotations

import json
import uuid

import httpx
import pytest
from helpers import Viewer

from evaljobs import store
from evaljobs.bench.analysis import recommend, summarize
from evaljobs.bench.model import BenchResult, BenchSpec, Measurement
from evaljobs.bench.render import render_table as bench_table

CATALOG = """
name: unpriced-TAG
defaults: {judge_model: lab/judge}
scenarios:
  - key: kind
    prompt: "My parcel is late. [sim: say I'm sorry the parcel is late; I will track it now. TAG]"
    expect:
      judge: "The answer says sorry and tracks the parcel."
  - key: curt
    prompt: "My parcel is late. [sim: say Wait. TAG]"
    expect:
      contains: [wait]
      judge: "The answer says sorry and tracks the parcel."
"""


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.001)


@pytest.fixture
def env(cli, tmp_path, sim, monkeypatch):
    """Catalog and providers file, on the shared ``cli``'s clean environment, in ``cost.db``."""
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/cost.db")
    providers = tmp_path / "providers.yaml"
    providers.write_text(
        f'providers:\n  lab: {{api: openai, base_url: "{sim.url}", api_key_env: null, stream: false}}\n'
    )
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(providers))
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG.replace("TAG", uuid.uuid4().hex[:6]))
    return tmp_path




def _run(cli, env, *extra: str) -> str:
    done = cli(
        "run",
        str(env / "catalog.yaml"),
        "-m",
        "lab/fast",
        "--broker",
        "memory",
        "--strategy",
        "sequential",
        *extra,
    )
    assert done.exit_code == 0, done.output
    return (
        store.list_runs()[0].id if hasattr(store, "list_runs") else done.output.split("run ")[1].split(":")[0]
    )


def test_a_judged_run_without_prices_completes_with_verdicts_and_cost_unknown_everywhere(cli, env):
    run_id = _run(cli, env)
    rows = store.list_results(run_id)
    assert {r.scenario_key: (r.status, r.fault) for r in rows} == {"kind": ("passed", None),
                                                                   "curt": ("failed", "low_quality")}
    for row in rows:  # graded by the judge, never run_error, and no cost invented
        assert row.details["judge"]["score"] is not None and row.details["judge"]["model"] == "lab/judge"
        assert row.cost is None

    def report(fmt: str) -> str:
        done = cli("report", run_id, "--format", fmt)
        assert done.exit_code == 0, done.output
        return done.output

    assert "cost unknown for 2 pairs" in report("table") and "$0.0000" not in report("table")
    assert "cost unknown for 2 pairs" in report("md") and "$0.0000" not in report("md")
    html = report("html")
    assert "cost unknown for 2 pairs" in html and "$0.0000" not in html
    assert '<property name="cost" value="cost unknown for 2 pairs" />' in report("junit")
    data = json.loads(report("json"))
    assert data["summary"]["cost_unknown"] == 2 and all(r["cost"] is None for r in data["results"])
    assert all(r["judge"]["score"] is not None for r in data["results"])

    # A second run, compared: the cost difference is unknown, not +$0.
    again = _run(cli, env)
    compared = cli("compare", run_id, again)
    assert compared.exit_code == 0, compared.output
    assert "cost unknown (common pairs)" in compared.output and "+$0.0000" not in compared.output
    summary = json.loads(cli("compare", run_id, again, "--json").output)["summary"]
    assert summary["cost_delta"] is None and summary["cost_unknown"] == 2

    # The viewer's pages say "unknown" and never fail on a missing price.
    viewer = Viewer(f"sqlite:///{env}/cost.db", "memory", env / "view.log")
    try:
        pages = {"runs": "/", "run": f"/runs/{run_id}", "scenario": f"/runs/{run_id}/scenarios/kind",
                 "compare": f"/compare?a={run_id}&b={again}",
                 "baseline": f"/runs/{again}/scenarios/kind?baseline={run_id}"}
        for name, path in pages.items():
            response = httpx.get(viewer.url + path, timeout=30)
            assert response.status_code == 200, (name, response.text[-2000:])
            assert "unknown" in response.text and "$0.0000" not in response.text, name
        # The cost chart draws no dot at $0 for a model whose cost is unknown (nor a made-up $1 axis): the
        # legend names it with "cost unknown".
        chart = httpx.get(viewer.url + f"/runs/{run_id}", timeout=30).text.split('id="chart-cost"')[1]
        drawing, legend = chart.split("</svg>")[0], chart.split("</ol>")[0]
        assert "<circle" not in drawing and "$1.0000" not in drawing, drawing
        assert "lab/fast" in legend and "cost unknown" in legend
    finally:
        viewer.close()


def test_a_judge_cap_on_an_unpriced_judge_counts_calls_and_never_crashes(cli, env):
    run_id = _run(cli, env, "--judge-cap", "1")
    rows = store.list_results(run_id)
    judged = [r for r in rows if isinstance(r.details.get("judge"), dict)]
    assert len(judged) == 1 and all(r.status != "errored" for r in rows)
    assert all(r.cost is None for r in rows)


def test_the_bench_shows_an_unknown_cost_as_unknown():
    base = {
        "width": 2,
        "pairs": 10,
        "wall_s": 1.0,
        "requests": 10,
        "rate_limited": 0,
        "errors": 0,
        "retries": 0,
        "errored_pairs": 0,
        "passed": 10,
        "cpu_s": 0.5,
        "peak_rss_mb": 80.0,
        "status": "complete",
    }
    measurements = [Measurement(strategy="fanout", repeat=i, run_id=f"r_{i}", cost=c, **base)
                    for i, c in enumerate((0.01, None))]
    cells = summarize(measurements)
    assert cells[0].cost is None
    spec = BenchSpec(catalog="c.yaml", models=["lab/m"], widths=(2,), repeat=2)
    table = bench_table(BenchResult(spec, {"cores": 2}, measurements, cells, recommend(cells, cores=2)))
    assert "unknown" in table.splitlines()[1]
