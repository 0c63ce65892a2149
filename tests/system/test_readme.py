"""The README stays executable: its quick start, tutorial, CI and viewing blocks run verbatim.

A fresh copy of the repository (the tracked and new files, no `.evaljobs/`, no
database) gets the README's shell blocks run line by line in one bash session, the
way a new user pastes them. Real models named there (openai/…, anthropic/…) are
pointed at the simulated provider through a providers file (``EVALJOBS_PROVIDERS``)
and dummy keys, so nothing leaves the machine; everything else runs as written.

The only line not run is ``scripts/test`` (this test is part of it). A line that
exits non-zero fails the test with its output — except a ``--fail-under`` gate that
says "FAIL: pass rate …" against the simulated provider (the gate working).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evaljobs.simulated import SimulatedProvider

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("Quick start", "Running a catalog", "CI", "Viewing runs")
NOT_RUN = {"scripts/test": "the test suite itself (this test is part of it)",
           "pip install 'evaljobs[view]'": "an install (the test environment has the extra already)",
           "evaljobs view": "a server that runs until stopped (tests/view/test_view*.py drive it in a "
                            "browser)"}


def readme_blocks(text: str, sections: tuple[str, ...] = SECTIONS) -> list[tuple[str, list[str]]]:
    """(section, lines) for every ```bash block under the ``## `` headings named in ``sections``."""
    out: list[tuple[str, list[str]]] = []
    for section in sections:
        match = re.search(rf"^## {re.escape(section)}\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
        assert match, f"README has no '## {section}' section"
        for block in re.findall(
            r"^```(?:bash|sh|shell)\n(.*?)^```", match.group(1), re.MULTILINE | re.DOTALL
        ):
            block = re.sub(r"\\\n\s*", "", block)  # a command continued with a backslash is one command
            lines = [
                line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")
            ]
            out.append((section, lines))
    return out


def test_blocks_are_found() -> None:
    """The extraction itself: the quick start is exactly scripts/demo then scripts/test."""
    blocks = readme_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    first = [line.split("#")[0].strip() for line in blocks[0][1]]
    assert first == ["scripts/demo", "scripts/test"], first
    assert sum(len(lines) for _, lines in blocks) > 5


def _fresh_copy(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if not src.exists() and not src.is_symlink():  # deleted in the work tree, not yet committed
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, target)  # keeps mtimes: scripts/_setup.sh sees the installed .venv as current
    # The project's virtualenv (created by scripts/test, which runs this test): reused, not rebuilt.
    (dest / ".venv").symlink_to(Path(sys.prefix))


@pytest.fixture
def sim_providers(tmp_path):
    provider = SimulatedProvider(latency=0.0)
    provider.start()
    config = tmp_path / "providers-sim.yaml"
    config.write_text("providers:\n"
                      f"  openai: {{base_url: '{provider.url}'}}\n"
                      f"  anthropic: {{base_url: '{provider.url}'}}\n", encoding="utf-8")
    yield config
    provider.stop()


def _venv_is_current() -> bool:
    """What scripts/_setup.sh checks: an install stamp in this virtualenv newer than the metadata."""
    metadata = [(ROOT / name).stat().st_mtime for name in ("setup.cfg", "pyproject.toml")]
    return any(
        stamp.stat().st_mtime > max(metadata) for stamp in Path(sys.prefix).glob(".evaljobs-installed*")
    )


def test_readme_commands_run_verbatim(tmp_path, sim_providers) -> None:
    # The copy shares this virtualenv (a symlink): with a stale install its scripts/_setup.sh would
    # reinstall the project from the temporary copy into it, and every later test would import a
    # folder that is gone. Refuse before anything runs.
    if not _venv_is_current():
        pytest.fail(
            f"{sys.prefix} is older than setup.cfg/pyproject.toml: run scripts/test, which reinstalls "
            "the project, not pytest directly"
        )
    repo = tmp_path / "repo"
    _fresh_copy(repo)
    assert not (repo / ".evaljobs").exists()
    blocks = readme_blocks((repo / "README.md").read_text(encoding="utf-8"))
    script = ["set -o pipefail"]
    commands: list[str] = []
    for _section, lines in blocks:
        for line in lines:
            if any(line.split("#")[0].strip().startswith(skipped) for skipped in NOT_RUN):
                continue
            index = len(commands)
            commands.append(line)
            script += [f"echo '::begin {index}'", line, f"echo \"::end {index} $?\""]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    env.update(EVALJOBS_PROVIDERS=str(sim_providers), OPENAI_API_KEY="sk-readme-test",
               ANTHROPIC_API_KEY="sk-ant-readme-test", HOME=str(tmp_path / "home"), NO_COLOR="1")
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=repo, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
    err = done.stdout
    assert "setup: installing" not in err, (
        "scripts/_setup.sh reinstalled into the shared .venv:\n" + err[-3000:]
    )
    ends = {int(i): int(rc) for i, rc in re.findall(r"^::end (\d+) (\d+)$", err, re.MULTILINE)}
    for index, command in enumerate(commands):
        assert index in ends, f"README command never finished: {command}\n{err[-3000:]}"
        output = err[err.find(f"::begin {index}\n"):err.find(f"::end {index} ")]
        # A gate may fail against the simulator (its answers are not a real model's): that is the gate
        # working. Anything else non-zero (a usage error, every pair errored) fails the test.
        gated = "--fail-under" in command and ends[index] == 1 and "FAIL: pass rate" in output
        if ends[index] != 0 and not gated:
            pytest.fail(f"README command exited {ends[index]}: {command}\n{output[-2000:]}", pytrace=False)


def test_the_catalog_snippet_runs_without_keys(tmp_path) -> None:
    """The README's catalog example (## Catalogs) runs as printed on the simulated provider and passes:
    its directives script the answer, sim/judge grades the rubric; no OpenAI key anywhere."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Catalogs\s*$(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL).group(1)
    snippet = re.search(r"^```yaml\n(.*?)^```", section, re.MULTILINE | re.DOTALL).group(1)
    (tmp_path / "support.yaml").write_text(snippet, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALJOBS_", "OPENAI_", "ANTHROPIC_"))}
    env.update(HOME=str(tmp_path / "home"), NO_COLOR="1")
    exe = Path(sys.executable).with_name("evaljobs")
    done = subprocess.run(
        [str(exe), "run", "support.yaml", "-m", "sim/smart", "--fail-under", "100%"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1/1 pairs  100.0% passed" in done.stdout
