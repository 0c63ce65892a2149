"""scripts/bench_guard's arguments and its smallest run (the benchmark itself gates nothing: issue 42)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GUARD = Path(__file__).resolve().parent.parent / "scripts" / "bench_guard"


def run(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GUARD), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_an_unknown_base_is_one_line_naming_it(tmp_path):
    done = run("--base", "no-such-rev", "--cache", str(tmp_path), cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"bench_guard: --base 'no-such-rev' is not a commit of {GUARD.parent.parent}; "
        "name a tag, branch or hash"]


def test_one_round_of_the_catalog_workload_against_head_prints_a_ratio(tmp_path):
    out = tmp_path / "samples.json"
    done = run("--base", "HEAD", "--rounds", "1", "--workloads", "catalog", "--scenarios", "3",
               "--shared-venv", "--cache", str(tmp_path / "cache"), "--json", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| catalog |" in done.stdout and "load average" in done.stdout
    samples = json.loads(out.read_text())["samples"]["catalog"]
    assert len(samples["base"]) == len(samples["this"]) == 1
    assert (tmp_path / "cache").is_dir()
