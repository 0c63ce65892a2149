"""The benchmark's values: what to run (:class:`BenchSpec`), what one run measured, the cells and the verdict.

Also the small rules every part shares: which widths a strategy is run at,
how many pairs it can have in flight, and the ideal wall clock.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from evaljobs.errors import UsageError

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


#: What makes the sessions a benchmark drives: :class:`evaljobs.api.Session`, or a class taking the same
#: arguments (``db``, ``broker``, ``width``, ``providers``, ``queue``). The benchmark sits below the API it
#: measures: ``evaljobs.api.benchmark`` (and a script) hands the class over, nothing here imports it.
SessionFactory = Callable[..., Any]


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
    #: Provider requests, 429s, other failed requests (5xx, 4xx, timeouts, resets) — the provider client's
    #: own attempt log of the run's pairs, so what the provider saw — and calls made again.
    #: None only in a ``bench.json`` written before the attempt log existed.
    requests: int | None
    rate_limited: int | None
    errors: int | None
    retries: int
    errored_pairs: int
    passed: int
    #: USD; None when a price was unknown (never counted as 0).
    cost: float | None
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
        """Failed requests / requests, as the provider counted them (0.0 with no request)."""
        if self.requests is not None:
            return ((self.rate_limited or 0) + (self.errors or 0)) / self.requests if self.requests else 0.0
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
    cost: float | None
    cpu_s: float | None
    peak_rss_mb: float | None
    report_lag_ms: float | None
    ideal_s: float | None = None
    complete: bool = True
    first_result_s: float | None = None
    cores: int | None = None
    host_busy: float | None = None
    #: Provider requests (median of the repeats); None for a ``bench.json`` from before the attempt log.
    requests: float | None = None

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


def broker_label(url: str) -> str:
    """``memory``, ``redis``… for a broker URL (without its address)."""
    return "memory" if url == "memory" else url.split("://", 1)[0]


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None
