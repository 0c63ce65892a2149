"""Catalog regular expressions, matched so that none can hang a worker.

Why: ``expect.regex``, ``patterns``/``forbidden_patterns`` and imported assertions are
written by users (or by promptfoo / ActiveAgent suites), and Python's ``re`` backtracks
without bound: ``^(a+)+$`` against a 33-character answer runs for minutes, holding the
interpreter lock, under any time limit (issue 29). Every catalog pattern is therefore
matched here, with the ``regex`` library:

* **one engine, ``re``'s semantics**: ``regex`` in its default ``VERSION0`` mode is
  ``re``-compatible (lookarounds, backreferences, inline flags, simple case folding), which
  the importers need — promptfoo's ``not-contains`` becomes a lookahead — and which keeps
  every verdict ``re`` gave for the patterns both accept (the parity suites hold). A
  linear-time engine (RE2) refuses lookarounds and backreferences, so it would need
  ``regex`` as a fallback anyway: two engines, two sets of semantics.
* **a timeout on every match**: the least of :data:`MAX_MATCH_SECONDS` and what is left of
  the pair's deadline (:func:`deadline_scope`), on the clock (see :func:`search`); past it
  :class:`PatternTimeout` is raised and the pair ends ``errored`` with the pattern named,
  within its deadline.
* **the interpreter lock released while matching** (``concurrent=True``): a slow pattern no
  longer stalls the worker's other threads (heartbeats, other pairs).
* **one check at load time**: :func:`problem` says why a pattern cannot be used (``re``
  refuses it — the semantics catalogs are written for — or the engine does), so
  ``catalog check`` refuses it in one line naming the file, line and value.

The library is imported on the first pattern compiled (:func:`_engine`), not with this module: a
catalog with no pattern (``contains`` and the like) never needs it, and its import is about 15 ms
of a one-scenario ``evaljobs run`` (issue 42, start-up). ``error`` is the library's own class,
looked up on first use.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import re
import threading
import time
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from evaljobs.errors import EvaljobsError

if TYPE_CHECKING:
    import regex

#: The longest one pattern may run on one answer when the pair has no deadline (or more left).
MAX_MATCH_SECONDS = 5.0
#: CPU seconds a match may take inline before it is moved to a helper thread with a wall-clock bound.
INLINE_SECONDS = 0.05
#: Helper threads for the rare match that needs more (each ends by its own CPU bound).
HELPER_THREADS = 4
#: ``regex.IGNORECASE``: the library keeps ``re``'s flag values.
IGNORECASE = int(re.IGNORECASE)

_local = threading.local()


class PatternTimeout(EvaljobsError):
    """A catalog pattern ran past its bound on one answer (catastrophic backtracking)."""


@contextlib.contextmanager
def deadline_scope(deadline: float | None) -> Iterator[None]:
    """Bound every match of this thread inside the block by ``deadline`` (a ``time.monotonic()`` instant)."""
    outer = getattr(_local, "deadline", None)
    _local.deadline = deadline if outer is None else (outer if deadline is None else min(outer, deadline))
    try:
        yield
    finally:
        _local.deadline = outer


def current_deadline() -> float | None:
    """This thread's deadline (a ``time.monotonic()`` instant) set by :func:`deadline_scope`, or None: the
    pair's deadline while it is graded, which the pure-Python graders also keep
    (:mod:`evaljobs.evaluation.grading_deadline`)."""
    return getattr(_local, "deadline", None)


def _timeout() -> float:
    deadline = getattr(_local, "deadline", None)
    if deadline is None:
        return MAX_MATCH_SECONDS
    return max(0.001, min(MAX_MATCH_SECONDS, deadline - time.monotonic()))


def _engine() -> ModuleType:
    """The ``regex`` library, imported on the first pattern compiled (see the module's docstring)."""
    import regex  # noqa: PLC0415 - a third-party library only catalogs with patterns need

    return regex


def __getattr__(name: str) -> Any:
    """``error``: what the engine raises for a pattern it cannot compile (not a subclass of ``re.error``)."""
    if name == "error":
        return _engine().error
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.lru_cache(maxsize=2048)
def _compiled(pattern: str, flags: int) -> regex.Pattern[str]:
    return _engine().compile(pattern, flags)


def problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used (one phrase), or None when it compiles in ``re`` and the engine."""
    try:
        with warnings.catch_warnings():
            # re warns (FutureWarning) where other engines read a set differently — "[[:alpha:]]",
            # "[a&&b]", "[a--b]": ``regex`` does, so the verdict would change; refused by name.
            warnings.simplefilter("error", FutureWarning)
            re.purge()  # a cached pattern would not warn again
            re.compile(pattern)
    except FutureWarning as exc:
        return (f"is ambiguous ({exc}): regex engines read that set differently; "
                f"escape the '[' or the doubled operator with \\")
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        return f"does not compile: {exc}"
    try:
        _compiled(pattern, 0)
    except (_engine().error, RecursionError, OverflowError, ValueError) as exc:
        return f"is refused by the regex engine: {exc}"
    return None


def search(pattern: str, text: str, flags: int = 0) -> bool:
    """Whether ``pattern`` occurs in ``text`` (``re.search`` semantics), within the time bound."""
    return find(pattern, text, flags) is not None


def find(pattern: str, text: str, flags: int = 0) -> regex.Match[str] | None:
    """The first match of ``pattern`` in ``text`` (``re.search``: ``group``, ``groups`` as ``re``'s), within
    the time bound.

    Raises :class:`PatternTimeout` past the bound, and ``regex.error`` for a pattern that does not
    compile (the catalog check refuses those first).

    The library's ``timeout`` counts the process's CPU time, not the clock's: on a machine where
    the worker gets a seventh of a core, 1.5 s of CPU took 4 s. So a match runs here first with
    a small CPU budget (:data:`INLINE_SECONDS`, which every ordinary pattern stays far inside);
    one that needs more runs again on a helper thread, and the caller waits for it only until
    the wall-clock bound: past it the pair ends, while the helper's match ends by its own CPU
    bound (its lock released, it stalls no other thread).
    """
    seconds = _timeout()
    compiled = _compiled(pattern, flags)
    started = time.monotonic()
    try:
        return compiled.search(text, timeout=min(seconds, INLINE_SECONDS), concurrent=True)
    except TimeoutError:
        if seconds <= INLINE_SECONDS:
            raise _timed_out(pattern, text, seconds) from None
    future = _helpers().submit(compiled.search, text, timeout=seconds, concurrent=True)
    try:
        return future.result(timeout=max(0.0, seconds - (time.monotonic() - started)))
    except (TimeoutError, concurrent.futures.TimeoutError):
        raise _timed_out(pattern, text, seconds) from None


def _timed_out(pattern: str, text: str, seconds: float) -> PatternTimeout:
    shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
    return PatternTimeout(f"regex /{shown}/ ran past {seconds:.3g} s on a {len(text)}-character answer "
                          f"(catastrophic backtracking); rewrite it without nested repeats")


_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _helpers() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(HELPER_THREADS, thread_name_prefix="evaljobs-regex")
        return _pool


__all__ = ["IGNORECASE", "MAX_MATCH_SECONDS", "PatternTimeout", "current_deadline", "deadline_scope",  # noqa: F822
           "error", "find", "problem", "search"]  # error: the module's __getattr__
