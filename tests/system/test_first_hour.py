"""What a newcomer meets in the first hour: each paper cut of the first-hour review, fixed and held.

Usage errors of nested commands name the command that was typed; option combinations that would be
ignored are refused; the viewer does not create a database it was asked to read; the report and the
`runs` table read like prose; `status` says what it counts; the README shows the Python API (and its
snippet runs); the docs site has a getting-started page and a command reference without stray
backslashes.
"""
from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys

import pytest
from helpers import ROOT

from evaljobs.cli.runs import when
from evaljobs.starter import init_project
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report, render_markdown, render_table




@pytest.fixture
def cli(cli, tmp_path, sim, monkeypatch):
    """The shared ``cli`` (tests/conftest.py) with the module's simulated provider, on ``first.db``."""
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/first.db")
    return cli


@pytest.mark.parametrize(("args", "command"), [
    (["providers", "check", "--bogus"], "evaljobs providers check"),
    (["catalog", "check", "x.yaml", "--bogus"], "evaljobs catalog check"),
    (["db", "upgrade", "--bogus"], "evaljobs db upgrade"),
    (["cache", "clear", "--bogus"], "evaljobs cache clear"),
    (["run", "--bogus"], "evaljobs run"),
])
def test_a_usage_error_points_at_the_command_that_was_typed(cli, args, command):
    result = cli(*args)
    assert result.exit_code == 2
    assert result.output.strip().endswith(f"(see `{command} --help`)"), result.output


def test_worker_refuses_threads_or_processes_it_would_ignore(cli):
    for extra in (["--threads", "3"], ["--processes", "2"]):
        result = cli("worker", "--broker", "redis://127.0.0.1:1/0", "--min", "1", "--max", "2", *extra)
        assert result.exit_code == 2, result.output
        assert f"{extra[0]} does not apply to an elastic pool (--min/--max)" in result.output
        assert "cannot reach" not in result.output, "refused before anything is contacted"


def test_view_refuses_a_database_that_does_not_exist(cli, tmp_path):
    typo = tmp_path / "typo.db"
    result = cli("view", "--db", f"sqlite:///{typo}")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert f"no database at {typo}" in result.output and "Traceback" not in result.output
    assert not typo.exists(), "the viewer only reads: it never creates the database it was asked to show"


def test_runs_shows_times_a_person_reads(cli, tmp_path):
    init_project(tmp_path / "evals")
    assert cli("run", str(tmp_path / "evals" / "catalog.yaml"), "-m", "sim/smart").exit_code == 0
    listed = cli("runs").output
    assert re.search(r"starter\s+(just now|\d+ min ago)$", listed, re.MULTILINE), listed
    assert not re.search(r"\d:\d\d:\d\d\.\d+", listed), "no raw timestamps with microseconds"
    utc = datetime.timezone.utc
    now = datetime.datetime(2026, 3, 4, 12, 0, 0, tzinfo=utc)
    assert when(now - datetime.timedelta(seconds=20), now) == "just now"
    assert when(now - datetime.timedelta(minutes=12, seconds=5), now) == "12 min ago"
    assert when(now - datetime.timedelta(hours=5), now) == "5 h ago"
    assert when("2026-02-01 09:15:42.123456+00:00", now) == "2026-02-01 09:15 UTC"
    assert when(datetime.datetime(2026, 2, 1, 9, 15, 42, 5), now) == "2026-02-01 09:15 UTC"  # naive: UTC


def test_catalog_check_says_nothing_was_imported_on_a_native_catalog(cli, tmp_path):
    init_project(tmp_path / "evals")
    checked = cli("catalog", "check", str(tmp_path / "evals" / "catalog.yaml"))
    assert checked.exit_code == 0 and "native catalog 'starter', 3 scenarios" in checked.output
    assert "imported" not in checked.output and "mapped" not in checked.output, checked.output


def test_the_judge_section_shows_a_judgement_once_however_many_epochs_agree():
    run = {
        "id": "r_epochs",
        "catalog_name": "c",
        "digest": "0" * 64,
        "models": ["sim/a"],
        "strategy": "fanout",
        "created_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:01:00+00:00",
        "expected": 6,
    }
    same = {"model": "sim/judge", "score": 0.9, "reason": "covers the rubric", "raw": '{"score": 0.9}'}
    other = {**same, "score": 0.2, "reason": "misses the refund", "raw": '{"score": 0.2}'}
    results = [
        Result("kind", "sim/a", "passed", score=0.9, epoch=e, details={"judge": same}) for e in range(5)
    ]
    results.append(Result("kind", "sim/a", "failed", score=0.2, epoch=5, details={"judge": other}))
    report = build_report({**run, "epochs": 6}, results)
    table = render_table(report)
    assert table.count("covers the rubric") == 1 and "kind × sim/a × 5 epochs" in table, table
    assert "kind × sim/a #5" in table and "judge (6):" in table
    markdown = render_markdown(report)
    assert markdown.count("covers the rubric") == 1 and "`kind` × 5 epochs" in markdown
    assert markdown.count("misses the refund") == 1


def test_status_says_what_its_workers_are():
    from evaljobs.workers.status import Status, WorkerSeen, render

    text = render(
        Status(
            broker="redis://x",
            runs=[],
            workers=[WorkerSeen("a", 0.1, 0), WorkerSeen("b", 0.2, 0), WorkerSeen("c", 4.0, 0)],
            window=10,
        )
    )
    assert "workers seen in the last 10 s: 3" in text
    assert "a command that sent messages, e.g. evaljobs run" in text


def test_the_readme_shows_the_python_api_and_its_example_runs(tmp_path):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Python API\s*$(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert section, "the README has a '## Python API' section"
    code = re.search(r"^```python\n(.*?)^```", section.group(1), re.MULTILINE | re.DOTALL).group(1)
    init_project(tmp_path / "my-evals")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALJOBS_", "OPENAI_"))}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("0.666") and "### evaljobs · starter" in done.stdout, done.stdout[:500]


def test_the_docs_site_starts_with_getting_started_and_shows_commands_without_backslashes(tmp_path):
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^  - Getting started: getting-started\.md$", nav, re.MULTILINE)
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stdout + built.stderr
    started = (tmp_path / "site" / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert "Running a catalog" in started and "directives" in started
    for page in (tmp_path / "site").rglob("*.html"):
        codes = re.findall(r"<code>(.*?)</code>", page.read_text(encoding="utf-8"), re.DOTALL)
        assert not [c for c in codes if "\\|" in c], f"{page}: a code span shows a backslash before a pipe"
    assert "FORMAT: <code>json</code>" in (tmp_path / "site" / "cli" / "index.html").read_text(
        encoding="utf-8"
    )


# -- issue 40, item 17: tried as a new user -------------------------------------------------------


def test_an_unreachable_broker_leaves_no_pending_run(cli, tmp_path, monkeypatch):
    """README: a bad start never creates a run; a dead EVALJOBS_BROKER_URL left one `pending`."""
    from helpers import free_port  # a port nothing listens on

    from evaljobs import store

    catalog = tmp_path / "one.yaml"
    catalog.write_text("name: one\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {contains: [hi]}\n")
    monkeypatch.setenv("EVALJOBS_BROKER_URL", f"redis://127.0.0.1:{free_port()}/0")
    result = cli("run", str(catalog), "-m", "sim/smart")
    assert result.exit_code == 2, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output, result.output
    store.connect(f"sqlite:///{tmp_path}/first.db")
    assert store.list_runs() == []


def test_a_misspelt_simulated_judge_model_is_refused_in_one_line(cli, tmp_path):
    init_project(tmp_path / "evals")
    catalog = str(tmp_path / "evals" / "catalog.yaml")
    result = cli("run", catalog, "-m", "sim/smart", "--judge-model", "sim/jduge")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: --judge-model: unknown simulated judge model 'sim/jduge' (did you mean 'sim/judge'?): a "
        "simulated judge is one of sim/fast, sim/judge, sim/sim, sim/smart, sim/tool"]
    assert "no runs yet" in cli("runs").output  # no run was created


def test_an_empty_expect_is_refused_by_catalog_check_and_run(cli, tmp_path):
    """`expect: {}` passed with score 1.00 and `catalog check` said ok: it checks nothing."""
    catalog = tmp_path / "empty.yaml"
    catalog.write_text("name: e\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {}\n"
                       "  - key: smoke\n    prompt: hi\n")
    for args in (["catalog", "check", str(catalog)], ["run", str(catalog), "-m", "sim/smart"]):
        result = cli(*args)
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            f"error: {catalog}:5: scenario 'a': expect is empty, so any non-empty answer would pass; add a "
            "check (contains, regex, tools, judge, …), or remove the 'expect' key for a smoke scenario that "
            "only needs an answer"], result.output


@pytest.mark.parametrize("command", [["show", "latest"], ["runs"], ["report", "latest"],
                                     ["compare", "latest", "latest"], ["watch", "latest"]])
def test_read_commands_refuse_a_database_file_that_does_not_exist(cli, tmp_path, command):
    typo = tmp_path / "typo.db"
    result = cli(*command, "--db", f"sqlite:///{typo}")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: sqlite:///{typo}: no database at {typo} (a command that only reads creates none); check "
        "--db or EVALJOBS_DATABASE_URL, or run something first (evaljobs demo, evaljobs run …)"]
    assert not typo.exists()
