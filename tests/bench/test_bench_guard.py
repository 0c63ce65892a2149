"""scripts/bench_guard's arguments and its smallest run (the benchmark itself gates nothing: issue 42)."""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

GUARD = Path(__file__).resolve().parents[2] / "scripts" / "bench_guard"


def run(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GUARD), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One cache of base trees for the module: HEAD's tree is exported and compiled once (the second run
    finds it there, as a user's second run does), not once per test."""
    return tmp_path_factory.mktemp("bench-guard-cache")


def test_an_unknown_base_is_one_line_naming_it(tmp_path):
    done = run("--base", "no-such-rev", "--cache", str(tmp_path), cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"bench_guard: --base 'no-such-rev' is not a commit of {GUARD.parent.parent}; "
        "name a tag, branch or hash"]


def test_one_round_of_the_catalog_workload_against_head_prints_a_ratio(tmp_path, cache):
    out = tmp_path / "samples.json"
    done = run("--base", "HEAD", "--rounds", "1", "--workloads", "catalog", "--scenarios", "3",
               "--shared-venv", "--cache", str(cache), "--json", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| catalog |" in done.stdout and "load average" in done.stdout
    samples = json.loads(out.read_text())["samples"]["catalog"]
    assert len(samples["base"]) == len(samples["this"]) == 1
    assert any(cache.iterdir())


def test_one_round_of_the_pairs_workload_on_its_own_redis_prints_pairs_per_second(tmp_path, cache):
    """The pairs workload starts its own redis-server, runs both sides' `evaljobs bench` cells on it and
    stops it when the script ends (nothing left listening on its port)."""
    out = tmp_path / "samples.json"
    done = run("--base", "HEAD", "--rounds", "1", "--workloads", "pairs", "--pairs", "6",
               "--shared-venv", "--cache", str(cache), "--json", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| pairs |" in done.stdout and "pairs/s" in done.stdout
    samples = json.loads(out.read_text())
    assert len(samples["samples"]["pairs"]["base"]) == len(samples["pairs_cpu_s"]["this"]) == 1
    port = int(re.search(r"redis-server redis://127\.0\.0\.1:(\d+)/0", done.stdout).group(1))
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_one_run_of_the_width16_timeline_prints_each_phase_and_the_floor(tmp_path):
    timeline = GUARD.with_name("bench_timeline")
    done = subprocess.run([sys.executable, str(timeline), "--runs", "1"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("this "))
    for phase in ("first request", "rounds", "last answer", "report", "exit", "429s", "floor"):
        assert phase in line, line
    assert "| this | 1 |" in done.stdout
