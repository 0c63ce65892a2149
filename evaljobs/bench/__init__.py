"""The pooling benchmark: which scheduling shape wins, where width stops paying, and why.

``evaljobs bench`` runs one catalog once per (strategy, width, repeat), each time
as a fresh run through the real code path (:class:`evaljobs.api.Session` submit →
evaluate → persist → barrier → report), and records per cell the wall clock,
throughput, the provider's error rate, retries, cost, and the CPU time and peak
memory of whatever did the work (this process for in-process strategies and the
memory broker; the ``evaljobs worker`` process group for fan-out over Redis).

Two strategies have a fixed concurrency, so they are not run at every width:
``sequential`` is one pair at a time by definition (run at width 1 only) and
``per-model`` runs one message per model (run at widths up to the number of
models; more threads have nothing to do). Both are drawn flat across the grid.

The analysis functions (:func:`summarize`, :func:`find_knee`, :func:`recommend`)
are pure: they take measurements and return values, so the recommendation logic
is tested on synthetic numbers. The engine (:func:`run_bench`) starts what it
needs (the simulated provider, worker processes) and stops it again.
"""
from __future__ import annotations

from evaljobs.config import configure
from evaljobs.errors import UsageError
import csv
import io
import json
import math
import os
import platform
import resource
import secrets
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

STRATEGIES = ("sequential", "threads", "fanout", "per-model")
QUEUED = ("fanout", "per-model")
DEFAULT_WIDTHS = (1, 2, 4, 8, 16)
DEFAULT_REPEAT = 3
#: A cell is eligible for the recommendation only with at most this provider error rate.
MAX_ERROR_RATE = 0.01
#: "Within 10 % of the best wall clock" (recommended width) and "less than 10 % faster" (knee).
TOLERANCE = 0.10
#: Cores busy (CPU seconds per wall second) at or above this share of the machine's cores = CPU bound.
CPU_BOUND_SHARE = 0.75
#: The whole host this busy (all processes, from /proc/stat) also means CPU bound: on one machine the
#: provider, the broker and the database compete with the workers for the same cores.
HOST_BOUND_SHARE = 0.90
DEFAULT_CELL_TIMEOUT = 900.0
WORKER_READY_TIMEOUT = 60.0
_READY_LINE = "is ready for action"


class BenchError(UsageError):
    """Something about the benchmark request that cannot work (one line)."""


# -- values -----------------------------------------------------------------------------------


@dataclass
class BenchSpec:
    """What to run. ``width`` is worker threads (memory broker / Redis worker process) or pool size."""

    catalog: str
    models: list[str]
    strategies: tuple[str, ...] = ("sequential", "threads", "fanout", "per-model")
    widths: tuple[int, ...] = DEFAULT_WIDTHS
    repeat: int = DEFAULT_REPEAT
    broker: str = "memory"
    db: str | None = None
    simulate: dict[str, Any] | None = None
    out: str = ""
    providers: str | None = None
    #: Redis only: worker processes, each with ``width`` threads.
    processes: int = 1
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    #: Extra environment for worker processes (e.g. ``dramatiq_worker_timeout``).
    worker_env: dict[str, str] = field(default_factory=dict)
    #: The provider governor: True/False force it on/off (here and in the workers); None: as configured.
    governor: bool | None = None


@dataclass
class Measurement:
    """One run of one cell."""

    strategy: str
    width: int
    repeat: int
    run_id: str
    status: str
    pairs: int
    wall_s: float
    #: Provider calls, 429s, other error answers (HTTP errors and faults), calls made again.
    requests: int | None
    rate_limited: int | None
    errors: int | None
    retries: int
    errored_pairs: int
    passed: int
    cost: float
    #: CPU seconds and peak resident memory of what did the work (see the module docstring).
    cpu_s: float | None
    peak_rss_mb: float | None
    #: Milliseconds from the last result event to the report's ``complete`` event, as this process saw them.
    report_lag_ms: float | None = None
    #: Seconds from submitting the run to its first result event (queue start-up + one pair).
    first_result_s: float | None = None
    #: Cores the workers could use: worker processes on Redis (each is one GIL), else 1; capped by the host.
    cores: int | None = None
    #: Share of the host's CPU time that was busy during the run (every process, not only ours).
    host_busy: float | None = None

    @property
    def error_rate(self) -> float:
        if self.requests:
            return ((self.rate_limited or 0) + (self.errors or 0)) / self.requests
        attempts = self.pairs + self.retries
        return (self.retries + self.errored_pairs) / attempts if attempts else 0.0


@dataclass
class Cell:
    """The repeats of one (strategy, width), summarized: medians, so one noisy repeat does not decide."""

    strategy: str
    width: int
    repeats: int
    pairs: int
    wall_s: float
    wall_min_s: float
    wall_max_s: float
    throughput: float
    error_rate: float
    rate_limited: float | None
    errors: float | None
    retries: float
    errored_pairs: float
    cost: float
    cpu_s: float | None
    peak_rss_mb: float | None
    report_lag_ms: float | None
    ideal_s: float | None = None
    complete: bool = True
    first_result_s: float | None = None
    cores: int | None = None
    host_busy: float | None = None

    @property
    def overhead(self) -> float | None:
        return self.wall_s / self.ideal_s if self.ideal_s else None

    @property
    def cores_busy(self) -> float | None:
        return self.cpu_s / self.wall_s if self.cpu_s is not None and self.wall_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["overhead"] = _round(self.overhead, 3)
        data["cores_busy"] = _round(self.cores_busy, 3)
        return data


@dataclass
class Knee:
    """Where adding width stops helping (``width`` None: not reached in the grid) and why."""

    strategy: str
    width: int | None
    bound: str  # "latency bound" | "rate-limit bound" | "CPU bound" | "one width only"
    reason: str


@dataclass
class Recommendation:
    strategy: str | None
    width: int | None
    wall_s: float | None
    reason: str
    knee: Knee | None
    knees: list[Knee] = field(default_factory=list)


@dataclass
class BenchResult:
    spec: BenchSpec
    environment: dict[str, Any]
    measurements: list[Measurement]
    cells: list[Cell]
    recommendation: Recommendation

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": asdict(self.spec),
            "environment": self.environment,
            "cells": [c.to_dict() for c in self.cells],
            "measurements": [{**asdict(m), "error_rate": round(m.error_rate, 5)} for m in self.measurements],
            "recommendation": asdict(self.recommendation),
        }


# -- parsing the command line's lists -----------------------------------------------------------


def parse_strategies(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not names:
        raise BenchError("--strategies is empty: use e.g. sequential,threads,fanout,per-model")
    for name in names:
        if name not in STRATEGIES:
            raise BenchError(f"--strategies: unknown strategy {name!r}; use one of {', '.join(STRATEGIES)}")
    return names


def parse_widths(text: str) -> tuple[int, ...]:
    widths = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.isdigit() or int(part) < 1:
            raise BenchError(f"--widths: {part!r} is not a positive integer (e.g. --widths 1,2,4,8,16)")
        widths.append(int(part))
    if not widths:
        raise BenchError("--widths is empty: use e.g. 1,2,4,8,16")
    return tuple(sorted(set(widths)))


def strategy_widths(strategy: str, widths: Sequence[int], models: int) -> list[int]:
    """The widths a strategy is actually run at (see the module docstring)."""
    if strategy == "sequential":
        return [1]
    if strategy == "per-model":
        capped = [w for w in widths if w <= models]
        return capped or [min(widths)]
    return list(widths)


def effective_width(strategy: str, width: int, models: int, processes: int = 1) -> int:
    """How many pairs a strategy can have in flight at ``width`` (threads per worker process)."""
    if strategy == "sequential":
        return 1
    workers = processes if strategy in QUEUED else 1  # in-process strategies run in this one process
    if strategy == "per-model":
        return max(1, min(width * workers, models))
    return width * workers


def ideal_wall(pairs: int, width: int, pair_latency: float) -> float:
    """The physical limit: ``ceil(pairs / width)`` rounds of one pair's provider latency."""
    return math.ceil(pairs / max(1, width)) * pair_latency


# -- analysis (pure) -----------------------------------------------------------------------------


def summarize(measurements: Iterable[Measurement], *, models: int = 1,
              pair_latency: float | None = None, processes: int = 1) -> list[Cell]:
    """One :class:`Cell` per (strategy, width): medians of the repeats, ordered by strategy then width."""
    groups: dict[tuple[str, int], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.strategy, m.width), []).append(m)
    cells = []
    for (strategy, width), ms in groups.items():
        done = [m for m in ms if m.status in ("complete", "partial", "failed")]
        use = done or ms
        wall = statistics.median(m.wall_s for m in use)
        pairs = use[0].pairs
        cells.append(Cell(
            strategy=strategy, width=width, repeats=len(ms), pairs=pairs,
            wall_s=round(wall, 4), wall_min_s=round(min(m.wall_s for m in use), 4),
            wall_max_s=round(max(m.wall_s for m in use), 4),
            throughput=round(pairs / wall, 3) if wall > 0 else 0.0,
            error_rate=round(statistics.median(m.error_rate for m in use), 5),
            rate_limited=_median_or_none(m.rate_limited for m in use),
            errors=_median_or_none(m.errors for m in use),
            retries=statistics.median(m.retries for m in use),
            errored_pairs=statistics.median(m.errored_pairs for m in use),
            cost=round(statistics.median(m.cost for m in use), 6),
            cpu_s=_median_or_none((m.cpu_s for m in use), 3),
            peak_rss_mb=_median_or_none((m.peak_rss_mb for m in use), 1),
            report_lag_ms=_median_or_none((m.report_lag_ms for m in use), 1),
            first_result_s=_median_or_none((m.first_result_s for m in use), 4),
            cores=use[0].cores,
            host_busy=_median_or_none((m.host_busy for m in use), 3),
            ideal_s=(round(ideal_wall(pairs, effective_width(strategy, width, models, processes),
                                      pair_latency), 4) if pair_latency is not None else None),
            complete=len(done) == len(ms),
        ))
    order = {name: i for i, name in enumerate(STRATEGIES)}
    return sorted(cells, key=lambda c: (order.get(c.strategy, 99), c.width))


def find_knee(cells: Sequence[Cell], *, cores: int) -> Knee:
    """The smallest width past which no width in the grid is more than 10 % faster, and why.

    The reason is read from what happens past the knee: the provider's error rate
    climbing means the provider refuses the extra width (rate-limit bound); the
    workers burning most of the machine's cores means the host is the limit (CPU
    bound); otherwise the run is waiting on provider latency — it already takes
    about ``ceil(pairs / width)`` rounds of one call and the next width in the grid
    barely cuts the number of rounds (latency bound).
    """
    ordered = sorted((c for c in cells if c.complete), key=lambda c: c.width)
    if not ordered:
        return Knee(cells[0].strategy if cells else "", None, "no data", "no cell completed")
    strategy = ordered[0].strategy
    if len(ordered) == 1:
        why = ("its concurrency is fixed" if strategy in ("sequential", "per-model")
               else "the grid has one width")
        return Knee(strategy, None, "one width only", f"{strategy} ran at width {ordered[0].width} only ({why})")
    for i, cell in enumerate(ordered[:-1]):
        beyond = ordered[i + 1:]
        fastest = min(b.wall_s for b in beyond)
        if fastest * (1 + TOLERANCE) >= cell.wall_s:
            return Knee(strategy, cell.width, *_why(cell, beyond, cores))
    last = ordered[-1]
    if last.ideal_s:
        return Knee(strategy, None, "latency bound",
                    f"not reached up to width {last.width}: each step still cut the wall clock by more than "
                    f"{TOLERANCE:.0%} (the run is still ceil(pairs / width) rounds of provider latency)")
    return Knee(strategy, None, "not reached",
                f"not reached up to width {last.width}: the widest cell was still more than {TOLERANCE:.0%} "
                f"faster than every narrower one")


def _why(cell: Cell, beyond: Sequence[Cell], cores: int) -> tuple[str, str]:
    worst = max(beyond, key=lambda b: b.error_rate)
    if worst.error_rate > MAX_ERROR_RATE and worst.error_rate > cell.error_rate:
        return ("rate-limit bound",
                f"past width {cell.width} the provider refuses the extra calls: error rate "
                f"{cell.error_rate:.1%} at {cell.width} -> {worst.error_rate:.1%} at {worst.width}, "
                f"and the wall clock does not improve")
    busy = [c for c in (cell, *beyond) if c.cores_busy is not None]
    if busy:
        hottest = max(busy, key=lambda c: (c.cores_busy or 0.0) / (c.cores or cores))
        usable = hottest.cores or cores
        if (hottest.cores_busy or 0.0) >= CPU_BOUND_SHARE * usable:
            return ("CPU bound",
                    f"the workers already use {hottest.cores_busy:.2f} of the {usable} core(s) they can use at "
                    f"width {hottest.width} ({hottest.cpu_s:.2f} s CPU in {hottest.wall_s:.2f} s; one Python "
                    f"process runs on one core at a time): more threads only queue for the CPU")
    hosts = [c for c in (cell, *beyond) if c.host_busy is not None]
    if hosts:
        hottest = max(hosts, key=lambda c: c.host_busy or 0.0)
        if (hottest.host_busy or 0.0) >= HOST_BOUND_SHARE:
            workers = (f"the workers {hottest.cores_busy:.2f} of them, " if hottest.cores_busy is not None
                       else "")
            return ("CPU bound",
                    f"the host's {cores} cores were {hottest.host_busy:.0%} busy at width {hottest.width} "
                    f"({workers}the rest the provider, broker, database and whatever else runs there): "
                    f"more threads only queue for the CPU")
    if cell.ideal_s == 0:
        return ("overhead bound",
                f"the provider answers at once, so the run is all evaluate, persist and queue overhead; "
                f"past width {cell.width} it does not shrink")
    if cell.ideal_s:
        rounds = math.ceil(cell.pairs / max(1, cell.width))
        return ("latency bound",
                f"at width {cell.width} the run is about {rounds} round(s) of provider latency "
                f"({cell.wall_s:.2f} s, ideal {cell.ideal_s:.2f} s); wider cuts too few rounds to gain "
                f"{TOLERANCE:.0%}")
    return ("latency bound",
            f"at width {cell.width} the run is waiting on provider calls (CPU and errors stay low); wider "
            f"cuts too few rounds to gain {TOLERANCE:.0%}")


def recommend(cells: Sequence[Cell], *, cores: int) -> Recommendation:
    """The smallest width within 10 % of the best wall clock, among cells with error rate <= 1 %.

    The best wall clock is over every strategy; the width comes with the strategy
    that reached it (on ties at that width, the faster strategy). The knee reported
    with it is that strategy's.
    """
    by_strategy: dict[str, list[Cell]] = {}
    for cell in cells:
        by_strategy.setdefault(cell.strategy, []).append(cell)
    knees = [find_knee(group, cores=cores) for group in by_strategy.values()]
    eligible = [c for c in cells if c.complete and c.error_rate <= MAX_ERROR_RATE]
    if not eligible:
        return Recommendation(None, None, None,
                              f"no cell finished with an error rate of at most {MAX_ERROR_RATE:.0%}: lower the "
                              f"width or raise the provider's limits", None, knees)
    best = min(c.wall_s for c in eligible)
    near = [c for c in eligible if c.wall_s <= best * (1 + TOLERANCE)]
    choice = min(near, key=lambda c: (c.width, c.wall_s))
    knee = next((k for k in knees if k.strategy == choice.strategy), None)
    reason = (f"{choice.strategy} at width {choice.width}: {choice.wall_s:.2f} s, within {TOLERANCE:.0%} of the "
              f"best {best:.2f} s with error rate {choice.error_rate:.1%} (<= {MAX_ERROR_RATE:.0%})")
    return Recommendation(choice.strategy, choice.width, choice.wall_s, reason, knee, knees)


# -- rendering -----------------------------------------------------------------------------------


_TABLE = (("strategy", 10, "{}"), ("width", 5, "{}"), ("wall s", 8, "{:.2f}"), ("pairs/s", 8, "{:.1f}"),
          ("ideal s", 7, "{:.2f}"), ("x ideal", 7, "{:.2f}"), ("err %", 6, "{:.1f}"), ("429s", 5, "{:.0f}"),
          ("retries", 7, "{:.0f}"), ("cost $", 8, "{:.4f}"), ("CPU s", 6, "{:.2f}"),
          ("host%", 5, "{:.0f}"), ("peak MB", 7, "{:.0f}"), ("lag ms", 6, "{:.0f}"))


def render_table(result: BenchResult) -> str:
    """The terminal table, then the recommendation and the knee of each strategy."""
    lines = ["  ".join(f"{name:>{width}}" if i else f"{name:<{width}}" for i, (name, width, _) in
                       enumerate(_TABLE))]
    for c in result.cells:
        values = (c.strategy, c.width, c.wall_s, c.throughput, c.ideal_s, c.overhead, c.error_rate * 100,
                  c.rate_limited, c.retries, c.cost, c.cpu_s,
                  c.host_busy * 100 if c.host_busy is not None else None, c.peak_rss_mb, c.report_lag_ms)
        row = []
        for i, ((_, width, fmt), value) in enumerate(zip(_TABLE, values)):
            text = "-" if value is None else fmt.format(value)
            row.append(f"{text:<{width}}" if i == 0 else f"{text:>{width}}")
        lines.append("  ".join(row) + ("" if c.complete else "  (incomplete)"))
    rec = result.recommendation
    lines.append("")
    env = result.environment
    if env:
        load = env.get("load_average_at_start"), env.get("load_average_at_end")
        busy = (f", load average {load[0][0]:.1f} -> {load[1][0]:.1f}" if load[0] and load[1] else "")
        lines.append(f"host: {env.get('cores')} cores{busy}; broker {env.get('broker')}, db {env.get('db')}, "
                     f"governor {env.get('governor', 'on')}; medians of {result.spec.repeat} run(s) per cell")
    if rec.width is not None:
        lines.append(f"recommended default: --strategy {rec.strategy} --width {rec.width}  ({rec.reason})")
    else:
        lines.append(f"recommended default: none ({rec.reason})")
    for knee in rec.knees:
        where = f"width {knee.width}" if knee.width is not None else "not reached"
        lines.append(f"knee {knee.strategy}: {where}, {knee.bound}: {knee.reason}")
    return "\n".join(lines)


def render_markdown(result: BenchResult) -> str:
    """The cells as a Markdown table (for BENCHMARKS.md and pull requests), then the verdict lines."""
    head = ("strategy", "width", "wall s (min-max)", "pairs/s", "ideal s", "× ideal", "errors", "429s",
            "retries", "CPU s", "host CPU", "peak MB", "report lag ms")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in result.cells:
        def fmt(value, spec):
            return "-" if value is None else format(value, spec)
        lines.append("| " + " | ".join([
            c.strategy, str(c.width), f"{c.wall_s:.2f} ({c.wall_min_s:.2f}-{c.wall_max_s:.2f})",
            f"{c.throughput:.1f}", fmt(c.ideal_s, ".2f"), fmt(c.overhead, ".2f"), f"{c.error_rate:.1%}",
            fmt(c.rate_limited, ".0f"), f"{c.retries:.0f}", fmt(c.cpu_s, ".2f"), fmt(c.host_busy, ".0%"),
            fmt(c.peak_rss_mb, ".0f"),
            fmt(c.report_lag_ms, ".0f")]) + " |")
    rec = result.recommendation
    lines.append("")
    if rec.width is not None:
        lines.append(f"Recommended: `--strategy {rec.strategy} --width {rec.width}` ({rec.reason}).")
    else:
        lines.append(f"Recommended: none ({rec.reason}).")
    for knee in rec.knees:
        if knee.bound != "one width only":
            where = f"width {knee.width}" if knee.width is not None else "not reached"
            lines.append(f"Knee, {knee.strategy}: {where} — {knee.bound}: {knee.reason}.")
    return "\n".join(lines) + "\n"


CSV_FIELDS = ("strategy", "width", "repeats", "pairs", "wall_s", "wall_min_s", "wall_max_s", "throughput",
              "ideal_s", "overhead", "error_rate", "rate_limited", "errors", "retries", "errored_pairs", "cost",
              "cpu_s", "cores_busy", "cores", "host_busy", "peak_rss_mb", "first_result_s", "report_lag_ms",
              "complete")


def render_csv(result: BenchResult) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for cell in result.cells:
        data = cell.to_dict()
        writer.writerow({name: data.get(name) for name in CSV_FIELDS})
    return buffer.getvalue()


def plot(result: BenchResult, path: Path, *, title: str | None = None) -> bool:
    """Wall clock and error rate against width, one line per strategy; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    widths = sorted({w for w in result.spec.widths} | {c.width for c in result.cells})
    fig, (ax_wall, ax_err) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"sequential": "#7f7f7f", "threads": "#1f77b4", "fanout": "#d62728", "per-model": "#2ca02c"}
    for strategy in STRATEGIES:
        cells = sorted((c for c in result.cells if c.strategy == strategy), key=lambda c: c.width)
        if not cells:
            continue
        xs, walls, errs = [c.width for c in cells], [c.wall_s for c in cells], [c.error_rate * 100 for c in cells]
        color = colors.get(strategy)
        ax_wall.plot(xs, walls, marker="o", color=color, label=strategy)
        ax_err.plot(xs, errs, marker="o", color=color, label=strategy)
        flat = [w for w in widths if w > xs[-1]]
        if flat:  # fixed-concurrency strategies: the same wall clock at any wider setting
            ax_wall.plot([xs[-1], *flat], [walls[-1]] * (len(flat) + 1), linestyle="--", color=color, alpha=0.6)
            ax_err.plot([xs[-1], *flat], [errs[-1]] * (len(flat) + 1), linestyle="--", color=color, alpha=0.6)
    ideal = {}
    for cell in result.cells:
        if cell.ideal_s and cell.strategy in ("threads", "fanout"):
            ideal[cell.width] = cell.ideal_s
    if ideal:
        xs = sorted(ideal)
        ax_wall.plot(xs, [ideal[x] for x in xs], linestyle=":", color="black", label="ideal ceil(pairs/W)×L")
    rec = result.recommendation
    if rec.width is not None:
        ax_wall.axvline(rec.width, color="#9467bd", alpha=0.5, linestyle="-.",
                        label=f"recommended W={rec.width}")
    if rec.knee is not None and rec.knee.width is not None:
        ax_wall.axvline(rec.knee.width, color="#ff7f0e", alpha=0.5, linestyle=":",
                        label=f"knee W={rec.knee.width} ({rec.knee.bound})")
    for ax in (ax_wall, ax_err):
        ax.set_xscale("log", base=2)
        ax.set_xticks(widths)
        ax.set_xticklabels([str(w) for w in widths])
        ax.set_xlabel("width (worker threads)")
        ax.grid(True, alpha=0.3)
    ax_wall.set_ylabel("wall clock, s (median)")
    ax_wall.set_ylim(bottom=0)
    ax_err.set_ylabel("provider error rate, % (429s and others)")
    ax_err.set_ylim(bottom=0, top=max(5.0, max((c.error_rate * 100 for c in result.cells), default=0) * 1.15))
    ax_wall.legend(fontsize=8)
    ax_err.legend(fontsize=8)
    fig.suptitle(title or _plot_title(result), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _plot_title(result: BenchResult) -> str:
    spec = result.spec
    sim = ""
    if spec.simulate:
        sim = " · simulated " + ",".join(f"{k}={v}" for k, v in spec.simulate.items() if v is not None)
    return (f"{Path(spec.catalog).name} × {', '.join(spec.models)} · broker {_broker_label(spec.broker)}"
            f"{sim} · median of {spec.repeat}")


def write_outputs(result: BenchResult, out: Path) -> dict[str, Path | None]:
    """bench.json, bench.csv, bench.md and bench.png (None when matplotlib is missing) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path | None] = {"json": out / "bench.json", "csv": out / "bench.csv", "md": out / "bench.md",
                                     "png": out / "bench.png"}
    paths["json"].write_text(json.dumps(result.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
    paths["csv"].write_text(render_csv(result), encoding="utf-8")
    paths["md"].write_text(render_markdown(result), encoding="utf-8")
    if not plot(result, paths["png"]):
        paths["png"] = None
    return paths


def load_result(path: Path) -> BenchResult:
    """A ``bench.json`` back as a :class:`BenchResult` (to re-plot or compare)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    spec_data = dict(data["spec"])
    spec_data["strategies"] = tuple(spec_data["strategies"])
    spec_data["widths"] = tuple(spec_data["widths"])
    spec = BenchSpec(**spec_data)
    names = {f.name for f in fields(Measurement)}
    measurements = [Measurement(**{k: v for k, v in m.items() if k in names}) for m in data["measurements"]]
    cell_names = {f.name for f in fields(Cell)}
    cells = [Cell(**{k: v for k, v in c.items() if k in cell_names}) for c in data["cells"]]
    rec = data["recommendation"]
    knee = Knee(**rec["knee"]) if rec.get("knee") else None
    recommendation = Recommendation(rec["strategy"], rec["width"], rec["wall_s"], rec["reason"], knee,
                                    [Knee(**k) for k in rec.get("knees", [])])
    return BenchResult(spec, data["environment"], measurements, cells, recommendation)


# -- measuring processes ------------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(path: str) -> list[str] | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _cpu_of(path: str) -> float:
    parts = _stat_fields(path)
    if parts is None:
        return 0.0
    return (int(parts[11]) + int(parts[12])) / _TICKS  # utime + stime


def host_cpu() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole host so far, from the first line of /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return (total - idle) / _TICKS, total / _TICKS


def group_pids(pgid: int) -> list[int]:
    """Every live process of process group ``pgid`` (the worker's main process and its children)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parts = _stat_fields(f"/proc/{entry}/stat")
            if parts is not None and int(parts[2]) == pgid:
                pids.append(int(entry))
    return pids


def _hwm_mb(pid: int | str) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _reset_hwm(pid: int | str) -> bool:
    """Reset the kernel's peak-RSS mark (``echo 5 > /proc/PID/clear_refs``) so the next peak is this cell's."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


class ProcessMeter:
    """CPU seconds and peak RSS of a set of processes between ``start()`` and ``stop()``.

    ``pids()`` is asked at both ends (a process group may gain children); ``exclude``
    names threads of this process whose CPU is not the workers' (the simulated provider).
    """

    def __init__(self, pids: Callable[[], list[int]] | None = None,
                 exclude_threads: Callable[[], list[int]] | None = None):
        self._pids = pids
        self._exclude = exclude_threads or (lambda: [])
        self._cpu0 = 0.0
        self._reset = False

    def _cpu(self) -> float:
        if self._pids is None:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            own = usage.ru_utime + usage.ru_stime
            return own - sum(_cpu_of(f"/proc/self/task/{tid}/stat") for tid in self._exclude())
        return sum(_cpu_of(f"/proc/{pid}/stat") for pid in self._pids())

    def start(self) -> None:
        targets = ["self"] if self._pids is None else self._pids()
        self._reset = all([_reset_hwm(pid) for pid in targets]) and bool(targets)
        self._cpu0 = self._cpu()

    def stop(self) -> tuple[float, float | None]:
        cpu = self._cpu() - self._cpu0
        if self._pids is None:
            peak = _hwm_mb("self") if self._reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        else:
            marks = [_hwm_mb(pid) for pid in self._pids()]
            peak = sum(m for m in marks if m is not None) if marks else None
        return round(max(0.0, cpu), 4), (round(peak, 1) if peak is not None else None)


class WorkerGroup:
    """``evaljobs worker --threads W --processes P`` in its own process group, for the Redis cells."""

    def __init__(self, *, broker_url: str, db_url: str, threads: int, processes: int, queue: str,
                 log: Path, env: dict[str, str] | None = None, providers: str | None = None):
        self.env = dict(os.environ)
        self.env.update({"EVALJOBS_BROKER_URL": broker_url, "EVALJOBS_DATABASE_URL": db_url,
                         "EVALJOBS_QUEUE": queue, "PYTHONUNBUFFERED": "1"})
        if providers:
            self.env["EVALJOBS_PROVIDERS"] = str(Path(providers).resolve())
        self.env.update(env or {})
        self.args = [sys.executable, "-m", "evaljobs", "worker", "--threads", str(threads),
                     "--processes", str(processes)]
        self.processes = processes
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = WORKER_READY_TIMEOUT) -> "WorkerGroup":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        start_at = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.args, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"the worker exited with {self.proc.returncode} before it was ready; "
                                 f"see {self.log}")
            with open(self.log, "rb") as handle:
                handle.seek(start_at)
                if handle.read().decode("utf-8", "replace").count(_READY_LINE) >= self.processes:
                    return self
            time.sleep(0.05)
        self.stop()
        raise BenchError(f"the worker was not ready within {timeout:.0f} s; see {self.log}")

    def pids(self) -> list[int]:
        return group_pids(self.proc.pid) if self.proc is not None else []

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "WorkerGroup":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the engine ----------------------------------------------------------------------------------


class _EventClock:
    """Receipt times of the last ``result`` and of the ``complete`` event of one run."""

    def __init__(self, run_id: str | None = None):
        self.run_id = run_id
        self.first_result: float | None = None
        self.last_result: float | None = None
        self.complete: float | None = None

    def __call__(self, event: dict[str, Any]) -> None:
        if self.run_id is not None and event.get("run") != self.run_id:
            return
        now = time.perf_counter()
        if event.get("type") == "result":
            self.last_result = now
            if self.first_result is None:
                self.first_result = now
        elif event.get("type") == "complete":
            self.complete = now

    @property
    def lag_ms(self) -> float | None:
        if self.last_result is None or self.complete is None:
            return None
        return round(max(0.0, self.complete - self.last_result) * 1000.0, 2)


def _broker_label(url: str) -> str:
    return "memory" if url == "memory" else url.split("://", 1)[0]


def _sim_counts(stats: dict[str, Any]) -> tuple[int, int, int, int]:
    errors = sum(stats.get("errors", {}).values()) + sum(stats.get("faults", {}).values())
    return stats["requests"], stats["rate_limited"], errors, stats["completed"]


def environment(spec: BenchSpec) -> dict[str, Any]:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return {"cores": cores, "python": platform.python_version(), "platform": platform.platform(),
            "broker": _broker_label(spec.broker), "db": (spec.db or "").split("://", 1)[0] or "sqlite",
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            # Other work on the host skews every figure: the load average says how busy it was.
            "load_average_at_start": _load_average()}


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not available
        return None


def run_bench(spec: BenchSpec, *, echo: Callable[[str], None] = lambda line: None) -> BenchResult:
    """Run every cell of ``spec`` and return the measurements, the cells and the recommendation."""
    from evaljobs import store
    from evaljobs.api import Session

    out = Path(spec.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not spec.db:
        spec.db = f"sqlite:///{out / 'bench.db'}"
    if spec.processes > 1 and spec.broker == "memory":
        raise BenchError("--processes needs a Redis broker: in-process workers are threads of this process")
    env = environment(spec)
    saved = {name: os.environ.get(name) for name in ("EVALJOBS_SIM_URL", "EVALJOBS_GOVERNOR")}
    worker_env = dict(spec.worker_env)
    if spec.governor is not None:
        os.environ["EVALJOBS_GOVERNOR"] = worker_env["EVALJOBS_GOVERNOR"] = "on" if spec.governor else "off"
    env["governor"] = os.environ.get("EVALJOBS_GOVERNOR", "on")
    sim = None
    if spec.simulate is not None:
        from evaljobs.providers.simulated import SimulatedProvider

        sim = SimulatedProvider(**spec.simulate).start()
        os.environ["EVALJOBS_SIM_URL"] = sim.url
        configure()  # in-process runs read EVALJOBS_SIM_URL through Settings
        env["simulated_provider"] = sim.url
    queue = f"bench-{secrets.token_hex(4)}"
    measurements: list[Measurement] = []
    try:
        probe = Session(db=spec.db, broker="memory", width=1, providers=spec.providers)
        try:
            catalog = probe.load(spec.catalog)
        finally:
            probe.close()
        models = list(spec.models)
        env["pairs"] = len(catalog.scenarios) * len(models)
        plan = _plan(spec, len(models))
        echo(f"bench: {Path(spec.catalog).name}: {len(catalog.scenarios)} scenarios × {len(models)} model(s) = "
             f"{env['pairs']} pairs; {len(plan)} cells × {spec.repeat} repeats; broker "
             f"{_broker_label(spec.broker)}; results in {out}")
        sim_threads = (lambda: [sim._thread.native_id]) if sim is not None and sim._thread else None
        warmup = _warmup_catalog(catalog)
        _warm_up(spec, warmup, models, "memory", queue, Session,
                 [s for s in ("sequential", "fanout") if s in spec.strategies or s == "sequential"])
        for width, strategies in _by_width(plan):
            workers = None
            if spec.broker != "memory" and any(s in QUEUED for s in strategies):
                workers = WorkerGroup(broker_url=spec.broker, db_url=spec.db, threads=width,
                                      processes=spec.processes, queue=queue, log=out / "workers.log",
                                      env=worker_env, providers=spec.providers).start()
                _warm_up(spec, warmup, models, spec.broker, queue, Session, ["fanout"] * spec.processes)
            try:
                for strategy in strategies:
                    for repeat in range(1, spec.repeat + 1):
                        queued = strategy in QUEUED
                        meter = ProcessMeter(workers.pids if (queued and workers) else None,
                                             exclude_threads=sim_threads)
                        m = _run_cell(spec, catalog, models, strategy, width, repeat, queue, meter, sim,
                                      Session, store)
                        m.cores = min(env["cores"], spec.processes if (queued and workers) else 1)
                        measurements.append(m)
                        echo(f"  {strategy:<10} width {width:>3}  repeat {repeat}: {m.wall_s:7.2f} s  "
                             f"{m.status}  errors {m.error_rate:.1%}  ({m.run_id})")
            finally:
                if workers is not None:
                    workers.stop()
    finally:
        if sim is not None:
            sim.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        configure()
    pair_latency = _pair_latency(spec, measurements)
    cells = summarize(measurements, models=len(spec.models), pair_latency=pair_latency,
                      processes=spec.processes if spec.broker != "memory" else 1)
    env["pair_latency_s"] = pair_latency
    env["load_average_at_end"] = _load_average()
    return BenchResult(spec, env, measurements, cells, recommend(cells, cores=env["cores"]))


def _warmup_catalog(catalog):
    """The catalog's first scenario alone: one untimed run through each path loads the code, opens the
    connections and starts the clients, so the first measured cell is not also the first run ever."""
    from evaljobs.catalog import catalog_from_body

    body = dict(catalog.body)
    body["scenarios"] = body["scenarios"][:1]
    body["name"] = f"{catalog.name}-warmup"
    return catalog_from_body(body, source=f"<warm-up of {catalog.name}>")


def _warm_up(spec: BenchSpec, catalog, models: list[str], broker: str, queue: str, Session,
             strategies: list[str]) -> None:
    for strategy in strategies:
        session = Session(db=spec.db, broker=broker if strategy in QUEUED else "memory", width=2,
                          providers=spec.providers, queue=queue)
        try:
            info = session.submit(catalog, models, strategy=strategy)
            if strategy in QUEUED:
                session.wait(info.id, timeout=spec.cell_timeout, poll=0.5)
        finally:
            session.close()


def _plan(spec: BenchSpec, models: int) -> list[tuple[str, int]]:
    plan = []
    for strategy in spec.strategies:
        for width in strategy_widths(strategy, spec.widths, models):
            plan.append((strategy, width))
    return plan


def _by_width(plan: list[tuple[str, int]]) -> list[tuple[int, list[str]]]:
    """Cells grouped by width, so one set of worker processes serves every queued strategy at that width."""
    widths: dict[int, list[str]] = {}
    for strategy, width in plan:
        widths.setdefault(width, []).append(strategy)
    return sorted(widths.items())


def _pair_latency(spec: BenchSpec, measurements: list[Measurement]) -> float | None:
    """Provider latency of one pair: the simulated call latency × calls per pair (measured)."""
    if not spec.simulate or not measurements:
        return None
    latency = float(spec.simulate.get("latency", 0.0))
    calls = [m.requests / m.pairs for m in measurements if m.requests and m.pairs and not m.rate_limited
             and not m.errors]
    if not calls:
        return None
    return round(latency * statistics.median(calls), 6)


def _run_cell(spec: BenchSpec, catalog, models: list[str], strategy: str, width: int, repeat: int,
              queue: str, meter: ProcessMeter, sim, Session, store) -> Measurement:
    from evaljobs.pipeline import events

    session = Session(db=spec.db, broker=spec.broker if strategy in QUEUED else "memory", width=width,
                      providers=spec.providers, queue=queue)
    clock = _EventClock()
    try:
        if strategy in QUEUED:
            session.binding()  # bind events (Redis pub/sub) before anything is published
        else:
            events.bind_redis(None)  # in-process strategies publish nowhere else, as `evaljobs run` does
            events.add_listener(clock)
        before = sim.stats() if sim is not None else None
        meter.start()
        host0 = host_cpu()
        started = time.perf_counter()
        try:
            info = session.submit(catalog, models, strategy=strategy)
            clock.run_id = info.id
            if strategy in QUEUED:
                info = session.wait(info.id, timeout=spec.cell_timeout, poll=1.0, on_event=clock)
        finally:
            if strategy not in QUEUED:
                events.remove_listener(clock)
        wall = time.perf_counter() - started
        host1 = host_cpu()
        cpu, peak = meter.stop()
        host_busy = None
        if host0 is not None and host1 is not None and host1[1] > host0[1]:
            host_busy = round((host1[0] - host0[0]) / (host1[1] - host0[1]), 3)
        after = sim.stats() if sim is not None else None
        if info.report is None:
            store.cancel(info.id)
            status = "timeout"
        else:
            status = info.status
        results = store.list_results(info.id)
        retries = sum(max(0, r.attempts - 1) for r in results)
        requests = rate_limited = errors = None
        if before is not None and after is not None:
            r0, l0, e0, c0 = _sim_counts(before)
            r1, l1, e1, c1 = _sim_counts(after)
            requests, rate_limited, errors = r1 - r0, l1 - l0, e1 - e0
            retries = max(retries, requests - (c1 - c0))
        summary = (info.report or {}).get("summary", {})
        return Measurement(
            strategy=strategy, width=width, repeat=repeat, run_id=info.id, status=status,
            pairs=info.expected, wall_s=round(wall, 4), requests=requests, rate_limited=rate_limited,
            errors=errors, retries=retries, errored_pairs=sum(1 for r in results if r.status == "errored"),
            passed=int(summary.get("passed", 0)), cost=float(summary.get("cost", 0.0)), cpu_s=cpu,
            peak_rss_mb=peak, report_lag_ms=clock.lag_ms,
            first_result_s=(round(clock.first_result - started, 4) if clock.first_result is not None else None),
            host_busy=host_busy)
    finally:
        session.close()


# -- the enqueue figure --------------------------------------------------------------------------


def synthetic_catalog_text(scenarios: int, name: str = "synthetic") -> str:
    """A catalog of ``scenarios`` one-turn scenarios (``[sim: say …]``), for overhead figures."""
    lines = [f"name: {name}", "defaults: {max_turns: 1}", "scenarios:"]
    for i in range(scenarios):
        lines += [f"  - key: s{i:05d}", f'    prompt: "[sim: say answer {i}]"',
                  f"    expect: {{contains: ['answer {i}']}}"]
    return "\n".join(lines) + "\n"


def measure_enqueue(broker_url: str, db_url: str, pairs: int = 10_000, *, repeat: int = 3) -> dict[str, Any]:
    """Seconds for ``start_run`` to enqueue ``pairs`` fan-out messages (mark running, list pairs, enqueue).

    Called in this process on the real broker; the messages go to a throwaway queue that is flushed after.
    """
    from evaljobs import store
    from evaljobs.api import Session
    from evaljobs.catalog import loads_catalog

    queue = f"bench-enqueue-{secrets.token_hex(4)}"
    catalog = loads_catalog(synthetic_catalog_text(pairs, f"enqueue{pairs}"), source=f"enqueue{pairs}.yaml")
    timings = []
    session = Session(db=db_url, broker=broker_url, width=1, queue=queue)
    try:
        binding = session.binding()
        for _ in range(repeat):
            run = store.create_run(catalog, ["sim/fast"], strategy="fanout")
            started = time.perf_counter()
            binding.actors.start_run.fn(run.id)
            timings.append(time.perf_counter() - started)
            binding.broker.flush(queue)
            store.cancel(run.id)
    finally:
        session.close()
    median = statistics.median(timings)
    return {"pairs": pairs, "seconds": round(median, 4), "all_seconds": [round(t, 4) for t in timings],
            "per_second": round(pairs / median, 1), "broker": _broker_label(broker_url)}


def _median_or_none(values: Iterable[float | None], digits: int | None = None) -> float | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    value = statistics.median(present)
    return round(value, digits) if digits is not None else value


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


__all__ = ["BenchSpec", "Measurement", "Cell", "Knee", "Recommendation", "BenchResult", "BenchError",
           "parse_strategies", "parse_widths", "strategy_widths", "effective_width", "ideal_wall", "summarize",
           "find_knee", "recommend", "render_table", "render_csv", "render_markdown", "plot", "write_outputs", "load_result",
           "run_bench", "measure_enqueue", "synthetic_catalog_text", "WorkerGroup", "ProcessMeter",
           "STRATEGIES", "DEFAULT_WIDTHS"]
