"""The provider client's own attempt log: every HTTP request a pair's calls sent, counted by outcome.

Why here and not in the pipeline: a pair's attempts that end in a 429 are handed back to the queue and
never become a "pair attempt", so counting pairs undercounts what the provider saw (a run refused 48 of
83 requests reported 0 % errors). The one place that sees every request is the client, so it records
each one — 2xx, 429, 5xx, 4xx, timeouts, resets — into the log bound to the calling thread/task
(:func:`recording`). The pair runner binds the log of the pair it evaluates; the counts travel with the
pair across hand-backs and retries (a queued pair: in its message) and are stored with its result
(``details["provider_calls"]``), so a run's totals are read back from the store whichever process made
the calls (:func:`run_totals`).
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from evaljobs.network.errors import ProviderError, RateLimited

#: The key of a result's ``details`` holding the pair's attempt counts.
DETAILS_KEY = "provider_calls"
#: The outcome of a request the provider answered with success (2xx, read whole).
OK = "ok"

_log: ContextVar[dict[str, int] | None] = ContextVar("evaljobs_attempt_log", default=None)


@contextmanager
def recording(counts: dict[str, int]) -> Iterator[dict[str, int]]:
    """Count the requests made in this block (this thread/task) into ``counts`` (outcome -> requests)."""
    token = _log.set(counts)
    try:
        yield counts
    finally:
        _log.reset(token)


def record(outcome: str) -> None:
    """One request ended with ``outcome`` (``ok`` or an :func:`outcome_of` label); no-op when unbound."""
    counts = _log.get()
    if counts is not None:
        counts[outcome] = counts.get(outcome, 0) + 1


def outcome_of(error: ProviderError) -> str:
    """The bounded outcome label of a failed request: 429, 5xx, 4xx, timeout, network or error."""
    if isinstance(error, RateLimited) or error.status == 429:
        return "429"
    if error.status is not None:
        return "5xx" if error.status >= 500 else "4xx" if error.status >= 400 else "error"
    if error.reason.startswith("timed out"):
        return "timeout"
    return "network" if error.retryable else "error"


class Totals(NamedTuple):
    """Requests of a run as the provider saw them: all of them, the 429s, the other failures."""

    requests: int = 0
    rate_limited: int = 0
    errors: int = 0

    @property
    def failed(self) -> int:
        return self.rate_limited + self.errors

    @property
    def error_rate(self) -> float:
        """Failed requests / requests (0.0 with no request)."""
        return self.failed / self.requests if self.requests else 0.0


def totals(logs: Iterable[Mapping[str, Any]]) -> Totals:
    """The sum of several attempt logs (outcome -> requests); anything that is not a count is skipped."""
    requests = rate_limited = errors = 0
    for log in logs:
        for outcome, count in log.items():
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                continue
            requests += count
            if outcome == "429":
                rate_limited += count
            elif outcome != OK:
                errors += count
    return Totals(requests, rate_limited, errors)


def run_totals(results: Iterable[Any]) -> Totals:
    """The requests a run's results made (their ``details["provider_calls"]``); a row reused from another
    run (``--reuse``) made none in this run."""
    logs = []
    for result in results:
        if getattr(result, "reused_from", None):
            continue
        log = (getattr(result, "details", None) or {}).get(DETAILS_KEY)
        if isinstance(log, Mapping):
            logs.append(log)
    return totals(logs)


__all__ = ["DETAILS_KEY", "OK", "Totals", "outcome_of", "record", "recording", "run_totals", "totals"]
