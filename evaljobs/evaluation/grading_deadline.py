"""The pair's deadline inside grading: every grader that could run long checks it as it goes.

Why cooperative checks, not a watchdog: a grader is pure Python running on the pair's own
thread (the in-process broker's threads, a Redis worker's). A thread cannot be stopped from
outside — a timeout on a helper thread returns control to the caller but leaves the loop
spinning and holding the interpreter lock, and Dramatiq's time limit is an asynchronous
exception that arrives only on a Redis worker, 30 s late. A child process per grading would
stop anything, but costs a fork and a pickled answer per pair for checks that take
microseconds. So the graders are first made linear (or banded: a levenshtein threshold needs
only a band of its width), and the loops that remain superlinear in the worst case (a band as
wide as the answer, candidate after candidate of ``contains-json``) call :func:`checkpoint`
every few hundred steps: past the deadline it raises :class:`GradingTimeout`, which
:func:`evaljobs.evaluation.evaluate.evaluate` records as the pair ``errored``, ``timed out
after LIMIT s (ELAPSED s elapsed; grading: …)`` — the same wall and wording as a regex cut at
the deadline (:mod:`evaljobs.catalog.patterns`, whose per-thread deadline this reads).
"""
from __future__ import annotations

import time

from evaljobs.catalog import patterns
from evaljobs.errors import EvaljobsError

#: Loop steps between two looks at the clock (a look costs about as much as 20 steps of a banded row).
EVERY = 256


class GradingTimeout(EvaljobsError):
    """A grader still running at the pair's deadline: stopped, the pair errors with its time limit."""


def checkpoint(what: str, slack: float = 0.0) -> None:
    """Raise :class:`GradingTimeout` naming ``what`` once this thread's pair deadline has passed (or is
    within ``slack`` seconds: a child process given the time left as its own timeout may answer a hair
    before it, and that is the pair's time limit, not the assertion's verdict)."""
    deadline = patterns.current_deadline()
    if deadline is not None and time.monotonic() >= deadline - slack:
        raise GradingTimeout(f"{what} was still running at the pair's deadline")


def remaining(default: float) -> float:
    """Seconds left before the pair's deadline, at most ``default`` (a child process's own timeout)."""
    deadline = patterns.current_deadline()
    return default if deadline is None else max(0.001, min(default, deadline - time.monotonic()))


__all__ = ["EVERY", "GradingTimeout", "checkpoint", "remaining"]
