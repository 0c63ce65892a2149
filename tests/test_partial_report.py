"""Every run ends with a report: a cancelled run and a run whose output was closed (`| head`) each have a
partial report — what finished, what is missing, the command that resumes it — and that command resumes
it to its one stored report (invariant 3: the partial report is a view, never stored).

Real processes where the test is about them: ``evaljobs run … 2>&1 | head -3`` is a real shell pipeline.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.cli import main
from evaljobs.evaluation.result import Result

ROOT = Path(__file__).resolve().parent.parent

CATALOG = """\
name: partial
scenarios:
  - key: quick
    prompt: "[sim: say quick]"
    expect: {contains: [quick]}
  - key: other
    prompt: "[sim: say other]"
    expect: {contains: [other]}
  - key: slow
    prompt: "[sim: sleep 2] [sim: say slow]"
    expect: {contains: [slow]}
"""


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_a_cancelled_run_has_a_partial_report_and_recover_resumes_it(tmp_path, simulated_provider):
    simulated_provider(latency=0.0)
    db = f"sqlite:///{tmp_path}/cancel.db"
    store.connect(db)
    run = store.create_run(loads_catalog(CATALOG), ["sim/a"], strategy="fanout")
    store.mark_running(run.id)
    store.record_result(run.id, Result("quick", "sim/a", "passed", 1.0, output="quick"))
    with Session(db=db) as session:
        assert session.cancel(run.id).run.status == store.CANCELLED

    markdown = _cli("report", run.id, "--db", db)
    assert markdown.exit_code == 0, markdown.output
    assert markdown.stdout.startswith(
        "> **PARTIAL REPORT: run is cancelled, 1/3 pairs finished; missing (2): other × sim/a, "
        f"slow × sim/a; resume it with `evaljobs recover {run.id}`**")
    data = json.loads(_cli("report", run.id, "--format", "json", "--db", db).stdout)
    assert data["partial"] == {"status": "cancelled", "finished": 1, "expected": 3,
                               "missing": ["other × sim/a", "slow × sim/a"],
                               "resume": f"evaljobs recover {run.id}"}
    assert store.get_run(run.id).report is None  # a view: nothing stored

    resumed = _cli("recover", run.id, "--db", db, "--broker", "memory")
    assert resumed.exit_code == 0, resumed.output
    assert f"{run.id}: resuming the cancelled run" in resumed.output
    done = store.get_run(run.id)
    assert done.status == store.COMPLETE and done.report is not None and "partial" not in done.report
    final = json.loads(_cli("report", run.id, "--format", "json", "--db", db).stdout)
    assert final == done.report and final["summary"]["results"] == 3


def test_a_sweep_of_every_run_leaves_a_cancelled_run_alone(tmp_path):
    db = f"sqlite:///{tmp_path}/sweep.db"
    store.connect(db)
    run = store.create_run(loads_catalog(CATALOG), ["sim/a"], strategy="fanout")
    store.cancel(run.id)
    swept = _cli("recover", "--db", db, "--broker", "memory")
    assert swept.exit_code == 0 and run.id not in swept.stdout
    assert store.get_run(run.id).status == store.CANCELLED


def test_a_closed_output_interrupts_the_run_which_gets_a_partial_report(tmp_path, simulated_provider):
    sim = simulated_provider(latency=0.0)
    db = f"sqlite:///{tmp_path}/head.db"
    catalog = tmp_path / "partial.yaml"
    catalog.write_text(CATALOG)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALJOBS_SIM_URL": sim.url}
    evaljobs = f"{sys.executable} -m evaljobs"
    # the progress lines go to stderr, here into the pipe: head takes three and closes it mid-run
    script = (f"{evaljobs} run {catalog} -m sim/a -m sim/b --db {db} --broker memory --width 2 2>&1 "
              f"| head -3; echo \"status=${{PIPESTATUS[0]}}\" >&2")
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert "status=130" in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    store.connect(db)
    (run,) = store.list_runs()
    assert run.status == store.INTERRUPTED and run.report is None
    text = _cli("report", run.id, "--format", "table", "--db", db).stdout
    assert text.startswith(f"PARTIAL REPORT: run is interrupted, {run.persisted}/6 pairs finished; missing")
    assert f"resume it with `evaljobs recover {run.id}`" in text.splitlines()[0]
