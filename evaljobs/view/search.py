"""The run grid's regex search and its "outputs differ" filter (issue 43).

Both read the run's answers once (``store.pages.outputs``) and keep what they found while the run is
unchanged, like the substring search of :mod:`evaljobs.view.queries`. A pattern is Python's ``re``, case-
insensitive, bounded in length; one that does not compile is a 400 naming the problem.
"""
from __future__ import annotations

import re
import threading

from evaljobs.store import pages as store_pages

#: The longest pattern taken (a grid filter, not a program).
MAX_PATTERN = 200
_SPACE = re.compile(r"\s+")
#: A repeated group that itself repeats (``(a+)+``, ``(x*)*``, ``(a|aa){2,}``): Python's ``re`` has no time
#: limit, and such a pattern can backtrack for hours on one 20,000-character answer — a page any local
#: web page could make the browser request. Refused; a search needs none.
_NESTED = re.compile(r"\((?:[^()\\]|\\.)*(?:[+*]|\{\d*,?\d*\}|\|)(?:[^()\\]|\\.)*\)\s*(?:[+*]|\{\d*,\d*\})")
_lock = threading.Lock()
_kept: "dict[tuple, set[tuple[str, str]] | set[str]]" = {}


class BadPattern(ValueError):
    """A search pattern that does not compile (its message says why, in one line)."""


def compile_pattern(text: str) -> re.Pattern[str]:
    if len(text) > MAX_PATTERN:
        raise BadPattern(f"the pattern is {len(text)} characters: at most {MAX_PATTERN}")
    if _NESTED.search(text):
        raise BadPattern(f"q={text!r} repeats a group that repeats (like (a+)+), which can take hours to "
                         "match: write it without the nesting")
    try:
        return re.compile(text, re.IGNORECASE)
    except re.error as exc:
        raise BadPattern(f"q={text!r} is not a regular expression ({exc}): fix it or untick "
                         "'regex'") from None


def _cached(version: tuple, build):
    with _lock:
        hit = _kept.get(version)
    if hit is None:
        hit = build()
        with _lock:
            if len(_kept) >= 32:
                _kept.clear()
            _kept[version] = hit
    return hit


def regex_search(run_id: str, version: tuple, pattern: str) -> set[tuple[str, str]]:
    """Pairs whose scenario key or any epoch's answer matches ``pattern``."""
    compiled = compile_pattern(pattern)

    def build() -> set[tuple[str, str]]:
        return {(k, m) for k, m, _, out in store_pages.outputs(run_id)
                if compiled.search(k) or compiled.search(out)}

    return _cached(("regex", run_id, *version, pattern), build)


def differing(run_id: str, version: tuple) -> set[str]:
    """Scenarios whose answers are not all the same (between models, or between a pair's epochs), with
    whitespace runs made one space."""
    def build() -> set[str]:
        seen: dict[str, set[str]] = {}
        for key, _, _, out in store_pages.outputs(run_id):
            seen.setdefault(key, set()).add(_SPACE.sub(" ", out).strip())
        return {key for key, answers in seen.items() if len(answers) > 1}

    return _cached(("differ", run_id, *version), build)


__all__ = ["MAX_PATTERN", "BadPattern", "compile_pattern", "regex_search", "differing"]
