"""promptfoo's ``cost`` assertion, graded with evaljobs' price of the call.

promptfoo passes ``cost`` when the provider call's cost is at most the threshold (``not-cost``: above it),
score 1 or 0, and errors when the provider gives no cost. Here the cost is the replay's: what the model's
calls cost at the providers file's prices (the presets carry the published ones; prompt-cache reads and
writes each at their own price, :mod:`evaljobs.catalog.pricing`). The judge's calls are not in it, as
promptfoo's grader calls are not in the cost it compares. An unknown price cannot be compared with a
threshold: the pair is not gradable (promptfoo errors the row alike), never passed as if it were $0.
"""
from __future__ import annotations

from typing import Any

from evaljobs.evaluation.refused import AssertionRefused
from evaljobs.evaluation.replay import Replay


def cost_check(entry: dict[str, Any], replay: Replay) -> tuple[bool, float, str]:
    """(passed, score, reason) of a ``{"kind": "cost", "max_usd": X[, "negate": true]}`` entry."""
    cost, limit = replay.cost, float(entry["max_usd"])
    if cost is None:
        raise AssertionRefused("cost: the price of the call is unknown (its model has no price in the "
                               "providers file), so it cannot be compared with the threshold")
    passed = cost > limit if entry.get("negate") else cost <= limit
    if passed:
        return True, 1.0, f"cost ${cost:.6f} {'above' if entry.get('negate') else 'within'} ${limit:g}"
    relation = "at most" if entry.get("negate") else "above"
    return False, 0.0, f"cost ${cost:.6f} is {relation} the threshold ${limit:g}"


__all__ = ["cost_check"]
