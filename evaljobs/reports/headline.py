"""The one-line verdict of a report, written honestly: ties are ties, and nothing is "best" at zero.

Shared by every report format (text, Markdown, HTML) so they never disagree.
Models are compared on pass rate as it is printed (one decimal): two models
shown at 93.9% are tied whatever their unrounded rates, and the ranking says
so with ``=`` rather than ``>``.
"""
from __future__ import annotations

from typing import Any, Callable

from evaljobs.reports._format import pct as _pct


def _shown(entry: dict[str, Any]) -> str:
    return _pct(entry["pass_rate"])


def leaders(verdict: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The models sharing the top printed pass rate."""
    if not verdict:
        return []
    top = _shown(verdict[0])
    return [v for v in verdict if _shown(v) == top]


def headline(verdict: list[dict[str, Any]], *, name: Callable[[str], str] = str,
             tail: Callable[[dict[str, Any]], str] | None = None) -> str:
    """``best: A at 80.0% (…)``, ``tie: A, B at 80.0%``, or ``no model passed any scenario``.

    ``name`` formats a model name (a code span in Markdown); ``tail`` adds the
    parenthesised detail for the single leader (passed counts, mean score).
    """
    if not verdict:
        return "no models"
    top = leaders(verdict)
    best = verdict[0]
    detail = f" ({tail(best)})" if tail else ""
    if len(verdict) == 1:
        if best["pass_rate"] == 0:
            return f"{name(best['model'])}: no scenario passed{detail}"
        return f"{name(best['model'])}: {_shown(best)}{detail}"
    if best["pass_rate"] == 0:
        return f"no model passed any scenario ({len(verdict)} models)"
    if len(top) > 1:
        names = ", ".join(name(v["model"]) for v in top)
        return f"tie: {names} at {_shown(best)}"
    return f"best: {name(best['model'])} at {_shown(best)}{detail}"


def ranking(verdict: list[dict[str, Any]]) -> str:
    """``1. A (80.0%) > 2. B (50.0%) = C (50.0%)``: ``=`` between models at the same printed rate."""
    out = ""
    previous: str | None = None
    rank = 0
    for position, entry in enumerate(verdict, start=1):
        shown = _shown(entry)
        if previous is None:
            rank = position
            out = f"{rank}. {entry['model']} ({shown})"
        elif shown == previous:
            out += f" = {entry['model']} ({shown})"
        else:
            rank = position
            out += f" > {rank}. {entry['model']} ({shown})"
        previous = shown
    return out
