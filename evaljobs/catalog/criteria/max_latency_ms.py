"""``max_latency_ms``: the answer must arrive within this many milliseconds."""
from __future__ import annotations

from evaljobs.catalog.criteria.base import POSITIVE_INT, positive_int, value_criterion

CRITERION = value_criterion(
    "max_latency_ms", description="The answer must arrive within this many milliseconds.",
    schema=POSITIVE_INT, check=positive_int, label=lambda ms: f"latency ≤ {ms} ms", always_in_body=True)
