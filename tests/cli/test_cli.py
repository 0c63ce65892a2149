"""The CLI end to end: run → show → report, the --fail-under gate, one-line errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from evaljobs.cli import main
from helpers import ROOT

SUPPORT = str(ROOT / "examples/catalogs/support.yaml")


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.005)


@pytest.fixture
def cli(cli, sim):
    """The shared ``cli`` (tests/conftest.py) with the module's simulated provider."""
    return cli


def run_id_from(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("run r_"):
            return line.split()[1].rstrip(":")
    raise AssertionError(output)


@pytest.mark.parametrize("strategy", ["sequential", "threads", "fanout", "per-model"])
def test_run_then_report_every_strategy(cli, strategy):
    result = cli("run", SUPPORT, "-m", "sim/fast", "-m", "sim/smart", "--strategy", strategy, "--width", "4")
    assert result.exit_code == 0, result.output
    assert "sim/smart" in result.output and "verdict: 1. sim/smart" in result.output
    run_id = run_id_from(result.output)
    shown = cli("show", run_id)
    assert shown.exit_code == 0 and "cancel-order × sim/fast" in shown.output
    md = cli("report", run_id, "--format", "md")
    assert md.exit_code == 0 and "sim/smart" in md.output
    as_json = json.loads(cli("report", run_id, "--format", "json").output)
    assert as_json["summary"]["results"] == 28
    assert as_json["run"]["strategy"] == strategy


def test_fail_under_gate_exit_codes(cli, tmp_path):
    ok = cli("run", SUPPORT, "-m", "sim/smart", "--fail-under", "90%")
    assert ok.exit_code == 0, ok.output
    failing = cli("run", SUPPORT, "-m", "sim/fast", "--fail-under", "0.9")
    assert failing.exit_code == 1
    assert "FAIL: pass rate 71.4% is under --fail-under 90.0%" in failing.output  # tone: judge 0.21 fails
    run_id = run_id_from(failing.output)
    assert cli("report", run_id, "--fail-under", "0.5", "-o", str(tmp_path / "r.md")).exit_code == 0
    assert cli("report", run_id, "--fail-under", "0.95", "-o", str(tmp_path / "r.md")).exit_code == 1
    assert (tmp_path / "r.md").read_text().startswith("#")


def test_bad_catalog_is_one_line_per_problem_exit_2_and_creates_no_run(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nscenarios:\n  - key: a\n    prompt: ''\n  - key: a\n    prompt: hi\n    expct: {}\n"
    )
    result = cli("run", str(bad), "-m", "sim/fast")
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line]
    assert all(line.startswith("error: ") for line in lines), result.output
    assert any("bad.yaml:4" in line and "empty" in line.lower() for line in lines), result.output
    assert any("duplicate" in line.lower() for line in lines), result.output
    assert any("expct" in line for line in lines), result.output
    assert "Traceback" not in result.output
    assert "no runs yet" in cli("runs").output


def test_unknown_provider_and_bad_options(cli):
    result = cli("run", SUPPORT, "-m", "nosuch/model")
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "nosuch" in result.output
    result = cli("run", SUPPORT, "-m", "sim/a", "-m", "sim/a")
    assert result.exit_code == 2 and "twice" in result.output
    result = cli("run", "missing.yaml", "-m", "sim/a")
    assert result.exit_code == 2 and "does not exist" in result.output
    result = cli("run", SUPPORT, "-m", "sim/fast", "--broker", "kafka://x")
    assert result.exit_code == 2 and "unsupported broker" in result.output
    result = cli("show", "r_nope")
    assert result.exit_code == 2 and "r_nope" in result.output


def test_db_upgrade_and_catalog_check(cli):
    first = cli("db", "upgrade")
    assert first.exit_code == 0
    assert cli("db", "upgrade").stdout.strip() == "schema is up to date"  # stderr: the stage line
    checked = cli("catalog", "check", SUPPORT)
    assert checked.exit_code == 0 and "sha256:" in checked.output and "14 scenarios" in checked.output


def test_python_dash_m_evaljobs_runs_for_real(tmp_path, sim):
    env = {
        "EVALJOBS_SIM_URL": sim.url,
        "EVALJOBS_DATABASE_URL": f"sqlite:///{tmp_path}/m.db",
        "PATH": "/usr/bin",
    }
    out = subprocess.run([sys.executable, "-m", "evaljobs", "run", SUPPORT, "-m", "sim/smart", "--json"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["summary"]["pass_rate"] == 1.0
    assert "[14/14]" in out.stderr  # a progress line per result when not on a terminal


def test_a_reader_that_goes_away_is_not_a_server_error(tmp_path, sim):
    # `evaljobs runs | head -0`: the pipe's reader is gone before we write. Quiet, and 141 as a shell would
    # give.
    env = {
        "EVALJOBS_SIM_URL": sim.url,
        "EVALJOBS_DATABASE_URL": f"sqlite:///{tmp_path}/p.db",
        "PATH": "/usr/bin",
    }
    subprocess.run([sys.executable, "-m", "evaljobs", "run", SUPPORT, "-m", "sim/smart", "--json"], env=env,
                   capture_output=True, timeout=120, check=True)
    proc = subprocess.Popen([sys.executable, "-m", "evaljobs", "show", "latest"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the interpreter has even started: its first write meets no reader
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, stderr
    assert stderr == ""


def test_lists_written_out_for_start_up_time_match_their_sources():
    """The CLI writes a few choice lists out so `evaljobs --help` need not import the pipeline."""
    from evaljobs.catalog.importers import FORMATS as CATALOG_FORMATS
    from evaljobs.cli import run as run_module, reports as reports_module
    from evaljobs.pipeline.strategies import DEFAULT_STRATEGY, STRATEGIES
    from evaljobs.reports.render import FORMATS as REPORT_FORMATS

    assert run_module.STRATEGIES == STRATEGIES and run_module.DEFAULT_STRATEGY == DEFAULT_STRATEGY
    assert reports_module.FORMATS == REPORT_FORMATS
    (fmt,) = [p for p in main.commands["run"].params if p.name == "catalog_format"]
    assert tuple(fmt.type.choices) == tuple(sorted(CATALOG_FORMATS))


def test_help_does_not_import_the_pipeline():
    """`evaljobs --help` stays cheap: no store, pipeline, provider client or Redis client is loaded."""
    code = (
        "import sys, runpy; sys.argv = ['evaljobs', '--help']\n"
        "try:\n    runpy.run_module('evaljobs', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('evaljobs.store', 'evaljobs.api', 'evaljobs.pipeline.runtime', 'redis', "
        "'peewee', 'httpx', 'dramatiq') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in done.stderr, done.stderr
