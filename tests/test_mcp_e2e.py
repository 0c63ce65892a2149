"""Issue 10 end to end: a tool-heavy catalog whose tools are a live MCP server, fanned out."""
from __future__ import annotations

import pytest

from evaljobs import store
from evaljobs.api import Session
from helpers import ROOT


@pytest.fixture
def sim(simulated_provider):
    return simulated_provider(latency=0.01)


def test_mcp_tools_catalog_runs_with_fanout_and_records_tool_calls(sim, sqlite_url, monkeypatch, allow_code):
    """The catalog's servers are programs it names: this process's operator opts in (--allow-code)."""
    monkeypatch.chdir(ROOT)  # the catalog starts examples/mcp_tools/server.py by a relative path
    with Session(db=sqlite_url, broker="memory", width=4) as session:
        catalog = session.load("examples/catalogs/tools_mcp.yaml")
        run = session.submit(catalog, ["sim/a", "sim/b"], strategy="fanout")
        info = session.wait(run.id, timeout=120, poll=0.5)
    assert info.status == "complete" and info.persisted == 2 * len(catalog.scenarios)
    results = store.list_results(run.id)
    calls = [call for r in results for call in r.tool_calls]
    assert len(calls) >= 2 * 6  # several tool calls per scenario, per model
    ok = [c for c in calls if not c["error"]]
    assert ok and all(c["result"] is not None and c["duration_ms"] >= 0 for c in ok)  # measured: present
    # the live server's answer, not a canned one, reached the model and the result
    status = next(r for r in results if r.scenario_key == "orders.status")
    assert status.tool_calls[0]["name"] == "lookup_order" and "shipped" in str(status.tool_calls[0]["result"])
    bad = next(r for r in results if r.scenario_key == "orders.bad-id")
    assert "not valid" in bad.tool_calls[0]["error"]
    assert info.report["summary"]["results"] == len(results)
