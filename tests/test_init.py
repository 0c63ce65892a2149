"""`evaljobs init`: a starter project that loads, validates against its schema, and is never clobbered."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
import jsonschema
import pytest
import yaml

from evaljobs.catalog import load_catalog
from evaljobs.catalog.modelspec import load_providers
from evaljobs.catalog.schema import catalog_schema
from evaljobs.errors import UsageError
from evaljobs.cli.starter import CATALOG, PROVIDERS, SCHEMA, WORKFLOW, init_project, next_commands


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
    uncommented = yaml.safe_load(re.sub(r"^  # ?(?=\s*[\w-]+:)", "  ", providers_text, flags=re.M))
    assert set(uncommented["providers"]) >= {"openai", "anthropic", "ollama", "vllm", "gateway"}
    load_providers_text = root / "uncommented.yaml"
    load_providers_text.write_text(yaml.safe_dump(uncommented))
    assert load_providers(load_providers_text).get("gateway").governor["ceiling"] == 64


def test_workflow_runs_the_gate_and_uploads_the_reports(tmp_path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    init_project(repo / "evals")
    workflow = yaml.safe_load((repo / "evals" / WORKFLOW).read_text())
    job = workflow["jobs"]["evals"]
    assert job["defaults"]["run"]["working-directory"] == "evals"
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    assert "--fail-under" in runs
    assert "--format junit -o reports/junit.xml" in runs and "--format html -o reports/report.html" in runs
    upload = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert upload and upload[0]["if"] == "always()" and upload[0]["with"]["path"] == "evals/reports/"
    assert "${{ secrets.OPENAI_API_KEY }}" in (repo / "evals" / WORKFLOW).read_text()


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
    done = subprocess.run([str(exe), "init", "my-evals"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "my-evals" / CATALOG).exists()
    commands = [line.strip() for line in done.stdout.split("next:")[1].strip().splitlines()]
    assert commands == next_commands("my-evals")
    for command in commands[:2]:  # the third needs an OpenAI key (the README test runs it against the simulator)
        ran = subprocess.run(shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
        assert ran.returncode == 0, f"{command}: {ran.stderr[-2000:]}"
    again = subprocess.run([str(exe), "init", "my-evals"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and [line.split()[0] for line in again.stdout.splitlines()[:4]] == ["kept"] * 4


def test_catalog_schema_command_prints_the_schema(tmp_path) -> None:
    exe = Path(sys.executable).with_name("evaljobs")
    done = subprocess.run([str(exe), "catalog", "schema"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == catalog_schema()
