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
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from helpers.workers import wait_until

ROOT = Path(__file__).resolve().parents[2]

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



def test_a_cancelled_run_has_a_partial_report_and_recover_resumes_it(cli, tmp_path, simulated_provider):
    simulated_provider(latency=0.0)
    db = f"sqlite:///{tmp_path}/cancel.db"
    store.connect(db)
    run = store.create_run(loads_catalog(CATALOG), ["sim/a"], strategy="fanout")
    store.mark_running(run.id)
    store.record_result(run.id, Result("quick", "sim/a", "passed", 1.0, output="quick"))
    with Session(db=db) as session:
        assert session.cancel(run.id).run.status == store.CANCELLED

    markdown = cli("report", run.id, "--db", db)
    assert markdown.exit_code == 0, markdown.output
    assert markdown.stdout.startswith(
        "> **PARTIAL REPORT: run is cancelled, 1/3 pairs finished; missing (2): other × sim/a, "
        f"slow × sim/a; resume it with `evaljobs recover {run.id}`**")
    data = json.loads(cli("report", run.id, "--format", "json", "--db", db).stdout)
    assert data["partial"] == {"status": "cancelled", "finished": 1, "expected": 3,
                               "missing": ["other × sim/a", "slow × sim/a"],
                               "missing_pairs": [{"scenario_key": "other", "model": "sim/a", "epoch": 0},
                                                 {"scenario_key": "slow", "model": "sim/a", "epoch": 0}],
                               "resume": f"evaljobs recover {run.id}"}
    _assert_junit_lists_what_did_not_finish(cli("report", run.id, "--format", "junit", "--db", db).stdout,
                                            run.id)
    assert store.get_run(run.id).report is None  # a view: nothing stored

    resumed = cli("recover", run.id, "--db", db, "--broker", "memory")
    assert resumed.exit_code == 0, resumed.output
    assert f"{run.id}: resuming the cancelled run" in resumed.output
    done = store.get_run(run.id)
    assert done.status == store.COMPLETE and done.report is not None and "partial" not in done.report
    final = json.loads(cli("report", run.id, "--format", "json", "--db", db).stdout)
    assert final == done.report and final["summary"]["results"] == 3


def _assert_junit_lists_what_did_not_finish(xml: str, run_id: str) -> None:
    """JUnit: the suite says the report is partial; each missing pair is a test case in error (CI shows it
    red: a run that did not finish never reads as green), the finished one is as it was."""
    root = ET.fromstring(xml)
    assert root.get("name") == "evaljobs partial (partial: 1/3 pairs)"
    assert (root.get("tests"), root.get("errors"), root.get("failures")) == ("3", "2", "0")
    (suite,) = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("errors")) == ("3", "2")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["partial"] == (f"run is cancelled, 1/3 pairs finished, 2 missing; "
                                f"resume it with `evaljobs recover {run_id}`")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert list(cases) == ["quick", "other", "slow"]  # the catalog's order, unfinished ones after
    assert len(cases["quick"]) == 0  # passed
    for key in ("other", "slow"):
        (error,) = cases[key]
        assert (error.tag, error.get("type")) == ("error", "not_finished")
        assert error.get("message") == ("not finished: run is cancelled; "
                                        f"resume it with `evaljobs recover {run_id}`")


def test_junit_of_a_partial_run_with_epochs_marks_missing_epochs(cli, tmp_path):
    db = f"sqlite:///{tmp_path}/epochs.db"
    store.connect(db)
    run = store.create_run(loads_catalog(CATALOG), ["sim/a"], strategy="fanout", epochs=2)
    store.mark_running(run.id)
    store.record_result(run.id, Result("quick", "sim/a", "passed", 1.0, output="quick", epoch=0))
    store.record_result(run.id, Result("quick", "sim/a", "passed", 1.0, output="quick", epoch=1))
    store.record_result(run.id, Result("other", "sim/a", "passed", 1.0, output="other", epoch=1))
    store.interrupt(run.id)
    root = ET.fromstring(cli("report", run.id, "--format", "junit", "--db", db).stdout)
    (suite,) = root.findall("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert [case.find("error") is not None for case in cases.values()] == [False, False, True]
    other = {p.get("name"): p.get("value") for p in cases["other"].iter("property")}
    assert other == {"missing_epochs": "0"}
    assert cases["slow"].find("error").text.startswith("no result yet (epochs 0, 1): run is interrupted, 3/6")
    assert (suite.get("tests"), suite.get("errors")) == ("3", "1")


def test_a_sweep_of_every_run_leaves_a_cancelled_run_alone(cli, tmp_path):
    db = f"sqlite:///{tmp_path}/sweep.db"
    store.connect(db)
    run = store.create_run(loads_catalog(CATALOG), ["sim/a"], strategy="fanout")
    store.cancel(run.id)
    swept = cli("recover", "--db", db, "--broker", "memory")
    assert swept.exit_code == 0 and run.id not in swept.stdout
    assert store.get_run(run.id).status == store.CANCELLED


#: Where the pipeline's reader says it has gone: ``head`` took its lines and exited, and the group it ran in
#: closed its own copy of the pipe, so nothing reads the run's output any more.
_HEAD_GONE = "head-gone"


def _held_until_head_is_gone(tmp_path: Path):
    """The provider's answer to the ``slow`` scenario: given only once ``head`` has exited (the file the
    pipeline touches then), so the run's next line is written to a pipe nobody reads — every strategy
    meets a closed output mid-run, whatever the machine's speed (a condition the test controls)."""
    gone = tmp_path / _HEAD_GONE

    def answers(model: str, messages: list[dict]) -> str | None:
        if "slow" not in str(messages[-1].get("content") or ""):
            return None
        wait_until(gone.exists, timeout=120)
        return "slow"

    return answers


#: After the held scenario: pairs that end only at the pair's time limit (``--time-limit 5``), so the run is
#: far from done when its output closes: whatever a strategy had in hand then lands, the rest is missing.
LATE = "".join(f"""\
  - key: late{n}
    prompt: "[sim: sleep 60] [sim: say late]"
    expect: {{contains: [late]}}
""" for n in range(1, 4))


def _through_head(tmp_path: Path, sim, command: str, lines: int) -> None:
    """``python -m evaljobs COMMAND 2>&1 | head -LINES`` in a real shell: the reader exits mid-run, then its
    group closes its copy of the pipe and says so (the held answers wait for that). The command exits 130
    with no traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALJOBS_SIM_URL": sim.url}
    reader = f"{{ head -{lines}; exec 0<&-; touch {tmp_path / _HEAD_GONE}; }}"
    script = f"{sys.executable} -m evaljobs {command} 2>&1 | {reader}; echo \"status=${{PIPESTATUS[0]}}\" >&2"
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert "status=130" in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr, done.stderr


@pytest.mark.parametrize("strategy", ["sequential", "threads", "fanout", "per-model"])
def test_a_closed_output_interrupts_the_run_which_gets_a_partial_report(cli, tmp_path, simulated_provider,
                                                                         strategy):
    sim = simulated_provider(latency=0.0, answers=_held_until_head_is_gone(tmp_path))
    db = f"sqlite:///{tmp_path}/head.db"
    catalog = tmp_path / "partial.yaml"
    catalog.write_text(CATALOG.replace("[sim: sleep 2] ", "") + LATE)  # slow: held (above), not slept
    # the progress lines go to stderr, here into the pipe: head takes three and exits mid-run
    _through_head(tmp_path, sim, f"run {catalog} -m sim/a -m sim/b --db {db} --broker memory --width 2 "
                                 f"--time-limit 5 --strategy {strategy}", 3)
    store.connect(db)
    (run,) = store.list_runs()
    assert run.strategy == strategy
    assert run.status == store.INTERRUPTED and run.report is None
    assert run.persisted < run.expected == 12  # it stopped: late pairs were never taken
    text = cli("report", run.id, "--format", "table", "--db", db).stdout
    assert text.startswith(f"PARTIAL REPORT: run is interrupted, {run.persisted}/12 pairs finished; missing")
    assert f"resume it with `evaljobs recover {run.id}`" in text.splitlines()[0]


def test_a_closed_output_at_the_last_pair_still_leaves_the_finished_run_its_report(tmp_path,
                                                                                  simulated_provider):
    """The line that finds the output closed is the run's last pair's: the pair is in, so the run is
    finished and gets its one report (not an interrupted run with nothing missing)."""
    sim = simulated_provider(latency=0.0, answers=_held_until_head_is_gone(tmp_path))
    db = f"sqlite:///{tmp_path}/last.db"
    catalog = tmp_path / "partial.yaml"
    catalog.write_text(CATALOG.replace("[sim: sleep 2] ", ""))  # slow, the last pair: held until head exits
    _through_head(tmp_path, sim, f"run {catalog} -m sim/a --db {db} --strategy sequential", 2)
    store.connect(db)
    (run,) = store.list_runs()
    assert (run.status, run.persisted) == (store.COMPLETE, 3) and run.report is not None


def test_a_closed_output_interrupts_an_in_process_rerun_too(tmp_path, simulated_provider):
    sim = simulated_provider(latency=0.0, answers=_held_until_head_is_gone(tmp_path))
    db = f"sqlite:///{tmp_path}/rerun.db"
    catalog = tmp_path / "partial.yaml"
    catalog.write_text(CATALOG.replace("[sim: sleep 2] ", "") + LATE)
    gone = tmp_path / _HEAD_GONE
    gone.touch()  # the original run is not held
    with Session(db=db, broker="memory") as session:
        original = session.run(str(catalog), ["sim/a", "sim/b"], strategy="sequential", time_limit=1)
    gone.unlink()
    _through_head(tmp_path, sim, f"rerun {original.id} --all --db {db} --broker memory", 3)
    store.connect(db)
    rerun = next(run for run in store.list_runs() if run.id != original.id)
    assert rerun.status == store.INTERRUPTED and rerun.persisted < rerun.expected == 12
