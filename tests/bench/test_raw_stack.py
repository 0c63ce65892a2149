"""The raw-stack comparison point of the zero-latency figure (evaljobs.bench.raw_stack): plain Dramatiq
worker processes on a real Redis, a real simulated provider and a SQLite file, every pair called once
and stored once, the run's end seen by the driver. Its figures are in BENCHMARKS.md, not asserted."""
from __future__ import annotations

import sqlite3
import statistics

import pytest

from evaljobs.bench.raw_stack import measure_raw_stack


@pytest.mark.redis
def test_raw_stack_calls_and_stores_every_pair_once(tmp_path, redis_url, simulated_provider):
    sim = simulated_provider(latency=0, export=False)
    figure = measure_raw_stack(redis_url, sim.url, pairs=30, processes=2, threads=2, repeat=2, out=tmp_path)
    assert figure["pairs"] == 30 and len(figure["walls"]) == 2
    # measured from /proc in 10 ms ticks: 30 quick pairs may read 0 (a figure for BENCHMARKS.md)
    assert figure["pairs_per_s"] == round(30 / statistics.median(figure["walls"]), 1) and figure["cpu_s"] >= 0
    rounds = 3  # an untimed warm-up, then the repeats
    assert sim.stats()["completed"] == 30 * rounds
    db = sqlite3.connect(tmp_path / "raw-stack.db")
    runs = db.execute("SELECT run, count(*), count(DISTINCT i) FROM results GROUP BY run").fetchall()
    assert len(runs) == rounds and all(count == distinct == 30 for _, count, distinct in runs)
