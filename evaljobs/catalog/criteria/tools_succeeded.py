"""``tools_succeeded``: no tool call failed. Scored only as a gate (``expect.gate``), on a conversation
that called tools."""
from __future__ import annotations

from evaljobs.catalog.criteria.base import Criterion

CRITERION = Criterion("tools_succeeded", present=lambda expect: False, gate_alone=True)
