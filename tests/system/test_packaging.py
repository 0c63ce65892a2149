"""A wheel that works: built once, installed in a fresh virtualenv with no source tree around.

The wheel is built from a copy of the repository's files (so the checkout gets no
``build/``), installed into a new virtualenv (dependencies come from pip's cache and
the package index pip is configured with), and run from an empty folder, so nothing
can be imported from the checkout by accident.
"""
from __future__ import annotations

import configparser
import email
import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import evaljobs

ROOT = Path(__file__).resolve().parents[2]


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    return cfg


def _tracked_copy(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if not src.exists():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    _tracked_copy(src)
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (found,) = out.glob("evaljobs-*.whl")
    return found


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtualenv with just the wheel (and its dependencies) installed; returns its bin/."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, symlinks=True).create(env_dir)
    pip = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    return env_dir / "bin"


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EVALJOBS_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["HOME"] = str(tmp)
    return env


def test_metadata_in_one_place() -> None:
    """One version (evaljobs.__version__), a LICENSE for the declared licence, classifiers per version."""
    cfg = _setup_cfg()
    meta = cfg["metadata"]
    assert meta["version"].strip() == "attr: evaljobs.__version__"
    assert re.fullmatch(r"\d+\.\d+\.\d+(\w+\d*)?", evaljobs.__version__)
    assert meta["license"].strip() == "MIT"
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8").splitlines()[0]
    assert (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").startswith("# Changelog")
    assert (ROOT / "evaljobs" / "py.typed").exists()
    oldest = re.fullmatch(r">=\s*3\.(\d+)", cfg["options"]["python_requires"].strip())
    assert oldest, "python_requires should be '>=3.N'"
    versions = sorted(
        int(m) for m in re.findall(r"Programming Language :: Python :: 3\.(\d+)", meta["classifiers"])
    )
    assert versions and versions[0] == int(oldest.group(1)), (versions, oldest.group(0))
    assert versions == list(range(versions[0], versions[-1] + 1)), f"a gap in the classifiers: {versions}"
    assert f"Python :: 3.{sys.version_info.minor}" in meta["classifiers"], "this interpreter is not declared"


def test_wheel_contents(wheel) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "evaljobs/py.typed" in names
    assert "evaljobs/data/support.yaml" in names
    assert any(n.startswith("evaljobs_middleware/") for n in names)
    tops = {n.split("/")[0] for n in names}
    assert "middleware" not in tops, "a generic top-level 'middleware' package would shadow others"
    assert not any(t in tops for t in ("tests", "examples", "scripts", "docs"))
    (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    meta = email.message_from_bytes(zipfile.ZipFile(wheel).read(metadata_name))
    assert meta["Version"] == evaljobs.__version__
    assert meta["License"] == "MIT"
    assert "Typing :: Typed" in meta.get_all("Classifier")
    # No made-up addresses: the project has no public home yet (setup.cfg says why); the docs ship with the
    # source and the README, the long description, links them.
    assert meta.get_all("Project-URL") is None and meta["Home-page"] is None, meta.get_all("Project-URL")
    assert "docs/index.md" in meta.get_payload()
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)


def test_installed_wheel_runs_the_demo(installed, tmp_path) -> None:
    """`evaljobs demo` from the wheel alone: its catalog is package data; then `runs` finds the run."""
    work = tmp_path / "empty"
    work.mkdir()
    env = _clean_env(tmp_path)
    site = subprocess.run([str(installed / "python"), "-c",
                           "import evaljobs, evaljobs_middleware, sysconfig;"
                           "print(evaljobs.__file__); print(sysconfig.get_paths()['purelib'])"],
                          cwd=work, env=env, capture_output=True, text=True, check=True).stdout.split("\n")
    assert site[0].startswith(site[1]), f"evaljobs imported from outside the virtualenv: {site[0]}"
    assert not (Path(site[1]) / "middleware").exists()
    demo = subprocess.run([str(installed / "evaljobs"), "demo"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "pass rate" in demo.stdout.lower() or "PASS" in demo.stdout, demo.stdout
    run_id = re.search(r"^run (r_\w+):", demo.stderr, re.M).group(1)
    listed = subprocess.run([str(installed / "evaljobs"), "runs"], cwd=work, env=env, capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0 and run_id in listed.stdout, listed.stdout + listed.stderr
    version = subprocess.run(
        [str(installed / "evaljobs"), "--version"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert evaljobs.__version__ in version.stdout


def test_mcp_catalog_without_the_extra_says_which_extra(installed, tmp_path) -> None:
    """The wheel venv has no `mcp`: a catalog with MCP tools fails at once naming the extra, creating no
    run."""
    work = tmp_path / "mcp"
    work.mkdir()
    shutil.copy(ROOT / "examples" / "catalogs" / "tools_mcp.yaml", work / "tools_mcp.yaml")
    env = {**_clean_env(tmp_path), "EVALJOBS_ALLOW_CODE": "1"}  # its servers are programs: opted in
    assert (
        subprocess.run(
            [str(installed / "python"), "-c", "import mcp"], cwd=work, env=env, capture_output=True
        ).returncode
        != 0
    ), "this virtualenv should not have the mcp extra"
    for args in (["run", "tools_mcp.yaml", "-m", "sim/a"], ["catalog", "check", "tools_mcp.yaml"]):
        done = subprocess.run([str(installed / "evaljobs"), *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "install evaljobs[mcp]" in lines[0], done.stderr
        assert "could not connect" not in done.stderr
    listed = subprocess.run(
        [str(installed / "evaljobs"), "runs", "--json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stdout + listed.stderr
    # A worker without the extra (the submitter had it): the tool call fails at once with the same hint.
    call = ("from evaljobs.catalog import Tool; from evaljobs.tools import LiveTools; "
            "tool = Tool(name='look', mcp={'command': ['python', 'server.py', '--stdio'], 'tool': 'look'}); "
            "print(LiveTools().call(tool, {'id': '1'}).error)")
    worker = subprocess.run([str(installed / "python"), "-c", call], cwd=work, env=env, capture_output=True,
                            text=True, timeout=120)
    assert worker.returncode == 0 and "install evaljobs[mcp]" in worker.stdout, worker.stdout + worker.stderr
