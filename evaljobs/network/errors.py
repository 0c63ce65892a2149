"""Typed provider failures, so retry policy is decided by type, not by parsing messages.

``RateLimited`` and ``TransientError`` are worth retrying (see ``RETRYABLE``);
``PermanentError`` is not: sending the same request again gets the same answer.
Every ``reason`` is a short, specific, single line that is safe to persist and
show in a report: the client that builds these errors scrubs credentials out of
it, and nothing here keeps a reference to the request (whose headers carry the key).
"""
from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from typing import Any, Mapping

from evaljobs.errors import EvaljobsError, one_line

#: Longest reason kept; the provider's own message is cut shorter by the client.
REASON_CAP = 500


class ProviderError(EvaljobsError):
    """A provider call failed. ``status`` is the HTTP status when there was a response.

    Part of the one error family (exit 1 if one ever reaches the CLI): a provider
    fault is not the user's command being wrong.
    """

    retryable: bool = False

    def __init__(self, reason: str, *, status: int | None = None):
        self.reason = one_line(reason, REASON_CAP)
        self.status = status
        super().__init__(self.reason)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only attributes would be lost by the default Exception pickling
        # (it replays ``self.args`` only); results and retries may cross processes.
        return (_rebuild, (type(self), self.reason, dict(self.__dict__)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason!r}, status={self.status!r})"


class RateLimited(ProviderError):
    """HTTP 429. ``retry_after`` is the provider's hint in seconds, when it gave one."""

    retryable = True

    def __init__(self, reason: str, *, status: int | None = 429, retry_after: float | None = None):
        super().__init__(reason, status=status)
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"RateLimited({self.reason!r}, status={self.status!r}, retry_after={self.retry_after!r})"


class TransientError(ProviderError):
    """5xx, 408, timeouts, dropped connections, truncated bodies: may succeed if sent again."""

    retryable = True


class PermanentError(ProviderError):
    """Other 4xx, malformed or unexpected JSON, oversized bodies: retrying will not help."""


#: ``except RETRYABLE`` / ``isinstance(err, RETRYABLE)`` — the errors a retry policy should retry.
RETRYABLE: tuple[type[ProviderError], ...] = (RateLimited, TransientError)


def is_retryable(error: BaseException) -> bool:
    """True for provider errors that may succeed when sent again."""
    return isinstance(error, RETRYABLE)


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` (preferred, milliseconds) or ``Retry-After``.

    ``Retry-After`` may be a number of seconds or an HTTP date. Unparseable or
    negative values give ``None`` (or 0.0 for a date already past), never an exception:
    a bad hint must not turn a retryable 429 into a crash.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        value = _number(millis)
        if value is not None:
            return value / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    value = _number(raw)
    if value is not None:
        return value
    try:
        when = parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except (TypeError, ValueError):
        return None
    if value != value or value < 0 or value == float("inf"):
        return None
    return value


def _rebuild(cls: type[ProviderError], reason: str, state: dict[str, Any]) -> ProviderError:
    error = cls.__new__(cls)
    Exception.__init__(error, reason)
    error.__dict__.update(state)
    return error
