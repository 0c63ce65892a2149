"""Issue 10 end to end: a tool-heavy catalog whose tools are a live MCP server, fanned out."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from evaljobs import store
from evaljobs.api import Session
from helpers.paths import CHILD_PYTHONPATH
from helpers import ROOT, WorkerProcess


#: A provider per test (the ``sim`` fixture in tests/conftest.py), which worker processes reach through
#: EVALJOBS_SIM_URL.
SIM_OPTIONS = dict(latency=0.01)
SIM_PER_TEST = True


def test_mcp_tools_catalog_runs_with_fanout_and_records_tool_calls(sim, sqlite_url, monkeypatch, allow_code):
    """The catalog's servers are programs it names: this process's operator opts in (--allow-code)."""
    monkeypatch.chdir(ROOT)
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


def _cli(*args: str, cwd, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    full["PYTHONPATH"] = CHILD_PYTHONPATH
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "evaljobs", *args], env=full, cwd=cwd, capture_output=True,
                          text=True, timeout=180)


def test_the_mcp_catalog_runs_from_any_directory_its_paths_mean_its_own_folder(tmp_path):
    """Issue 40 (17): `../mcp_tools/server.py` is the catalog's neighbour, wherever `evaljobs run` runs."""
    pytest.importorskip("mcp")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    ran = _cli("run", str(ROOT / "examples" / "catalogs" / "tools_mcp.yaml"), "-m", "sim/a", "--allow-code",
               "--db", db, "--wait", "--json", cwd=tmp_path)
    assert "Traceback" not in ran.stderr, ran.stderr
    assert ran.returncode == 0, ran.stdout + ran.stderr
    store.connect(db)
    (run,) = store.list_runs()
    results = store.list_results(run.id)
    assert {r.status for r in results} == {"passed"}, [(r.scenario_key, r.error) for r in results]
    assert run.options["catalog_root"] == str(ROOT / "examples" / "catalogs")  # beside the snapshot...
    assert "../mcp_tools/server.py" in json.dumps(store.load_snapshot(run.digest).body)  # ...as written


LIVE_CATALOG = """\
name: gone
scenarios:
  - key: s
    prompt: 'Where is 1234? [sim: call lookup_order {"order_id": "1234"}] [sim: say It has shipped.]'
    tools:
      - name: lookup_order
        parameters: {type: object, properties: {order_id: {type: string}}}
        mcp: {command: [python, server.py, --stdio], timeout: 10}
    expect: {contains: [shipped]}
"""


@pytest.mark.redis
def test_a_worker_without_the_catalogs_folder_errors_the_pair_in_one_line(tmp_path, redis_url, sqlite_url):
    """The folder a run's relative MCP paths mean is missing on the worker: one line naming it, nothing
    started from some other directory."""
    folder = tmp_path / "catalogs"
    folder.mkdir()
    shutil.copy(ROOT / "examples" / "mcp_tools" / "server.py", folder / "server.py")
    catalog = folder / "live.yaml"
    catalog.write_text(LIVE_CATALOG)
    env = {"EVALJOBS_ALLOW_CODE": "1"}
    ran = _cli("run", str(catalog), "-m", "sim/m", "--broker", redis_url, "--db", sqlite_url, "--no-wait",
               cwd=tmp_path, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    shutil.rmtree(folder)  # the worker's machine has no such folder
    with Session(db=sqlite_url, broker=redis_url) as session:
        (run,) = store.list_runs()
        with WorkerProcess(redis_url, sqlite_url, threads=1, env=env, log=tmp_path / "worker.log"):
            session.wait(run.id, timeout=120, poll=0.5)
    (result,) = store.list_results(run.id)
    assert result.status == "errored"
    error = result.error or ""
    assert "\n" not in error, error
    assert f"the catalog's folder {folder} does not exist on this worker" in error, error
    assert "checkout at the same path" in error, error
