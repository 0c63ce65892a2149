"""``response_present``: the answer is not empty. A check, never a score: an empty answer fails the
scenario with its own fault (a gate: ``run_error``, as ActiveAgent reads "the agent returned nothing")."""
from __future__ import annotations

from evaljobs.catalog.criteria.base import Criterion

CRITERION = Criterion("response_present", present=lambda expect: False, gate_alone=True)
