"""Budgets: the governor's settings and constants, what a budget is called, and its plain values.

Imports nothing else of the governor: the stores, the permits and the facade all build on it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping, NamedTuple, Protocol

LANES = ("interactive", "bulk")
#: Seconds of requests/tokens the rpm/tpm windows count (one bucket per second).
WINDOW_SECONDS = 60
#: Sleep bounds between two attempts of one waiting caller (seconds).
POLL_MIN = 0.01
POLL_MAX = 0.1
#: Longest single sleep of a waiter; its queue place lives WAITER_TTL seconds without a new attempt.
SLEEP_CAP = 1.0
WAITER_TTL = SLEEP_CAP + 1.0
#: Longest pause a provider hint may impose at once (re-checked after it).
MAX_PAUSE = 3600.0
#: Weight of the newest observation in the latency and tokens-per-call moving averages.
EWMA_ALPHA = 0.2
#: After a 429 that showed the provider's capacity, rounds (x limit successes) the limit holds there
#: before it probes one slot above; each probe that finds the same capacity doubles it, up to the max.
HOLD_ROUNDS = 16
HOLD_ROUNDS_MAX = 256
#: Seconds an interactive call keeps its lane "in use": ``bulk_reserve`` holds slots back from the bulk
#: lane only while an interactive call is in flight or one was asked for within this window.
INTERACTIVE_RECENT = 30.0
#: Safety factor applied to the Little's-law estimate.
LITTLE_FACTOR = 0.85
DEFAULT_LATENCY = 1.0
#: A cold budget (nothing learned, no ``initial``) lets one call go first and sizes itself from the
#: rate-limit headers of its answer; after this many seconds without an answer it opens blind.
SCOUT_SECONDS = 15.0
_EPSILON = 1e-9


@dataclass(frozen=True)
class BudgetConfig:
    """How one budget behaves; ``ProviderConfig.governor`` holds the same keys (plus ``budget_key``).

    ``initial`` None (the default): a budget nothing was learned for lets one call go first and
    opens at the request limit its answer announces, else at ``ceiling``, so a run goes as wide as
    its workers after one answer (the width the user asked for is the real bound); a number
    starts there at once instead (a slow start for a provider known to be tight).
    """

    initial: int | None = None
    ceiling: int = 64
    rpm: int | None = None
    tpm: int | None = None
    bulk_reserve: float = 0.15
    lease_seconds: float = 60.0
    #: The provider sets no limit to respect (a local model server, the simulated provider without
    #: limits): calls take no permit, so the governor costs no Redis round trip and learns nothing.
    unbounded: bool = False

    def __post_init__(self) -> None:
        _check_config(self, "governor")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, *, source: str = "governor") -> "BudgetConfig":
        """Build from a providers-file mapping; ``budget_key`` is allowed and ignored (see ``budget_key()``).

        ``source`` prefixes the one-line ``ValueError`` (e.g. "providers.yaml: provider 'openai' governor").
        """
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ValueError(f"{source}: expected a mapping (initial, ceiling, rpm, tpm, bulk_reserve, "
                             f"lease_seconds, unbounded, budget_key), got {type(d).__name__}")
        names = [f.name for f in fields(cls)]
        values: dict[str, Any] = {}
        for key, value in d.items():
            if key == "budget_key":
                continue
            if key not in names:
                raise ValueError(f"{source}: unknown key {key!r} "
                                 f"(valid keys: {', '.join(names)}, budget_key)")
            values[key] = value
        config = cls.__new__(cls)
        for name in names:
            object.__setattr__(config, name, values.get(name, getattr(cls, name)))
        _check_config(config, source)
        if isinstance(config.bulk_reserve, int):
            object.__setattr__(config, "bulk_reserve", float(config.bulk_reserve))
        if isinstance(config.lease_seconds, int):
            object.__setattr__(config, "lease_seconds", float(config.lease_seconds))
        return config


def _check_config(config: BudgetConfig, source: str) -> None:
    def is_int(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    def is_number(value: Any) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)

    if config.initial is not None and (not is_int(config.initial) or config.initial < 1):
        raise ValueError(f"{source}: initial must be an integer >= 1 (or absent: start at the ceiling), "
                         f"not {config.initial!r}")
    if not is_int(config.ceiling) or config.ceiling < 1:
        raise ValueError(f"{source}: ceiling must be an integer >= 1, not {config.ceiling!r}")
    if config.initial is not None and config.initial > config.ceiling:
        raise ValueError(f"{source}: initial ({config.initial}) must not exceed ceiling ({config.ceiling})")
    for name in ("rpm", "tpm"):
        value = getattr(config, name)
        if value is not None and (not is_int(value) or value < 1):
            raise ValueError(f"{source}: {name} must be an integer >= 1 (per minute) or absent, "
                             f"not {value!r}")
    if not is_number(config.bulk_reserve) or not 0 <= config.bulk_reserve < 1:
        raise ValueError(f"{source}: bulk_reserve must be a fraction in [0, 1), not {config.bulk_reserve!r}")
    if not is_number(config.lease_seconds) or config.lease_seconds <= 0:
        raise ValueError(f"{source}: lease_seconds must be a number > 0, not {config.lease_seconds!r}")
    if not isinstance(config.unbounded, bool):
        raise ValueError(f"{source}: unbounded must be true or false, not {config.unbounded!r}")
    if config.unbounded and (config.rpm or config.tpm):
        raise ValueError(f"{source}: unbounded means no limit to respect; remove it, or rpm/tpm")


def budget_key(provider_name: str, model: str, governor_config: Mapping[str, Any] | None = None) -> str:
    """The budget a call to ``provider_name/model`` counts against.

    ``budget_key`` absent or ``model``: one budget per deployment (``provider:model``);
    ``account``: one budget for every model of the provider entry (``provider:*``);
    any other string: that budget, so several provider entries can share one key.
    """
    mode = (governor_config or {}).get("budget_key")
    if mode is None or mode == "model":
        return f"{provider_name}:{model}"
    if mode == "account":
        return f"{provider_name}:*"
    if not isinstance(mode, str) or not mode.strip():
        raise ValueError(f"provider {provider_name!r} governor: budget_key must be 'model', 'account' or a "
                         f"budget name, not {mode!r}")
    return mode


class Learned(NamedTuple):
    """What a budget learned from the provider's 429s, kept across runs (Redis, and the database).

    ``limit``: the concurrency to start at; ``hold``: the capacity a 429 showed (0: none seen);
    ``ssthresh``: where slow start stops; ``plateau``: rounds the limit holds at ``hold``.
    """

    limit: int
    ssthresh: int
    hold: int = 0
    plateau: int = HOLD_ROUNDS
    #: A cold start (never kept): one call goes first, and its answer's rate-limit headers size the
    #: budget (``limit`` is then where it opens when the answer announces nothing).
    scout: bool = False

    def bounded(self, ceiling: int) -> "Learned":
        """The same, no wider than ``ceiling`` (the configuration may have changed since)."""
        return Learned(max(1, min(self.limit, ceiling)), max(1, min(self.ssthresh, ceiling)),
                       min(self.hold, ceiling), self.plateau)


class LearnedStore(Protocol):
    """Where a governor keeps what it learned beyond Redis (the embedded database): two calls.

    Both are best effort: an error is logged by the governor and never fails a provider call.
    """

    def load(self, budget: str) -> Learned | None:
        """What ``budget`` learned in an earlier run, or None."""

    def save(self, budget: str, learned: Learned) -> None:
        """Keep ``learned`` for ``budget`` (replacing what was there)."""


def start_of(config: BudgetConfig, learned: Learned | None) -> Learned:
    """Where a budget with no state yet starts: what it learned, else ``initial``, else the ceiling —
    after a scout (one call first, whose answer may announce the provider's limit) in that last case."""
    if learned is not None:
        return learned.bounded(config.ceiling)
    limit = config.initial if config.initial is not None else config.ceiling
    return Learned(min(limit, config.ceiling), config.ceiling, scout=config.initial is None)


def announced_limit(headers: Mapping[str, str] | None) -> int:
    """The request limit a response announces (``x-ratelimit-limit-requests``; the Anthropic wire format
    maps ``anthropic-ratelimit-requests-limit`` to it), 0 when it announces none.

    OpenAI's is requests per minute, Anthropic's the requests of its window: either way the provider
    refuses more than that many requests inside one window, so no more than that many may be in
    flight at once — the budget's width never exceeds it.
    """
    if not headers:
        return 0
    for name, value in headers.items():
        if str(name).lower() == "x-ratelimit-limit-requests":
            try:
                number = float(str(value).strip())
            except ValueError:
                return 0
            return int(number) if math.isfinite(number) and number >= 1 else 0
    return 0


class Busy(Exception):
    """No permit within ``max_wait``: re-enqueue the work ``retry_in`` seconds later instead of sleeping."""

    def __init__(self, budget: str, retry_in: float, reason: str = "limit"):
        self.budget = budget
        self.retry_in = float(retry_in)
        self.reason = reason
        super().__init__(f"governor budget {budget!r} busy ({_REASONS.get(reason, reason)}); "
                         f"retry in {self.retry_in:.2f}s")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Busy, (self.budget, self.retry_in, self.reason))


_REASONS = {
    "limit": "all slots of the lane in use",
    "paused": "paused by the provider's Retry-After",
    "rpm": "requests-per-minute window full",
    "tpm": "tokens-per-minute window full",
}


class _Answer(NamedTuple):
    """One admission attempt, from either store."""

    granted: bool
    reason: str
    retry_in: float
    now: float
    limit: int
    epoch: int
    tokens: int = 0
    #: Denied for "limit": how many slots must free before this caller's turn (its place in line).
    ahead: int = 0


class _Outcome(NamedTuple):
    rate_limited: bool
    spent: bool
    pause: float
    failed: bool
    tokens: int
    latency: float
    #: The request limit the answer announced (:func:`announced_limit`), 0: none.
    announced: int = 0


def _stats_row(budget: str, backend: str, limit: int, n_i: int, n_b: int, waiting: int, admitted: int,
               rate_limited: int, wait_sum_ms: float, wait_max_ms: float, paused: float, *,
               waiting_by_lane: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    return {
        "budget": budget,
        "backend": backend,
        "limit": limit,
        "in_flight": n_i + n_b,
        "in_flight_interactive": n_i,
        "in_flight_bulk": n_b,
        "waiting": waiting,
        "waiting_interactive": waiting_by_lane[0],
        "waiting_bulk": waiting_by_lane[1],
        "admitted": admitted,
        "rate_limited": rate_limited,
        "mean_wait_ms": wait_sum_ms / admitted if admitted else 0.0,
        "max_wait_ms": wait_max_ms,
        "paused_for": paused,
    }


_DEFAULT_CONFIG = BudgetConfig()


def _check_budget(budget: Any) -> None:
    if not isinstance(budget, str) or not budget:
        raise ValueError(f"governor budget must be a non-empty string like 'openai:gpt-4o-mini', "
                         f"not {budget!r}")
