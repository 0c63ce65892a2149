"""``token_budget``: the conversation may use at most this many tokens (input and output, every turn)."""
from __future__ import annotations

from evaljobs.catalog.criteria.base import POSITIVE_INT, positive_int, value_criterion

CRITERION = value_criterion(
    "token_budget", description="The conversation may use at most this many tokens.",
    schema=POSITIVE_INT, check=positive_int, label=lambda tokens: f"tokens ≤ {tokens}", always_in_body=True)
