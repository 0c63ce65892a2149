"""The analysis (pure): medians per cell, the knee of each strategy and the recommended width.

These take measurements and return values, so the recommendation logic is
tested on synthetic numbers.
"""
from __future__ import annotations

import math
import statistics
from typing import Iterable, Sequence

from evaljobs.bench.model import (
    CPU_BOUND_SHARE,
    HOST_BOUND_SHARE,
    MAX_ERROR_RATE,
    STRATEGIES,
    TOLERANCE,
    Cell,
    Knee,
    Measurement,
    Recommendation,
    effective_width,
    ideal_wall,
)


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
        cells.append(
            Cell(
                strategy=strategy,
                width=width,
                repeats=len(ms),
                pairs=pairs,
                wall_s=round(wall, 4),
                wall_min_s=round(min(m.wall_s for m in use), 4),
                wall_max_s=round(max(m.wall_s for m in use), 4),
                throughput=round(pairs / wall, 3) if wall > 0 else 0.0,
                error_rate=round(statistics.median(m.error_rate for m in use), 5),
                rate_limited=_median_or_none(m.rate_limited for m in use),
                errors=_median_or_none(m.errors for m in use),
                retries=statistics.median(m.retries for m in use),
                errored_pairs=statistics.median(m.errored_pairs for m in use),
                cost=(
                    None
                    if any(m.cost is None for m in use)
                    else _median_or_none((m.cost for m in use), 6)
                ),
                cpu_s=_median_or_none((m.cpu_s for m in use), 3),
                peak_rss_mb=_median_or_none((m.peak_rss_mb for m in use), 1),
                report_lag_ms=_median_or_none((m.report_lag_ms for m in use), 1),
                first_result_s=_median_or_none((m.first_result_s for m in use), 4),
                cores=use[0].cores,
                host_busy=_median_or_none((m.host_busy for m in use), 3),
                ideal_s=(
                    round(
                        ideal_wall(pairs, effective_width(strategy, width, models, processes), pair_latency),
                        4,
                    )
                    if pair_latency is not None
                    else None
                ),
                complete=len(done) == len(ms),
                requests=_median_or_none(m.requests for m in use),
            )
        )
    order = {name: i for i, name in enumerate(STRATEGIES)}
    return sorted(cells, key=lambda c: (order.get(c.strategy, 99), c.width))


def better(cell: Cell, wider: Cell) -> bool:
    """Whether ``wider`` is really better than ``cell``, by the measured table alone.

    More than 10 % faster; beyond the repeats' spread (with two or more repeats, a wider cell whose
    slowest repeat is not faster than ``cell``'s fastest is "no better": the step is noise); and not
    bought with refusals (an error rate over 1 % and above ``cell``'s is the provider saying no).
    """
    if wider.wall_s * (1 + TOLERANCE) >= cell.wall_s:
        return False
    if max(cell.repeats, wider.repeats) >= 2 and wider.wall_max_s >= cell.wall_min_s:
        return False
    return not (wider.error_rate > MAX_ERROR_RATE and wider.error_rate > cell.error_rate)


def find_knee(cells: Sequence[Cell], *, cores: int) -> Knee:
    """The smallest width past which no width in the grid is better (:func:`better`), and why.

    The reason is read from what happens past the knee: the provider's error rate
    climbing means the provider refuses the extra width (rate-limit bound); a faster wider
    cell within the repeats' spread is noise (no better); the workers burning most of the
    machine's cores means the host is the limit (CPU bound); otherwise the run is waiting
    on provider latency — the next width in the grid barely cuts the rounds of calls
    (latency bound). Every sentence is about the cells measured, on whatever provider.
    """
    ordered = sorted((c for c in cells if c.complete), key=lambda c: c.width)
    if not ordered:
        return Knee(cells[0].strategy if cells else "", None, "no data", "no cell completed")
    strategy = ordered[0].strategy
    if len(ordered) == 1:
        why = ("its concurrency is fixed" if strategy in ("sequential", "per-model")
               else "the grid has one width")
        return Knee(
            strategy, None, "one width only", f"{strategy} ran at width {ordered[0].width} only ({why})"
        )
    for i, cell in enumerate(ordered[:-1]):
        beyond = ordered[i + 1:]
        if not any(better(cell, b) for b in beyond):
            return Knee(strategy, cell.width, *_why(cell, beyond, cores))
    last = ordered[-1]
    slower = [f"{a.width} -> {b.width} was slower ({a.wall_s:.2f} -> {b.wall_s:.2f} s)"
              for a, b in zip(ordered, ordered[1:]) if b.wall_s > a.wall_s]
    though = f"; though {', '.join(slower)}" if slower else ""
    return Knee(strategy, None, "latency bound" if last.ideal_s else "not reached",
                f"not reached up to width {last.width}: {last.wall_s:.2f} s there is more than "
                f"{TOLERANCE:.0%} faster than every narrower width, with error rate {last.error_rate:.1%}"
                f"{though}")


def _why(cell: Cell, beyond: Sequence[Cell], cores: int) -> tuple[str, str]:
    worst = max(beyond, key=lambda b: b.error_rate)
    if worst.error_rate > MAX_ERROR_RATE and worst.error_rate > cell.error_rate:
        faster = [b for b in beyond
                  if b.wall_s * (1 + TOLERANCE) < cell.wall_s and b.error_rate > MAX_ERROR_RATE]
        gain = "the wall clock does not improve"
        if faster:
            gain = (f"width {faster[0].width} was faster only while the provider refused "
                    f"{faster[0].error_rate:.1%} of its requests")
        return ("rate-limit bound",
                f"past width {cell.width} the provider refuses the extra calls: error rate "
                f"{cell.error_rate:.1%} at {cell.width} -> {worst.error_rate:.1%} at {worst.width}, "
                f"and {gain}")
    noisy = [b for b in beyond if b.wall_s * (1 + TOLERANCE) < cell.wall_s]
    if noisy:
        b = min(noisy, key=lambda c: c.wall_s)
        return ("no better",
                f"width {b.width}'s median {b.wall_s:.2f} s is within the repeats' spread of width "
                f"{cell.width} ({b.wall_min_s:.2f}-{b.wall_max_s:.2f} s vs {cell.wall_min_s:.2f}-"
                f"{cell.wall_max_s:.2f} s): no better")
    busy = [c for c in (cell, *beyond) if c.cores_busy is not None]
    if busy:
        hottest = max(busy, key=lambda c: (c.cores_busy or 0.0) / (c.cores or cores))
        usable = hottest.cores or cores
        if (hottest.cores_busy or 0.0) >= CPU_BOUND_SHARE * usable:
            return (
                "CPU bound",
                f"the workers already use {hottest.cores_busy:.2f} of the {usable} core(s) they can use at "
                f"width {hottest.width} ({hottest.cpu_s:.2f} s CPU in {hottest.wall_s:.2f} s; one Python "
                f"process runs on one core at a time): more threads only queue for the CPU",
            )
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
            f"from width {cell.width} on, CPU and errors stay low and no wider cell is {TOLERANCE:.0%} "
            f"faster: the run waits on provider calls")


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
        return Recommendation(
            None,
            None,
            None,
            f"no cell finished with an error rate of at most {MAX_ERROR_RATE:.0%}: lower the "
            f"width or raise the provider's limits",
            None,
            knees,
        )
    best = min(c.wall_s for c in eligible)
    near = [c for c in eligible if c.wall_s <= best * (1 + TOLERANCE)]
    choice = min(near, key=lambda c: (c.width, c.wall_s))
    knee = next((k for k in knees if k.strategy == choice.strategy), None)
    reason = (
        f"{choice.strategy} at width {choice.width}: {choice.wall_s:.2f} s, within {TOLERANCE:.0%} of the "
        f"best {best:.2f} s with error rate {choice.error_rate:.1%} (<= {MAX_ERROR_RATE:.0%})"
    )
    return Recommendation(choice.strategy, choice.width, choice.wall_s, reason, knee, knees)


def _median_or_none(values: Iterable[float | None], digits: int | None = None) -> float | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    value = statistics.median(present)
    return round(value, digits) if digits is not None else value

