"""Retry policy shared by every strategy.

Rate limits are not faults: waiting for a provider's ``Retry-After`` does not
use up the retry budget meant for real (transient) faults; it has its own,
much larger, cap so a provider that never recovers still ends in ``errored``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from evaljobs.config import RUN_LIMITS, Settings, run_option
from evaljobs.config import settings as current_settings


@dataclass(frozen=True)
class RetryPolicy:
    # Defaults, variables and bounds: evaljobs.config.RUN_OPTIONS (its limits, RUN_LIMITS).
    #: Retries after a transient fault (5xx, timeout, connection reset); permanent faults never retry.
    max_retries: int = run_option("max_retries").default
    min_backoff: float = run_option("min_backoff").default
    max_backoff: float = run_option("max_backoff").default
    #: How many rate-limit waits a pair may take before it is recorded as errored.
    max_rate_limit_waits: int = run_option("max_rate_limit_waits").default
    #: Fraction of the Retry-After delay added as random jitter, so waiters do not return in a herd;
    #: kept under 10 %: a pair is due at Retry-After, not a quarter later (it became a run's tail).
    jitter: float = 0.05
    #: Per-pair time limit (seconds): a stuck evaluation ends as errored instead of holding a worker.
    time_limit: float = run_option("time_limit").default

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> "RetryPolicy":
        """The policy ``settings`` ask for (``EVALJOBS_MAX_RETRIES`` …; default: this process's)."""
        settings = settings or current_settings()
        return cls(**{option.name: getattr(settings, option.name) for option in RUN_LIMITS})

    def backoff(self, retries: int, rng: random.Random | None = None) -> float:
        """Exponential backoff with full jitter for the ``retries``-th retry (0-based)."""
        ceiling = min(self.max_backoff, self.min_backoff * (2 ** retries))
        draw = rng.random() if rng else random.random()
        return self.min_backoff + draw * max(0.0, ceiling - self.min_backoff)

    def rate_limit_delay(self, retry_after: float | None, rng: random.Random | None = None) -> float:
        """Wait at least the provider's Retry-After, plus jitter."""
        base = retry_after if retry_after is not None and retry_after > 0 else self.min_backoff
        draw = rng.random() if rng else random.random()
        return base + draw * base * self.jitter
