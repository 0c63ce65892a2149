"""``max_latency_ms``: the conversation took at most this many milliseconds."""
from __future__ import annotations

from evaljobs.evaluation.graders.base import value_grader

GRADER = value_grader("max_latency_ms", lambda replay, most: replay.duration_ms <= most, fault="too_slow",
                      gate_rank=110)
