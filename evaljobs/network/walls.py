"""The per-pair deadline of the current thread (:func:`scope`, :func:`remaining`), apart from the network
backend that enforces it on every socket call (:mod:`evaljobs.network.deadline`).

Why a module of its own: the provider governor bounds its permit waits by the same deadline, and a
process that binds a broker builds the governor's worker context without making a call (a Redis
submitter); the backend imports httpx and httpcore (issue 42, item 3).
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator, overload

_local = threading.local()


def current() -> float | None:
    """The innermost deadline of this thread (a ``time.monotonic()`` instant), or None."""
    return getattr(_local, "deadline", None)


@overload
def remaining(default: float) -> float: ...
@overload
def remaining(default: None = None) -> float | None: ...
def remaining(default: float | None = None) -> float | None:
    """Seconds left before this thread's deadline (never below 0), capped at ``default``; ``default`` without
    one."""
    deadline = current()
    if deadline is None:
        return default
    left = max(0.0, deadline - time.monotonic())
    return left if default is None else min(left, default)


@contextlib.contextmanager
def scope(deadline: float | None) -> Iterator[float | None]:
    """Bound every network exchange of this thread by ``deadline`` (an instant; None: no bound) inside the
    block."""
    outer = current()
    effective = deadline if outer is None else (outer if deadline is None else min(outer, deadline))
    _local.deadline = effective
    try:
        yield effective
    finally:
        _local.deadline = outer


__all__ = ["current", "remaining", "scope"]
