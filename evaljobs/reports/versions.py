"""Which model version answered, and whether it changed between two runs.

Each result stores ``answered_by``: the model version the provider said answered (``model`` in the response
body, OpenAI's ``system_fingerprint`` in parentheses; several, comma-separated, when a conversation's calls
were answered by more than one). ``compare`` notes a model whose versions differ between the two runs: a
regression may be the provider's, not the catalog's or the agent's.
"""
from __future__ import annotations

from typing import Any, Iterable

from evaljobs.reports.caching import cache_note


def version_changes(changes: Iterable[Any]) -> list[tuple[str, list[str], list[str]]]:
    """(model, versions in A, versions in B) for each model whose answering versions differ, over the
    pairs of a comparison (``before``/``after`` outcomes with ``answered_by``); models with no recorded
    version on either side are left out (nothing to compare)."""
    changes = list(changes)
    found = []
    for model in dict.fromkeys(c.model for c in changes):
        sides = []
        for side in ("before", "after"):
            seen = [getattr(c, side).answered_by for c in changes if c.model == model and getattr(c, side)]
            sides.append(list(dict.fromkeys(v for text in seen if text for v in text.split(", "))))
        if sides[0] and sides[1] and set(sides[0]) != set(sides[1]):
            found.append((model, sides[0], sides[1]))
    return found


def comparison_notes(run_a: str, run_b: str, cache_a: dict[str, Any] | None, cache_b: dict[str, Any] | None,
                     versions: list[tuple[str, list[str], list[str]]]) -> list[str]:
    """The lines ``evaljobs compare`` prints under its headline: each run's prompt cache and saving, and
    each model whose answering version changed."""
    sides = ((run_a, cache_a), (run_b, cache_b))
    out = [f"{run}: {cache_note(block, lead='')}" for run, block in sides if block]
    out += [f"model version changed: {model} answered as {', '.join(was)} in {run_a}, as {', '.join(now)} "
            f"in {run_b}" for model, was, now in versions]
    return out


__all__ = ["comparison_notes", "version_changes"]
