"""A clock the test moves by hand, for code that takes its clock as an argument.

Time-dependent behaviour (an ETA, an idle timeout, a sliding window) is checked by moving
this clock past the instant that matters instead of sleeping through it in real time: the
test is exact at the boundary and waits for nothing. (freezegun cannot do this for evaljobs'
own code: the ``evaljobs.testing`` plugin puts evaljobs on freezegun's ignore list, see
``evaljobs/clock.py``.)
"""
from __future__ import annotations

import threading


class ManualClock:
    """Seconds on a monotonic clock that moves only when :meth:`advance` is called (thread-safe)."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward and return the new instant."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock does not go back ({seconds!r} s)")
        with self._lock:
            self._now += seconds
            return self._now
