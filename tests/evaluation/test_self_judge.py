"""No self-judging: a judge model that is also a model under test is refused before the run, in one line;
``--allow-self-judge`` insists, and every report records it.

Before: ``--judge-model sim/fast -m sim/fast`` judged sim/fast's answers with sim/fast, silently, while the
docs said a model never judges itself; the README's own CI example did it.
"""
from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import httpx
import pytest
from helpers import Viewer

from evaljobs import store
from evaljobs.starter import next_commands

ROOT = Path(__file__).resolve().parents[2]
CATALOG = """
name: selfjudge-TAG
defaults: {judge_model: sim/judge}
scenarios:
  - key: a
    prompt: "Say sorry. [sim: say I'm sorry. TAG]"
    expect: {judge: "The answer says sorry."}
"""


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.001)


@pytest.fixture
def env(cli, tmp_path, sim, monkeypatch):
    """The catalog, on the shared ``cli``'s clean environment with the module's provider, in ``self.db``."""
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/self.db")
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG.replace("TAG", uuid.uuid4().hex[:6]))
    return path




def test_a_model_judging_its_own_answers_is_refused_before_the_run(cli, env):
    for extra in (["-m", "sim/fast", "--judge-model", "sim/fast"], ["-m", "sim/judge"]):
        done = cli("run", str(env), "--strategy", "sequential", *extra)
        assert done.exit_code == 2, done.output
        errors = [line for line in done.output.splitlines() if line.startswith("error")]
        model = extra[1]
        expected = (
            f"error: {model} would judge its own answers (it is both a model under test and the "
            f"judge model); name another judge with --judge-model, or pass --allow-self-judge to insist"
        )
        assert errors == [expected], done.output
    store.connect(f"sqlite:///{env.parent}/self.db")
    assert store.list_runs() == []  # nothing was created


def test_allow_self_judge_runs_and_every_report_says_so(cli, env):
    done = cli("run", str(env), "--strategy", "sequential", "-m", "sim/fast", "--judge-model", "sim/fast",
               "--allow-self-judge")
    assert done.exit_code == 0, done.output
    run_id = store.list_runs()[0].id
    row = store.list_results(run_id)[0]
    assert row.details["judge"]["model"] == "sim/fast" and row.details["judge"]["score"] is not None
    report = {
        fmt: cli("report", run_id, "--format", fmt).output for fmt in ("json", "md", "table", "html", "junit")
    }
    assert json.loads(report["json"])["run"]["self_judge"] == ["sim/fast"]
    assert "self-judged: sim/fast (--allow-self-judge)" in report["md"]
    assert "self-judged: sim/fast (--allow-self-judge)" in report["table"]
    assert "sim/fast judged its own answers (--allow-self-judge)" in report["html"]
    assert '<property name="self_judge" value="sim/fast" />' in report["junit"]
    # The viewer's run page (and the bundle `view --export` writes from it) says so too.
    viewer = Viewer(f"sqlite:///{env.parent}/self.db", "memory", env.parent / "view.log")
    try:
        page = httpx.get(f"{viewer.url}/runs/{run_id}", timeout=30)
        assert page.status_code == 200 and "sim/fast judged its own answers (--allow-self-judge)" in page.text
    finally:
        viewer.close()


def test_the_readme_the_starter_and_its_workflow_never_self_judge():
    texts = [(ROOT / "README.md").read_text(), (ROOT / "evaljobs/data/init/github-workflow.yml").read_text(),
             "\n".join(next_commands("my-evals"))]
    lines = [line for text in texts for line in re.sub(r"\\\n\s*", " ", text).splitlines()]
    commands = [line for line in lines if re.search(r"-m \S+.*--judge-model \S+", line)]
    assert commands
    for line in commands:
        judge = re.search(r"--judge-model (\S+)", line).group(1)
        assert judge not in re.findall(r"-m (\S+)", line), line
