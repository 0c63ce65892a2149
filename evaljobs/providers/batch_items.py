"""What a provider says of a batch (:class:`BatchStatus`) and of each of its requests (:class:`BatchItem`).

Shared by the batch client (:mod:`evaljobs.providers.batches`, which drives the HTTP) and the wire
formats (:mod:`evaljobs.providers.wire`, each reading its provider's own shapes into these), so it sits
below both.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from evaljobs.network.errors import ProviderError
from evaljobs.providers.completion import Completion

#: ``find``'s answer when a batch that may be the one is still processing (ask again later).
UNDECIDED = "undecided"
#: Where a batch is: ``open`` (validating, in progress, finalizing, cancelling) or ``ended``.
OPEN, ENDED = "open", "ended"
#: What a request of an ended batch came to.
SUCCEEDED, ERRORED, EXPIRED, CANCELLED = "succeeded", "errored", "expired", "cancelled"

#: How a wire format's batch code sends one request of the batch API: ``call(method, path, **httpx
#: keyword arguments)`` → the answer's JSON object (a typed ``ProviderError`` when there is none).
BatchCall = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class BatchStatus:
    """A batch as the provider reports it now."""

    id: str
    #: :data:`OPEN` or :data:`ENDED`.
    state: str
    #: The provider's own word (``in_progress``, ``completed``, ``expired``, ``ended``, …).
    provider_status: str
    total: int
    #: Requests answered so far (OpenAI counts as they finish; Anthropic only once the batch ends).
    done: int
    failed: int
    created_at: float | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


class BatchItem(NamedTuple):
    """What one request of an ended batch came to."""

    custom_id: str
    #: :data:`SUCCEEDED`, :data:`ERRORED`, :data:`EXPIRED` or :data:`CANCELLED`.
    outcome: str
    completion: Completion | None = None
    #: Why there is no completion (the provider's error in one line, ``batch_expired``, …).
    reason: str = ""
    #: For ``errored``: the typed error a chat call would have raised (retryable or not).
    error: ProviderError | None = None


def number(value: Any) -> float | None:
    """A JSON number as a float (a Unix time), else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def stamp(value: Any) -> float | None:
    """An RFC 3339 time as Unix seconds, else None."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


__all__ = ["CANCELLED", "ENDED", "ERRORED", "EXPIRED", "OPEN", "SUCCEEDED", "UNDECIDED", "BatchCall",
           "BatchItem", "BatchStatus", "number", "stamp"]
