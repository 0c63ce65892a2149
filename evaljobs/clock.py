"""The clocks evaljobs runs on, and what a host's frozen time (freezegun) does to them.

A host's test may freeze time around a run (``with freeze_time("2024-01-01"): ...``, ticking
or not, in the past or the future). freezegun replaces ``time.time``, ``time.monotonic`` and
``time.perf_counter`` (and ``datetime.now``) for *every* thread, but not the waits of
``threading`` (``Event.wait``, ``Condition.wait`` and so ``queue.Queue.get`` run on real time).
A run mixes both: worker threads compute a delay or a lease expiry from a frozen clock and
then wait for it on a real one, or compare an instant taken before the freeze (real
monotonic, seconds since boot) with one taken during it (frozen "monotonic": seconds since
1970). Delays then never end or end at once; a rate-limited pair used the 50 waits it is
allowed in no time ("still rate limited after 50 waits"), or a run hung.

So evaljobs keeps to one rule: **delays, leases, deadlines, timeouts and durations use the
real clock**, in every thread and process, whatever a host freezes. Two ways:

* :func:`shield_from_frozen_time` adds ``evaljobs``, ``evaljobs_middleware`` and
  ``dramatiq`` to freezegun's ignore list (``freezegun.configure(extend_ignore_list=...)``,
  freezegun's documented switch for code that needs real time): their calls to
  ``time.time()``, ``time.monotonic()`` and ``time.perf_counter()`` then return real time,
  so Dramatiq's delayed messages (``eta``), the governor's leases, Retry-After waits, per-pair
  deadlines and ``Session.wait`` timeouts stay consistent. ``Session`` and the
  ``evaljobs.testing`` pytest plugin call it; it does nothing when freezegun is not loaded.
* :func:`monotonic` and :func:`wall` read ``clock_gettime``, which freezegun never replaces:
  new code measuring or waiting should use them.

What frozen time does and does not affect: it affects the host's own code (its
``time.time()``, ``datetime.now()``, the values its context providers capture), and nothing of
evaljobs — freezegun leaves the modules on its ignore list unpatched, so a run's
``created_at``/``started_at``/``finished_at`` and the report's dates are real dates too, and a
frozen date never sorts a run among older ones.
"""
from __future__ import annotations

import sys
import threading
import time

#: Module prefixes whose time calls see real time under freezegun (see :func:`shield_from_frozen_time`).
SHIELDED = ("evaljobs", "evaljobs_middleware", "dramatiq")

# Held in a tuple, not as module attributes: freezegun replaces module attributes that *are* the real
# time functions when it starts, but never looks inside containers.
_REAL = (time.monotonic, time.time)


def monotonic() -> float:
    """Seconds on a monotonic clock no test freezes (for delays, deadlines, durations)."""
    if hasattr(time, "clock_gettime"):
        return time.clock_gettime(time.CLOCK_MONOTONIC)
    return _REAL[0]()  # pragma: no cover - Windows: the real function captured at import


def wall() -> float:
    """Real seconds since the epoch (for expiry instants shared between processes, e.g. leases)."""
    if hasattr(time, "clock_gettime"):
        return time.clock_gettime(time.CLOCK_REALTIME)
    return _REAL[1]()  # pragma: no cover - Windows


def shield_from_frozen_time() -> bool:
    """Make freezegun give evaljobs' and Dramatiq's code real time; False when freezegun is not loaded.

    Applies to every ``freeze_time`` started after the call (freezegun reads its ignore list
    when a freeze is created), so call it before the host's tests freeze anything — the pytest
    plugin does so when pytest starts. Idempotent.
    """
    freezegun_config = sys.modules.get("freezegun.config")
    if freezegun_config is None:
        return False
    freezegun_config.configure(extend_ignore_list=list(SHIELDED))
    return True


class ManualClock:
    """Monotonic seconds that move only when :meth:`advance` is called: the ``clock=`` a test passes.

    ``Pool``, ``SimulatedProvider`` and ``Progress`` take their clock as an argument; a test that
    moves this one past the instant that matters (an idle timeout, the end of an rpm window) checks
    the behaviour at its boundary without sleeping through it. freezegun cannot do this for
    evaljobs' own code, which it leaves on real time (see above). Thread-safe.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward and return the new instant."""
        if not seconds >= 0:
            raise ValueError(f"a monotonic clock does not go back ({seconds!r} s)")
        with self._lock:
            self._now += seconds
            return self._now


__all__ = ["SHIELDED", "ManualClock", "monotonic", "shield_from_frozen_time", "wall"]
