"""`evaljobs init`: a starter project that loads, validates against its schema, and is never clobbered."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from evaljobs.catalog import load_catalog
from evaljobs.catalog.modelspec import load_providers
from evaljobs.catalog.schema import catalog_schema
from evaljobs.starter import (
    CATALOG,
    PROVIDERS,
    SCHEMA,
    WORKFLOW,
    init_project,
    install_requirement,
    next_commands,
    notes,
)
from evaljobs.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def test_starter_files_load_and_check(tmp_path) -> None:
    written = init_project(tmp_path / "evals")
    assert {w.action for w in written} == {"wrote"}
    root = tmp_path / "evals"
    assert {p.relative_to(root).as_posix() for p in (w.path for w in written)} == {CATALOG, SCHEMA, PROVIDERS,
                                                                                  WORKFLOW}
    catalog = load_catalog(root / CATALOG)
    assert [s.key for s in catalog.scenarios] == ["greeting", "order-status", "refund-policy"]
    plain, tool, judged = catalog.scenarios
    assert not plain.tools and plain.expect.contains
    assert tool.tools[0].name == "lookup_order" and tool.expect.tools
    assert judged.expect.judge
    # The schema the catalog points editors at is there, and the catalog passes it.
    text = (root / CATALOG).read_text()
    assert text.splitlines()[0] == f"# yaml-language-server: $schema=./{SCHEMA}"
    schema = json.loads((root / SCHEMA).read_text())
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(text))
    assert "#" in text and text.count("\n#") + text.count("  #") > 10, "the starter catalog explains itself"
    # providers.yaml loads as it is (presets commented) and documents the governor's settings.
    providers_text = (root / PROVIDERS).read_text()
    assert set(load_providers(root / PROVIDERS).names) >= {"openai", "anthropic", "ollama", "vllm", "sim"}
    for setting in ("initial:", "ceiling:", "bulk_reserve:", "rpm:", "--lane"):
        assert setting in providers_text
    uncommented = yaml.safe_load(re.sub(r"^  # ?(?=\s*[\w-]+:)", "  ", providers_text, flags=re.MULTILINE))
    assert set(uncommented["providers"]) >= {"openai", "anthropic", "ollama", "vllm", "gateway"}
    load_providers_text = root / "uncommented.yaml"
    load_providers_text.write_text(yaml.safe_dump(uncommented))
    assert load_providers(load_providers_text).get("gateway").governor["ceiling"] == 64


def test_workflow_goes_to_the_repository_root_and_runs_the_gate(tmp_path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    written = init_project(repo / "evals")
    assert repo / WORKFLOW in {w.path for w in written}, (
        "GitHub reads workflows only at the repository's root"
    )
    assert not (repo / "evals" / ".github").exists()
    workflow = yaml.safe_load((repo / WORKFLOW).read_text())
    job = workflow["jobs"]["evals"]
    assert job["defaults"]["run"]["working-directory"] == "evals"
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    assert "--fail-under" in runs
    assert "--format junit -o reports/junit.xml" in runs and "--format html -o reports/report.html" in runs
    upload = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert upload and upload[0]["if"] == "always()" and upload[0]["with"]["path"] == "evals/reports/"
    assert "${{ secrets.OPENAI_API_KEY }}" in (repo / WORKFLOW).read_text()
    assert "pip install evaljobs" not in runs, (
        "evaljobs is not on a public index: install it the way it is here"
    )
    # No repository: the folder is taken as the root, and init says so; --repo-root names another one.
    assert notes(tmp_path / "alone")[0].startswith("no git repository holds")
    init_project(repo / "evals" / "more", repo_root=repo / "evals")
    assert yaml.safe_load((repo / "evals" / WORKFLOW).read_text())["jobs"]["evals"]["defaults"]["run"][
        "working-directory"] == "more"
    with pytest.raises(UsageError, match=r"--repo-root .*is not inside it"):
        init_project(tmp_path / "elsewhere", repo_root=repo)


class _Installed:
    """What importlib.metadata tells of an installed evaljobs: its version and PEP 610 direct_url.json."""

    def __init__(self, direct_url: dict | None) -> None:
        self.version, self._text = "9.8.7", None if direct_url is None else json.dumps(direct_url)

    def read_text(self, name: str) -> str | None:
        return self._text if name == "direct_url.json" else None


@pytest.mark.parametrize(("direct_url", "line"), [
    (None, "evaljobs==9.8.7"),
    ({"url": "https://example.org/evaljobs.git", "vcs_info": {"vcs": "git", "commit_id": "abc123"}},
     "evaljobs @ git+https://example.org/evaljobs.git@abc123"),
    ({"url": "https://example.org/evaljobs-9.8.7-py3-none-any.whl", "archive_info": {}},
     "evaljobs @ https://example.org/evaljobs-9.8.7-py3-none-any.whl"),
    ({"url": "file://ROOT", "dir_info": {"editable": True}}, "./"),
    ({"url": "file://ROOT/vendor/evaljobs", "dir_info": {}}, "./vendor/evaljobs"),
])
def test_ci_installs_evaljobs_the_way_it_is_installed_here(tmp_path, monkeypatch, direct_url, line) -> None:
    from evaljobs import starter

    if direct_url and direct_url["url"].startswith("file://"):
        direct_url = {**direct_url, "url": direct_url["url"].replace("ROOT", str(tmp_path))}
    monkeypatch.setattr(starter, "distribution", lambda name: _Installed(direct_url))
    requirement = install_requirement(tmp_path)
    assert requirement.line == line and not requirement.warning
    # A folder outside the repository cannot be reached from CI: the version, and a warning saying so.
    monkeypatch.setattr(starter, "distribution",
                        lambda name: _Installed({"url": "file:///nowhere/evaljobs", "dir_info": {}}))
    outside = install_requirement(tmp_path)
    assert (
        outside.line == "evaljobs==9.8.7"
        and "outside the repository, which CI cannot reach" in outside.warning
    )


def _copy_of_the_source(dest: Path) -> None:
    """The evaljobs source as a user's clone has it (tracked and new files), a git repository of its own."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    subprocess.run(["git", "init", "-q", str(dest)], check=True)


def _expand(text: str, workspace: Path) -> str:
    """GitHub's ``${{ … }}`` expressions of the workflow: the workspace, and secrets (none here)."""
    return re.sub(r"\$\{\{\s*([^}]*?)\s*\}\}",
                  lambda m: str(workspace) if m.group(1) == "github.workspace" else "", text)


def test_the_workflow_steps_pass_in_a_fresh_virtualenv(tmp_path) -> None:
    """The user's way: clone evaljobs, install it, `evaljobs init my-evals`; then the workflow's `run:` steps,
    in order, in a fresh virtualenv (the CI runner), each in its working-directory with its env."""
    repo = tmp_path / "repo"
    _copy_of_the_source(repo)
    user = tmp_path / "user-venv"
    subprocess.run([sys.executable, "-m", "venv", str(user)], check=True, timeout=300)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("EVALJOBS_", "VIRTUAL_ENV", "PYTHON"))}
    installed = subprocess.run([str(user / "bin" / "pip"), "install", "-q", "./"], cwd=repo, env=base,
                               capture_output=True, text=True, timeout=900, check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    init = subprocess.run([str(user / "bin" / "evaljobs"), "init", "my-evals"], cwd=repo, env=base,
                          capture_output=True, text=True, timeout=300, check=False)
    assert init.returncode == 0 and "note:" not in init.stdout, init.stdout + init.stderr
    workflow_text = (repo / WORKFLOW).read_text()
    assert 'pip install "./"' in workflow_text and "from its source in this repository" in workflow_text
    job = yaml.safe_load(workflow_text)["jobs"]["evals"]
    runner = tmp_path / "ci-venv"  # fresh: nothing installed but what the workflow's steps install
    subprocess.run([sys.executable, "-m", "venv", str(runner)], check=True, timeout=300)
    summary = tmp_path / "summary.md"
    env = {
        **base,
        "PATH": f"{runner / 'bin'}{os.pathsep}{base.get('PATH', '')}",
        "HOME": str(tmp_path / "home"),
        "GITHUB_WORKSPACE": str(repo),
        "GITHUB_STEP_SUMMARY": str(summary),
        "CI": "true",
    }
    env.update({k: _expand(str(v), repo) for k, v in (job.get("env") or {}).items()})
    ran = 0
    for step in job["steps"]:
        if "run" not in step:
            continue
        workdir = repo / step.get("working-directory", job["defaults"]["run"]["working-directory"])
        step_env = {**env, **{k: _expand(str(v), repo) for k, v in (step.get("env") or {}).items()}}
        done = subprocess.run(["bash", "-e", "-c", _expand(step["run"], repo)], cwd=workdir, env=step_env,
                              capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, (
            f"step {step.get('name', step['run'])!r}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
        ran += 1
    assert ran == 3
    upload = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    reports = repo / upload["with"]["path"]
    assert (reports / "junit.xml").read_text().startswith("<?xml") and "<testsuite" in (
        reports / "junit.xml"
    ).read_text()
    assert "<html" in (reports / "report.html").read_text().lower()
    assert "starter" in summary.read_text()


def test_never_overwrites_unless_forced(tmp_path) -> None:
    init_project(tmp_path)
    mine = tmp_path / CATALOG
    mine.write_text("name: mine\nscenarios: [{key: a, prompt: hi}]\n")
    again = init_project(tmp_path)
    assert {w.action for w in again} == {"kept"}
    assert mine.read_text().startswith("name: mine")
    forced = init_project(tmp_path, force=True)
    assert {w.action for w in forced} == {"overwrote"}
    assert "name: starter" in mine.read_text()


def test_a_file_in_the_way_is_one_line(tmp_path) -> None:
    blocker = tmp_path / "evals"
    blocker.write_text("")
    with pytest.raises(UsageError, match=r"exists and is not a folder"):
        init_project(blocker)


def test_next_commands_name_the_folder() -> None:
    assert next_commands(".")[0] == "evaljobs catalog check catalog.yaml"
    commands = next_commands("my-evals")
    assert len(commands) == 3 and all("my-evals/catalog.yaml" in c for c in commands)
    assert "--fail-under" in commands[2] and "--providers my-evals/providers.yaml" in commands[2]


def test_init_command_prints_the_next_three_commands_and_they_work(tmp_path) -> None:
    """`evaljobs init DIR` from the console script; then its first two next commands run as printed."""
    exe = Path(sys.executable).with_name("evaljobs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    env["PATH"] = f"{exe.parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        [str(exe), "init", "my-evals"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "my-evals" / CATALOG).exists()
    commands = [line.strip() for line in done.stdout.split("next:")[1].strip().splitlines()]
    assert commands == next_commands("my-evals")
    # the third needs an OpenAI key (the README test runs it against the simulator)
    for command in commands[:2]:
        ran = subprocess.run(shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300, check=False)
        assert ran.returncode == 0, f"{command}: {ran.stderr[-2000:]}"
    # The split the README and the starter's comments promise: sim/smart passes all three scenarios,
    # sim/fast passes the greeting only (no tool call; the judge scores its refund answer low).
    shown = subprocess.run(
        [str(exe), "show", "latest"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    verdicts = {
        pair: status
        for status, pair in re.findall(
            r"^\s+(passed|failed|errored)\s+\S+\s+(\S+ × \S+)", shown.stdout, re.MULTILINE
        )
    }
    assert verdicts == {
        "greeting × sim/fast": "passed",
        "greeting × sim/smart": "passed",
        "order-status × sim/fast": "failed",
        "order-status × sim/smart": "passed",
        "refund-policy × sim/fast": "failed",
        "refund-policy × sim/smart": "passed",
    }, shown.stdout
    # A misspelt simulated model would miss its [sim@fast: …] directives: refused, with the names that work.
    typo = subprocess.run([str(exe), "run", "my-evals/catalog.yaml", "-m", "sim/fsat"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert typo.returncode == 2 and "Traceback" not in typo.stderr, typo.stderr
    assert "unknown simulated model 'sim/fsat' (did you mean 'sim/fast'?)" in typo.stderr
    assert "known: sim/fast, sim/judge, sim/sim, sim/smart, sim/tool" in typo.stderr
    again = subprocess.run(
        [str(exe), "init", "my-evals"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (
        again.returncode == 0 and [line.split()[0] for line in again.stdout.splitlines()[:4]] == ["kept"] * 4
    )


def test_catalog_schema_command_prints_the_schema(tmp_path) -> None:
    exe = Path(sys.executable).with_name("evaljobs")
    done = subprocess.run(
        [str(exe), "catalog", "schema"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == catalog_schema()
