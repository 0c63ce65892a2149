"""The local store: the same semantics as the Lua scripts, in memory for one process.

The governor's fallback while Redis is down, and its only store without a Redis URL.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from evaljobs.governor.budgets import (DEFAULT_LATENCY, EWMA_ALPHA, HOLD_ROUNDS, HOLD_ROUNDS_MAX,
                                                 INTERACTIVE_RECENT, LANES, SCOUT_SECONDS, WAITER_TTL,
                                                 BudgetConfig, Learned, _Answer, _Outcome, _stats_row)
from evaljobs.governor.control import _bulk_cap, _grow, _little, _wait_for, _window
from evaljobs.governor.permits import Permit


@dataclass
class _LocalBudget:
    limit: int
    ssthresh: int
    epoch: int = 0
    acc: int = 0
    paused_until: float = 0.0
    hold: int = 0
    plateau: int = HOLD_ROUNDS
    #: The limit the last decrease halved to (restored when its whole burst was refused).
    halved: int = 1
    #: A cold start's scout: until this time (0: none) one call goes alone; the budget then opens at
    #: ``opens_at`` unless the answer announced a request limit.
    scout_until: float = 0.0
    opens_at: int = 0
    #: The request limit the provider last announced (0: none): the width never exceeds it.
    announced: int = 0
    #: When an interactive call last asked for a permit (the lane is "in use" for INTERACTIVE_RECENT s).
    interactive_at: float = -math.inf
    lat: float | None = None
    tok: float | None = None
    admitted: int = 0
    rate_limited: int = 0
    wait_sum_ms: float = 0.0
    wait_max_ms: float = 0.0
    leases: dict[str, dict[str, float]] = field(default_factory=lambda: {lane: {} for lane in LANES})
    #: lane -> waiter id -> arrival, in arrival order (dicts keep insertion order).
    queues: dict[str, dict[str, float]] = field(default_factory=lambda: {lane: {} for lane in LANES})
    waiter_exp: dict[str, float] = field(default_factory=dict)
    req: dict[int, int] = field(default_factory=dict)
    tok_window: dict[int, int] = field(default_factory=dict)


class _LocalStore:
    """The same semantics as the Lua scripts, in memory for one process (the fallback, or no Redis)."""

    name = "local"

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self._lock = threading.Lock()
        self._budgets: dict[str, _LocalBudget] = {}

    def _budget(self, budget: str, config: BudgetConfig, start: Learned) -> _LocalBudget:
        state = self._budgets.get(budget)
        if state is None:
            state = self._budgets[budget] = _LocalBudget(limit=start.limit, ssthresh=start.ssthresh,
                                                         hold=start.hold, plateau=start.plateau)
            if start.scout:
                state.limit, state.opens_at = 1, start.limit
                state.scout_until = self.clock() + SCOUT_SECONDS
        if state.scout_until and self.clock() >= state.scout_until:  # no answer in time: open blind
            state.limit, state.scout_until = max(state.limit, state.opens_at), 0.0
        state.limit = min(state.limit, config.ceiling)
        return state

    def try_acquire(self, budget: str, lane: str, lease_id: str, config: BudgetConfig, tokens: int,
                    waited_ms: float, start: Learned) -> _Answer:
        with self._lock:
            now = self.clock()
            s = self._budget(budget, config, start)
            for held in s.leases.values():
                for lid in [lid for lid, expiry in held.items() if expiry <= now]:
                    del held[lid]
            for waiter in [w for w, expiry in s.waiter_exp.items() if expiry <= now]:
                del s.waiter_exp[waiter]
                for queue in s.queues.values():
                    queue.pop(waiter, None)
            n_i, n_b = len(s.leases["interactive"]), len(s.leases["bulk"])
            queue = s.queues[lane]

            def deny(reason: str, retry_in: float, ahead: int = 0) -> _Answer:
                queue.setdefault(lease_id, now)
                s.waiter_exp[lease_id] = now + WAITER_TTL
                return _Answer(False, reason, retry_in, now, s.limit, s.epoch, ahead=ahead)

            if lane == "interactive":
                s.interactive_at = now
            if s.paused_until > now:
                return deny("paused", s.paused_until - now)
            rank = list(queue).index(lease_id) if lease_id in queue else len(queue)
            free = s.limit - n_i - n_b
            if lane == "bulk":
                in_use = n_i > 0 or now - s.interactive_at < INTERACTIVE_RECENT
                reserve = config.bulk_reserve if in_use else 0.0
                free = min(_bulk_cap(s.limit, reserve) - n_b, free - len(s.queues["interactive"]))
            if rank >= free:
                ahead = rank - max(free, 0) + 1
                lat = s.lat if s.lat is not None else DEFAULT_LATENCY
                return deny("limit", min(60.0, max(0.05, lat * ahead / s.limit)), ahead)
            est = tokens if tokens > 0 else int(math.floor((s.tok or 0.0) + 0.5))
            sec = int(math.floor(now))
            if config.rpm:
                used, buckets = _window(s.req, sec)
                if used + 1 > config.rpm:
                    return deny("rpm", _wait_for(buckets, used + 1 - config.rpm, now))
            if config.tpm:
                used, buckets = _window(s.tok_window, sec)
                if used > 0 and used + est > config.tpm:
                    return deny("tpm", _wait_for(buckets, used + est - config.tpm, now))
            s.leases[lane][lease_id] = now + config.lease_seconds
            queue.pop(lease_id, None)
            s.waiter_exp.pop(lease_id, None)
            s.admitted += 1
            s.wait_sum_ms += waited_ms
            s.wait_max_ms = max(s.wait_max_ms, waited_ms)
            if config.rpm:
                s.req[sec] = s.req.get(sec, 0) + 1
            if config.tpm and est > 0:
                s.tok_window[sec] = s.tok_window.get(sec, 0) + est
            return _Answer(True, "ok", 0.0, now, s.limit, s.epoch, est)

    def cancel_wait(self, budget: str, lane: str, lease_id: str) -> None:
        with self._lock:
            state = self._budgets.get(budget)
            if state is not None:
                state.queues[lane].pop(lease_id, None)
                state.waiter_exp.pop(lease_id, None)

    def release(self, permit: Permit, outcome: _Outcome) -> tuple[int, Learned]:
        """Give the slot back: (slots that freed, the budget's learned state afterwards)."""
        config = permit._config
        with self._lock:
            now = self.clock()
            s = self._budget(permit.budget, config, permit._start)
            in_flight = sum(1 for held in s.leases.values() for expiry in held.values() if expiry > now)
            expiry = s.leases[permit.lane].pop(permit.lease_id, None)
            held = int(expiry is not None and expiry > now)
            others = in_flight - held  # what the provider was serving when it refused this call
            old_limit = s.limit
            if outcome.announced:
                s.announced = outcome.announced
            if s.scout_until:  # the scout's answer: open at the announced limit, else where it would have
                s.scout_until = 0.0
                if outcome.announced:
                    s.limit = min(outcome.announced, config.ceiling)
                elif not (outcome.rate_limited or outcome.spent):
                    s.limit = max(s.limit, s.opens_at)
            if outcome.rate_limited or outcome.spent:
                if outcome.rate_limited:
                    s.rate_limited += 1
                if permit._epoch == s.epoch:
                    # Halve the width in use (a limit above it was never tested), once per burst.
                    s.limit = s.halved = max(1, min(s.limit, in_flight) // 2)
                    held_at = s.hold
                    s.ssthresh, s.acc, s.epoch, s.hold = s.limit, 0, s.epoch + 1, 0
                    if outcome.rate_limited and others > s.limit:
                        s.ssthresh = s.hold = min(others, config.ceiling)
                    same = s.hold > 0 and s.hold == held_at  # a probe found the same capacity again
                    s.plateau = min(s.plateau * 2, HOLD_ROUNDS_MAX) if same else HOLD_ROUNDS
                elif outcome.rate_limited and permit._epoch == s.epoch - 1 and s.hold > 0:
                    if others == 0:
                        # Every call of the burst was refused: no capacity shown (a quota, not a
                        # concurrency cap): back to the plain halving.
                        s.hold, s.ssthresh, s.limit = 0, s.halved, max(s.limit, s.halved)
                    elif others < s.hold:
                        # A later 429 of the burst: the provider refused while serving fewer of ours;
                        # never stay above what it serves.
                        s.ssthresh = s.hold = others
                        s.limit = min(s.limit, others)
                if outcome.pause > 0:
                    s.paused_until = max(s.paused_until, now + outcome.pause)
            elif not outcome.failed:
                s.lat = outcome.latency if s.lat is None else s.lat + EWMA_ALPHA * (outcome.latency - s.lat)
                if outcome.tokens > 0:
                    s.tok = outcome.tokens if s.tok is None else s.tok + EWMA_ALPHA * (outcome.tokens - s.tok)
                s.limit, s.acc = _grow(s.limit, s.ssthresh, s.acc, in_flight, hold=s.hold, plateau=s.plateau)
                if s.limit < s.ssthresh:
                    estimate = _little(config, s.lat, s.tok)
                    if estimate is not None and estimate > s.limit:
                        s.limit = min(estimate, s.ssthresh)
                s.limit = max(1, min(s.limit, config.ceiling))
            if s.announced:
                s.limit = max(1, min(s.limit, s.announced))
            correction = outcome.tokens - permit._tokens
            if config.tpm and not outcome.rate_limited and outcome.tokens > 0 and correction:
                sec = int(math.floor(now))
                s.tok_window[sec] = s.tok_window.get(sec, 0) + correction
            return held + max(0, s.limit - old_limit), Learned(s.limit, s.ssthresh, s.hold, s.plateau)

    def renew(self, permit: Permit) -> None:
        with self._lock:
            state = self._budget(permit.budget, permit._config, permit._start)
            state.leases[permit.lane][permit.lease_id] = self.clock() + permit._config.lease_seconds

    def stats(self) -> list[dict[str, Any]]:
        with self._lock:
            now = self.clock()
            rows = []
            for budget in sorted(self._budgets):
                s = self._budgets[budget]
                n_i = sum(1 for e in s.leases["interactive"].values() if e > now)
                n_b = sum(1 for e in s.leases["bulk"].values() if e > now)
                waiting = sum(1 for e in s.waiter_exp.values() if e > now)
                w_i, w_b = (sum(1 for w in s.queues[lane] if s.waiter_exp.get(w, 0.0) > now)
                            for lane in ("interactive", "bulk"))
                rows.append(_stats_row(budget, self.name, s.limit, n_i, n_b, waiting, s.admitted,
                                       s.rate_limited, s.wait_sum_ms, s.wait_max_ms,
                                       max(0.0, s.paused_until - now), waiting_by_lane=(w_i, w_b)))
            return rows

    def close(self) -> None:
        pass
