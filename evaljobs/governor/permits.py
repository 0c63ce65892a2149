"""Permits: one admitted provider call, how its outcome is read, and the thread that renews leases."""
from __future__ import annotations

import logging
import math
import re
import threading
import time
import weakref
from typing import Any, Mapping, Protocol

from evaljobs.network.errors import RateLimited, parse_retry_after
from evaljobs.governor.budgets import MAX_PAUSE, BudgetConfig, Learned, _Outcome, announced_limit, start_of

log = logging.getLogger("evaljobs.governor")


class _Owner(Protocol):
    """What a permit calls back: the governor that granted it (the facade imports this module)."""

    def _release(self, permit: "Permit", outcome: _Outcome) -> None: ...

    def _renew(self, permit: "Permit") -> None: ...

    def _due(self, permit: "Permit") -> None: ...


class Permit:
    """One admitted provider call. Release it exactly once (extra releases are no-ops).

    As a context manager it releases on exit: a ``RateLimited`` escaping the
    block counts as a 429 (with its ``retry_after``), any other exception as a
    failure, a clean exit as a success timed from the grant. Call ``release()``
    inside the block to report tokens and response headers.
    """

    def __init__(self, governor: _Owner, backend: str, budget: str, lane: str, lease_id: str,
                 granted_at: float, epoch: int, tokens: int, config: BudgetConfig, waited: float,
                 start: Learned | None = None):
        self.budget = budget
        self.lane = lane
        self.lease_id = lease_id
        #: When the store granted it, in the store's clock (Redis server time, or the local clock).
        self.granted_at = granted_at
        #: Seconds this caller waited for the permit.
        self.waited = waited
        #: "redis" or "local": where the lease is held.
        self.backend = backend
        self.released = False
        self._governor = governor
        self._epoch = epoch
        self._tokens = tokens
        self._config = config
        #: Where the budget starts if its state is gone by the time this permit is released.
        self._start = start or start_of(config, None)
        self._started = time.monotonic()
        self._renew_at = self._started + config.lease_seconds / 2
        #: A release the governor deferred (:mod:`~.deferred`), until a round trip carries it.
        self._pending: _Outcome | None = None

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<Permit {self.budget!r} {self.lane} {self.lease_id[:8]} {self.backend} {state}>"

    def renew(self) -> None:
        """Extend the lease to ``lease_seconds`` from now (a long call keeps its slot).

        A lease that already expired is put back: the call is really in flight, so it is counted.
        (The renewer's call on a permit whose release was deferred sends that release instead.)
        """
        if self._pending is not None:
            self._governor._due(self)
        elif not self.released:
            self._governor._renew(self)

    def release(self, *, rate_limited: bool = False, retry_after: float | None = None, failed: bool = False,
                tokens: int = 0, latency: float | None = None,
                headers: Mapping[str, str] | None = None) -> None:
        """Give the slot back and report the outcome that tunes the budget.

        ``rate_limited``: the provider answered 429 (``retry_after`` pauses the budget);
        ``failed``: another failure (neither grows nor shrinks the limit); ``tokens``: tokens
        used; ``latency``: seconds (default: since the grant); ``headers``: rate-limit
        response headers (``x-ratelimit-*``), a spent quota counts like a 429 and an announced
        request limit (``x-ratelimit-limit-requests``) caps the budget's width.
        """
        if self.released:
            return
        self.released = True
        if latency is None:
            latency = time.monotonic() - self._started
        if rate_limited and retry_after is None and headers:
            retry_after = parse_retry_after(headers)
        spent, reset = _quota_spent(headers)
        pause = retry_after if rate_limited else None
        if spent and reset is not None:
            pause = max(pause or 0.0, reset)
        outcome = _Outcome(rate_limited=bool(rate_limited), spent=spent,
                           pause=min(max(pause or 0.0, 0.0), MAX_PAUSE), failed=bool(failed),
                           tokens=max(int(tokens or 0), 0), latency=max(float(latency), 0.0),
                           announced=announced_limit(headers))
        self._governor._release(self, outcome)

    def __enter__(self) -> "Permit":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self.released:
            return
        if isinstance(exc, RateLimited):
            self.release(rate_limited=True, retry_after=exc.retry_after)
        elif exc is not None:
            self.release(failed=True)
        else:
            self.release()


def _number(value: Any) -> float | None:
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def _duration(text: Any) -> float | None:
    """Seconds in a reset header: ``"20ms"``, ``"1s"``, ``"6m0s"``, ``"1h2m3.5s"`` or a plain number."""
    if text is None:
        return None
    text = str(text).strip()
    plain = _number(text)
    if plain is not None:
        return max(plain, 0.0)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def _quota_spent(headers: Mapping[str, str] | None) -> tuple[bool, float | None]:
    """(quota spent?, seconds until it resets) from ``x-ratelimit-remaining-*`` / ``x-ratelimit-reset-*``."""
    if not headers:
        return False, None
    lowered = {str(k).lower(): v for k, v in headers.items()}
    spent, reset = False, None
    for kind in ("requests", "tokens"):
        remaining = _number(lowered.get(f"x-ratelimit-remaining-{kind}"))
        if remaining is not None and remaining <= 0:
            spent = True
            seconds = _duration(lowered.get(f"x-ratelimit-reset-{kind}"))
            if seconds is not None:
                reset = max(reset or 0.0, seconds)
    return spent, reset


class _Renewer:
    """One daemon thread per governor renewing held permits every ``lease_seconds / 2``.

    Permits are held weakly: a permit dropped without ``release()`` stops being
    renewed and its lease expires, like a dead worker's.
    """

    def __init__(self) -> None:
        self._permits: weakref.WeakSet[Permit] = weakref.WeakSet()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, permit: Permit) -> None:
        with self._cond:
            self._permits.add(permit)
            if self._thread is None or not self._thread.is_alive():
                self._stopped = False
                self._thread = threading.Thread(target=self._run, name="evaljobs-governor-renewer",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def discard(self, permit: Permit) -> None:
        with self._cond:
            self._permits.discard(permit)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._permits.clear()
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                permits = list(self._permits)
                due = [p for p in permits if p._renew_at <= now]
                if not due:
                    later = [p._renew_at for p in permits]
                    self._cond.wait(timeout=min(later) - now if later else None)
                    continue
            for permit in due:
                try:
                    permit.renew()
                except Exception:  # noqa: BLE001 - a failed renewal must not kill the renewer
                    log.debug("governor: renewing %r failed", permit, exc_info=True)
