"""`evaljobs bench`: the recommendation logic on synthetic numbers, and the command on a tiny grid."""
from __future__ import annotations

import csv
import json
import sys

import pytest

from evaljobs.api import Session
from evaljobs.bench import (BenchError,
                            BenchResult,
                            BenchSpec,
                            Cell,
                            Measurement,
                            effective_width,
                            find_knee,
                            ideal_wall,
                            load_result,
                            measure_enqueue,
                            parse_strategies,
                            parse_widths,
                            recommend,
                            render_csv,
                            render_table,
                            strategy_widths,
                            summarize,
                            write_outputs)
from helpers import abc_catalog_yaml

TINY = abc_catalog_yaml("tiny", failing="c")


def cell(strategy: str, width: int, wall: float, *, error_rate: float = 0.0, cpu: float | None = None,
         pairs: int = 33, latency: float | None = 0.46, cores: int | None = None) -> Cell:
    return Cell(
        strategy=strategy,
        width=width,
        repeats=1,
        pairs=pairs,
        wall_s=wall,
        wall_min_s=wall,
        wall_max_s=wall,
        throughput=pairs / wall,
        error_rate=error_rate,
        rate_limited=None,
        errors=None,
        retries=0,
        errored_pairs=0,
        cost=0.0,
        cpu_s=cpu,
        peak_rss_mb=None,
        report_lag_ms=None,
        ideal_s=ideal_wall(pairs, width, latency) if latency else None,
        cores=cores,
    )


def measurement(strategy: str, width: int, repeat: int, wall: float, **extra) -> Measurement:
    values = dict(strategy=strategy, width=width, repeat=repeat, run_id=f"r_{strategy}{width}{repeat}",
                  status="complete", pairs=10, wall_s=wall, requests=10, rate_limited=0, errors=0, retries=0,
                  errored_pairs=0, passed=10, cost=0.01, cpu_s=0.5, peak_rss_mb=80.0)
    values.update(extra)
    return Measurement(**values)


# -- the recommendation on synthetic numbers ------------------------------------------------------


def test_recommended_width_is_the_smallest_within_ten_percent_of_the_best_with_few_errors():
    cells = [cell("fanout", 1, 15.5), cell("fanout", 2, 7.9), cell("fanout", 4, 4.2), cell("fanout", 8, 2.45),
             cell("fanout", 16, 2.3), cell("fanout", 32, 1.5, error_rate=0.2)]
    rec = recommend(cells, cores=2)
    # 1.5 s at 32 is fastest but has 20 % errors: not eligible. Best eligible 2.3 s; 2.45 is within 10 %.
    assert (rec.strategy, rec.width) == ("fanout", 8)
    assert "within 10%" in rec.reason and "2.30 s" in rec.reason


def test_recommendation_picks_the_strategy_that_reaches_the_best_wall_clock():
    cells = [cell("sequential", 1, 15.2), cell("threads", 4, 4.1), cell("threads", 8, 2.6),
             cell("fanout", 4, 4.3), cell("fanout", 8, 2.35), cell("fanout", 16, 1.4)]
    rec = recommend(cells, cores=2)
    assert (rec.strategy, rec.width) == ("fanout", 16)
    assert {k.strategy for k in rec.knees} == {"sequential", "threads", "fanout"}
    assert rec.knee is not None and rec.knee.strategy == "fanout"


def test_no_recommendation_when_every_cell_has_too_many_errors():
    rec = recommend(
        [cell("fanout", 8, 3.0, error_rate=0.05), cell("fanout", 16, 2.0, error_rate=0.3)], cores=2
    )
    assert rec.width is None and rec.strategy is None
    assert "error rate" in rec.reason


def test_knee_is_rate_limit_bound_when_errors_climb_past_it():
    cells = [cell("fanout", 4, 4.2), cell("fanout", 8, 2.4, error_rate=0.0),
             cell("fanout", 16, 2.5, error_rate=0.35)]
    knee = find_knee(cells, cores=2)
    assert knee.width == 8 and knee.bound == "rate-limit bound"
    assert "35.0%" in knee.reason


def test_knee_is_cpu_bound_when_the_workers_use_their_cores():
    # zero latency: wall clock does not improve and one worker process burns its one core
    cells = [cell("fanout", 4, 3.0, cpu=2.8, latency=None, cores=1),
             cell("fanout", 8, 2.95, cpu=2.9, latency=None, cores=1),
             cell("fanout", 16, 3.1, cpu=3.0, latency=None, cores=1)]
    knee = find_knee(cells, cores=2)
    assert knee.width == 4 and knee.bound == "CPU bound"
    assert "1 core" in knee.reason


def test_knee_is_latency_bound_when_width_no_longer_cuts_rounds():
    # 33 pairs: width 16 is 3 rounds, width 24 is 2 rounds (-33 %), width 32 is 2 rounds too
    cells = [cell("threads", 8, 2.5), cell("threads", 16, 1.45, cpu=0.2), cell("threads", 32, 1.40, cpu=0.2)]
    knee = find_knee(cells, cores=2)
    assert knee.width == 16 and knee.bound == "latency bound"
    assert "3 round(s)" in knee.reason


def test_knee_not_reached_while_every_step_still_pays():
    cells = [cell("threads", w, ideal_wall(33, w, 0.46) * 1.05) for w in (1, 2, 4, 8, 16)]
    knee = find_knee(cells, cores=2)
    assert knee.width is None and "not reached up to width 16" in knee.reason


def test_knee_ignores_a_noisy_dip_and_looks_at_every_wider_cell():
    # 8 -> 16 looks flat (noise) but 32 is much faster: adding width still helps
    cells = [cell("fanout", 8, 2.4), cell("fanout", 16, 2.35), cell("fanout", 32, 1.2)]
    assert find_knee(cells, cores=2).width is None


def test_a_step_within_the_repeats_spread_is_no_better():
    # medians 3.0 -> 2.5 s (-17 %), but the repeats overlap: 2.2-3.4 s vs 2.4-3.3 s is noise, not a gain
    narrow, wide = cell("fanout", 8, 3.0, latency=None), cell("fanout", 16, 2.5, latency=None)
    narrow.repeats = wide.repeats = 3
    narrow.wall_min_s, narrow.wall_max_s, wide.wall_min_s, wide.wall_max_s = 2.4, 3.3, 2.2, 3.4
    knee = find_knee([narrow, wide], cores=2)
    assert knee.width == 8 and knee.bound == "no better"
    assert "within the repeats' spread" in knee.reason
    wide.wall_min_s, wide.wall_max_s = 2.3, 2.35  # apart: a real step
    assert find_knee([narrow, wide], cores=2).width is None


def test_knee_text_never_says_every_step_paid_when_one_was_slower():
    # 8 -> 16 was slower, 32 faster than both: not reached, and the text says which step was slower
    cells = [cell("fanout", 8, 2.0, latency=None), cell("fanout", 16, 2.3, latency=None),
             cell("fanout", 32, 1.2, latency=None)]
    knee = find_knee(cells, cores=2)
    assert knee.width is None
    assert "each step" not in knee.reason and "16 -> 32" not in knee.reason
    assert "8 -> 16 was slower (2.00 -> 2.30 s)" in knee.reason


def test_a_faster_width_bought_with_refusals_is_neither_the_knee_nor_recommended():
    # against a provider serving 8 at once, governor off: 32 looks fastest while 40 % of its requests bounce
    cells = [cell("fanout", 8, 2.0, latency=None), cell("fanout", 16, 2.3, error_rate=0.3, latency=None),
             cell("fanout", 32, 1.5, error_rate=0.4, latency=None)]
    knee = find_knee(cells, cores=2)
    assert knee.width == 8 and knee.bound == "rate-limit bound"
    assert "width 32 was faster only while the provider refused 40.0%" in knee.reason
    rec = recommend(cells, cores=2)
    assert rec.width == 8


def test_fixed_concurrency_strategies_have_one_width():
    assert strategy_widths("sequential", (1, 2, 4), 3) == [1]
    assert strategy_widths("per-model", (1, 2, 4, 8), 3) == [1, 2]
    assert strategy_widths("per-model", (4, 8), 2) == [4]
    assert strategy_widths("fanout", (1, 2, 4), 1) == [1, 2, 4]
    assert effective_width("per-model", 8, 3) == 3 and effective_width("sequential", 8, 3) == 1
    # --processes P: every worker process has WIDTH threads, so fan-out has P x WIDTH in flight.
    assert effective_width("fanout", 16, 1, processes=2) == 32
    assert effective_width("threads", 16, 1, processes=2) == 16
    knee = find_knee([cell("sequential", 1, 15.0)], cores=2)
    assert knee.bound == "one width only" and "fixed" in knee.reason


def test_ideal_wall_is_rounds_times_latency():
    assert ideal_wall(100, 32, 0.5) == pytest.approx(2.0)
    assert ideal_wall(33, 16, 0.46) == pytest.approx(1.38)
    assert ideal_wall(33, 1, 0.46) == pytest.approx(15.18)


def test_summarize_takes_medians_of_the_repeats():
    ms = [measurement("fanout", 4, 1, 3.0), measurement("fanout", 4, 2, 9.0, rate_limited=4, requests=20),
          measurement("fanout", 4, 3, 3.3), measurement("threads", 4, 1, 2.0)]
    cells = summarize(ms, pair_latency=0.5)
    fan = next(c for c in cells if c.strategy == "fanout")
    assert fan.repeats == 3 and fan.wall_s == 3.3 and (fan.wall_min_s, fan.wall_max_s) == (3.0, 9.0)
    assert fan.throughput == pytest.approx(10 / 3.3, rel=1e-3)
    assert fan.error_rate == 0.0  # one repeat with 20 % errors does not decide
    assert fan.ideal_s == pytest.approx(1.5)  # ceil(10 / 4) x 0.5
    assert [c.strategy for c in cells] == ["threads", "fanout"]  # the canonical strategy order


def test_error_rate_comes_from_the_provider_or_else_from_the_results():
    assert measurement(
        "fanout", 1, 1, 1.0, requests=50, rate_limited=4, errors=1
    ).error_rate == pytest.approx(0.1)
    # the attempt log counted no request (every answer from the response cache): no error either
    assert measurement("fanout", 1, 1, 1.0, requests=0, rate_limited=0, errors=0, retries=2).error_rate == 0.0
    real = measurement("fanout", 1, 1, 1.0, requests=None, rate_limited=None, errors=None, retries=2,
                       errored_pairs=1)
    assert real.error_rate == pytest.approx(3 / 12)


def test_lists_on_the_command_line_are_checked():
    assert parse_widths("16, 1,4,4") == (1, 4, 16)
    assert parse_strategies("fanout,threads,fanout") == ("fanout", "threads")
    with pytest.raises(BenchError, match="'x' is not a positive integer"):
        parse_widths("1,x")
    with pytest.raises(BenchError, match="unknown strategy 'fast'"):
        parse_strategies("fanout,fast")


def test_outputs_round_trip_through_json(tmp_path):
    cells = [cell("threads", 1, 15.3), cell("threads", 4, 4.0), cell("fanout", 4, 4.2, error_rate=0.02)]
    spec = BenchSpec(catalog="light33.yaml", models=["sim/fast"], widths=(1, 4), repeat=1)
    result = BenchResult(
        spec, {"cores": 2}, [measurement("threads", 1, 1, 15.3)], cells, recommend(cells, cores=2)
    )
    paths = write_outputs(result, tmp_path)
    again = load_result(paths["json"])
    assert again.recommendation == result.recommendation and again.cells == result.cells
    rows = list(csv.DictReader(paths["csv"].open()))
    assert [(r["strategy"], r["width"]) for r in rows] == [
        ("threads", "1"),
        ("threads", "4"),
        ("fanout", "4"),
    ]
    assert rows[2]["error_rate"] == "0.02" and render_csv(result).startswith("strategy,width,")
    assert paths["png"] is not None and paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "recommended default: --strategy threads --width 4" in render_table(result)


# -- the command, end to end on a tiny grid -----------------------------------------------------


@pytest.fixture
def tiny_catalog(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY, encoding="utf-8")
    return path


def test_bench_command_on_a_tiny_grid_writes_table_json_csv_and_png(cli, tiny_catalog, tmp_path):
    out = tmp_path / "out"
    result = cli("bench", str(tiny_catalog), "-m", "sim/fast", "--strategies", "threads,fanout", "--widths",
                 "1,2", "--repeat", "1", "--simulate", "latency=0.01", "--out", str(out))
    assert result.exit_code == 0, result.output
    table = result.stdout
    assert table.splitlines()[0].split()[:3] == ["strategy", "width", "wall"]
    assert "recommended default: --strategy" in table and "knee threads:" in table and "knee fanout:" in table
    cells = [
        line.split("]")[0].strip() for line in result.stderr.splitlines() if line.lstrip().startswith("[")
    ]
    assert cells == ["[1/4", "[2/4", "[3/4", "[4/4"], result.stderr  # progress per cell, on stderr
    data = json.loads((out / "bench.json").read_text())
    grid = {(c["strategy"], c["width"]) for c in data["cells"]}
    assert grid == {("threads", 1), ("threads", 2), ("fanout", 1), ("fanout", 2)}
    for c in data["cells"]:
        # every pair waits out at least one simulated call of 0.01 s (no jitter): a bound, not a race
        assert c["pairs"] == 3 and c["wall_s"] >= 0.01 and c["complete"]
        assert c["error_rate"] == 0.0 and c["cpu_s"] is not None and c["peak_rss_mb"] > 10
        # host_busy is CPU time over wall time: a short cell may measure 0.0 (coarse CPU clocks), so
        # only its range is the contract (its figures: scripts/bench + BENCHMARKS.md)
        assert 0.0 <= c["host_busy"] <= 1.0 and c["cores"] == 1
        assert c["ideal_s"] == pytest.approx(-(-3 // c["width"]) * 0.01)  # one call per pair, measured
    for m in data["measurements"]:
        assert m["status"] == "complete" and m["requests"] == 3 and m["passed"] == 2
        assert m["report_lag_ms"] is not None
    assert data["recommendation"]["width"] in (1, 2)
    assert len(list(csv.DictReader((out / "bench.csv").open()))) == 4
    markdown = (out / "bench.md").read_text()
    assert markdown.startswith("| strategy | width |") and markdown.count("\n| threads |") == 2
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_without_matplotlib_still_writes_json_and_csv(cli, tiny_catalog, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out = tmp_path / "out"
    result = cli("bench", str(tiny_catalog), "-m", "sim/fast", "--strategies", "sequential", "--repeat", "1",
                 "--simulate", "latency=0", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "no plot: matplotlib is not installed" in result.stderr
    assert (out / "bench.json").exists() and (out / "bench.csv").exists() and not (out / "bench.png").exists()


def test_provider_errors_show_in_the_cell(cli, tiny_catalog, tmp_path, monkeypatch):
    """A provider limited to one call in flight answers 429 to a width of 3: the error rate says so."""
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.01")
    out = tmp_path / "out"
    result = cli("bench", str(tiny_catalog), "-m", "sim/fast", "--strategies", "threads", "--widths", "3",
                 "--repeat", "1", "--no-governor", "--simulate",
                 "latency=0.2,max_concurrent=1,retry_after=0.05", "--out", str(out))
    assert result.exit_code == 0, result.output
    (c,) = json.loads((out / "bench.json").read_text())["cells"]
    assert c["rate_limited"] >= 1 and c["error_rate"] > 0 and c["retries"] >= 1


@pytest.mark.parametrize("args, message", [
    (["--simulate", "latency=fast"], "--simulate: simulate option latency='fast' is not a number"),
    (["--widths", "0"], "--widths: '0' is not a positive integer"),
    (["--processes", "2"], "--processes needs a Redis broker"),
    (["--worker-env", "oops"], "--worker-env 'oops' is not NAME=VALUE"),
])
def test_usage_errors_are_one_line(cli, tiny_catalog, tmp_path, args, message):
    result = cli("bench", str(tiny_catalog), "-m", "sim/fast", "--repeat", "1", "--simulate", "latency=0",
                 "--out", str(tmp_path / "o"), *args)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_enqueue_measurement_counts_every_pair_on_the_memory_broker(tmp_path):
    figure = measure_enqueue("memory", f"sqlite:///{tmp_path}/enq.db", pairs=200, sessions=Session, repeat=1)
    assert figure["pairs"] == 200 and figure["broker"] == "memory" and len(figure["all_seconds"]) == 1
    assert figure["seconds"] == figure["all_seconds"][0] >= 0  # measured: a figure for BENCHMARKS.md


@pytest.mark.redis
def test_fanout_cells_on_redis_measure_the_worker_processes(cli, tiny_catalog, tmp_path, redis_url):
    out = tmp_path / "out"
    result = cli("bench", str(tiny_catalog), "-m", "sim/fast", "--strategies", "fanout", "--widths", "2",
                 "--repeat", "1", "--simulate", "latency=0.01", "--broker", redis_url, "--out", str(out))
    assert result.exit_code == 0, result.output + (out / "workers.log").read_text(errors="replace")[-2000:]
    data = json.loads((out / "bench.json").read_text())
    (c,) = data["cells"]
    # CPU and memory of the worker process group, not of this test process
    assert c["cpu_s"] >= 0 and c["peak_rss_mb"] > 20 and c["cores"] == 1  # the figure is measured: no floor
    assert data["measurements"][0]["requests"] == 3
    assert "Worker process is ready for action" in (out / "workers.log").read_text()


def test_knee_is_cpu_bound_when_the_host_is_saturated_even_if_the_workers_are_not():
    """Two worker processes at 1.4 of 2 cores, the provider and broker on the rest: the host is the limit."""
    cells = [cell(strategy, w, wall, cpu=1.4 * wall, latency=None, cores=2) for strategy, w, wall in
             (("fanout", 8, 10.2), ("fanout", 16, 10.3), ("fanout", 32, 11.2))]
    for c in cells:
        c.host_busy = 0.97
    knee = find_knee(cells, cores=2)
    assert knee.width == 8 and knee.bound == "CPU bound" and "97% busy" in knee.reason
    for c in cells:
        c.host_busy = 0.5
    assert find_knee(cells, cores=2).bound == "latency bound"
    zero = [cell("fanout", w, 10.0, latency=None, cores=2) for w in (8, 16)]
    for c in zero:
        c.ideal_s = 0.0
    assert find_knee(zero, cores=2).bound == "overhead bound"


@pytest.mark.redis
def test_bench_costs_measures_every_step_of_a_pair(tmp_path):
    """scripts/bench_costs (BENCHMARKS.md's per-pair CPU table) runs against its real parts."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "costs.json"
    done = subprocess.run(
        [sys.executable, str(root / "scripts" / "bench_costs"), "--n", "40", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert set(figures) == {
        "provider call (client)",
        "provider call (server)",
        "Redis command",
        "Redis command (server)",
        "store: pair_state",
        "store: record_result",
        "evaluate_scenario",
        "Dramatiq no-op message",
        "Dramatiq no-op message (Redis server)",
        "sequential, per pair",
    }
    # Other processes' CPU is read in clock ticks (10 ms): 40 iterations may round to 0 there.
    assert all(value >= 0 for value in figures.values()), figures
    assert all(value > 0 for name, value in figures.items() if "server" not in name), figures
    assert "evaluate_scenario" in done.stdout


def test_the_benchmark_scripts_helpers_import_without_pytest():
    """scripts/bench runs in a virtualenv without the test extra: the servers and worker processes its
    scripts borrow from tests/helpers must not pull pytest in (peers-shape failed on a fresh clone)."""
    import subprocess

    from helpers import ROOT

    code = ("import sys; sys.modules['pytest'] = None; sys.path[:0] = [sys.argv[1]]\n"
            "from helpers.servers import RedisServer, free_port\nfrom helpers.workers import WorkerProcess\n"
            "from helpers.viewer import Viewer\nprint('ok')")
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "tests")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.redis
def test_bench_batch_on_redis_runs_both_runs_with_real_workers(tmp_path):
    """scripts/bench_batch --broker redis (BENCHMARKS.md's batch table), small: both runs complete with
    every pair, the batch run at half the cost, each request submitted to the provider once."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "batch.json"
    done = subprocess.run(
        [sys.executable, str(root / "scripts" / "bench_batch"), "--broker", "redis", "--pairs", "10",
         "--latency", "0.01", "--batch-delay", "0.5", "--width", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=240, cwd=root,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    interactive, batch = json.loads(out.read_text())
    assert [(r["run"], r["broker"], r["status"], r["pairs"]) for r in (interactive, batch)] == [
        ("interactive", "redis", "complete", 10), ("batch", "redis", "complete", 10)]
    assert batch["width"] == 1 and batch["max_submissions_of_one_request"] == 1
    assert batch["cost"] == pytest.approx(interactive["cost"] / 2)
    assert batch["batch"]["saved"] == pytest.approx(batch["cost"])
