"""scripts/_setup.sh's install step (scripts/test and scripts/demo): uv, and pip when uv cannot do it.

Each test runs the real script on a one-module project of its own (no dependencies: what is checked
is the installer, not the catalogue of packages), with the machine's Python, into a new virtualenv.
uv is fetched by pip from the package index, as on a fresh CI machine; the project's build backend
(setuptools) comes from the index too.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _project(root: Path) -> Path:
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "_setup.sh", root / "scripts" / "_setup.sh")
    (root / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=64"]\n'
                                         'build-backend = "setuptools.build_meta"\n', encoding="utf-8")
    (root / "setup.cfg").write_text("[metadata]\nname = setupprobe\nversion = 0.1\n\n"
                                    "[options]\npy_modules = setupprobe\n", encoding="utf-8")
    (root / "setupprobe.py").write_text("VALUE = 'installed'\n", encoding="utf-8")
    return root


def _set_up(project: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EVALJOBS_", "PYTHONPYCACHEPREFIX")) and k not in ("VIRTUAL_ENV", "PYTHON")}
    env.update(EVALJOBS_PIP_NO_COMPILE="1", **extra)
    return subprocess.run(["bash", "-c", "source scripts/_setup.sh"], cwd=project, env=env, text=True,
                          capture_output=True, timeout=600, check=False)


def _installed_by(project: Path) -> tuple[str, str, list[str]]:
    """(the probe's value, the INSTALLER its distribution records, the virtualenv's distributions)."""
    probe = subprocess.run(
        [str(project / ".venv" / "bin" / "python"), "-c",
         "import importlib.metadata as m, setupprobe; "
         "print(setupprobe.VALUE); print(m.distribution('setupprobe').read_text('INSTALLER').strip()); "
         "print(' '.join(sorted(d.metadata['Name'].lower() for d in m.distributions())))"],
        cwd=project.parent, text=True, capture_output=True, check=True)
    value, installer, names = probe.stdout.splitlines()
    return value, installer, names.split()


def _pip_major(project: Path) -> int:
    shown = subprocess.run([str(project / ".venv" / "bin" / "python"), "-m", "pip", "--version"],
                           text=True, capture_output=True, check=True).stdout
    match = re.match(r"pip (\d+)\.", shown)
    assert match, shown
    return int(match.group(1))


def test_uv_installs_the_project_and_a_pip_and_stays_out_of_the_virtualenv(tmp_path) -> None:
    project = _project(tmp_path / "project")
    done = _set_up(project)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "installing with pip" not in done.stderr, done.stderr[-3000:]
    value, installer, names = _installed_by(project)
    assert (value, installer) == ("installed", "uv")
    # The virtualenv holds the project and a pip of its own (new enough for a later reinstall by pip);
    # uv itself lives beside the packages, not among them.
    assert "uv" not in names and "pip" in names, names
    assert _pip_major(project) >= 24
    assert list(project.glob(".venv/uv-*/bin/uv"))
    # A second call finds the install stamp and installs nothing.
    again = _set_up(project)
    assert again.returncode == 0 and "setup: installing" not in again.stderr, again.stderr[-3000:]


def test_when_uv_cannot_install_pip_does_and_the_virtualenv_gets_a_pip_first(tmp_path) -> None:
    project = _project(tmp_path / "project")
    # uv offline with an empty cache cannot get the build backend; pip (which reads neither) can.
    done = _set_up(project, UV_OFFLINE="1", UV_CACHE_DIR=str(tmp_path / "empty-uv-cache"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "did not install" in done.stderr and "installing with pip" in done.stderr, done.stderr[-3000:]
    value, installer, names = _installed_by(project)
    assert (value, installer) == ("installed", "pip")
    assert "uv" not in names, names
    assert _pip_major(project) >= 24
