"""``token_budget``: the conversation used at most this many tokens, input and output."""
from __future__ import annotations

from evaljobs.evaluation.graders.base import value_grader

GRADER = value_grader(
    "token_budget", lambda replay, budget: replay.input_tokens + replay.output_tokens <= budget,
    fault="over_token_budget", gate_rank=120)
