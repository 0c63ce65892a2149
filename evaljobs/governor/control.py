"""The adaptive control, as pure functions: AIMD growth, Little's law, the rpm/tpm windows.

Both stores apply the same rules (the Redis store in Lua, the local store with these), so
these are the reference for the Lua scripts in :mod:`~evaljobs.governor.redis_store`.
"""
from __future__ import annotations

import math

from evaljobs.governor.budgets import (_EPSILON, HOLD_ROUNDS, LITTLE_FACTOR, WINDOW_SECONDS,
                                                 BudgetConfig)


def _bulk_cap(limit: int, reserve: float) -> int:
    return max(1, math.floor((1 - reserve) * limit + _EPSILON))


def _grow(limit: int, ssthresh: int, acc: int, in_flight: int, *, hold: int = 0,
          plateau: int = HOLD_ROUNDS) -> tuple[int, int]:
    """Slow start below ``ssthresh`` (+1 a success), then additive increase (+1 per ``limit`` successes).

    ``hold``: the capacity the provider showed at its last 429; at that limit the increase
    waits ``plateau`` times longer (a plateau, not a probe above it every round).
    """
    if in_flight * 2 < limit:
        return limit, acc
    if limit < ssthresh:
        return limit + 1, acc
    acc += 1
    need = limit * plateau if limit == hold else limit
    return (limit + 1, 0) if acc >= need else (limit, acc)


def _little(config: BudgetConfig, latency: float | None, tokens: float | None) -> int | None:
    """Little's law: the concurrency the rpm/tpm quota sustains at the observed latency (x 0.85)."""
    if latency is None:
        return None
    estimates = []
    if config.rpm:
        estimates.append(config.rpm / 60 * latency)
    if config.tpm and tokens:
        estimates.append(config.tpm / 60 / tokens * latency)
    if not estimates:
        return None
    return math.floor(LITTLE_FACTOR * min(estimates) + _EPSILON)


def _window(buckets: dict[int, int], sec: int) -> tuple[int, list[tuple[int, int]]]:
    for old in [b for b in buckets if b <= sec - WINDOW_SECONDS]:
        del buckets[old]
    return sum(buckets.values()), sorted(buckets.items())


def _wait_for(buckets: list[tuple[int, int]], excess: int, now: float) -> float:
    """Seconds until the oldest buckets holding ``excess`` units leave the window."""
    freed = 0
    for second, value in buckets:
        freed += value
        if freed >= excess:
            return max(0.05, second + WINDOW_SECONDS - now)
    return float(WINDOW_SECONDS)
