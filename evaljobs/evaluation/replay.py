"""What an adapter returns: the record of one conversation between a model and a scenario."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Defined with live tools (a layer below), which build them; re-exported here, where replays hold them.
from evaljobs.providers import ToolCall


@dataclass
class Replay:
    """The outcome of running one scenario against one model.

    ``error`` is set when the conversation could not be completed (the adapter
    raised, the provider failed for good); graders then fault it as ``run_error``.
    """

    answer: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    duration_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    #: None when the model's price is unknown.
    cost: float | None = 0.0
    turns: int = 0
    #: Time to the first token of the first (streamed, uncached) provider call, ms.
    ttft_ms: float | None = None
    #: Sum of the uncached provider call latencies, ms (None when no call reached a provider).
    latency_ms: float | None = None
    error: str | None = None
    cached: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    #: One entry per provider call: timing, tokens, tools run after it, and (when the
    #: ``store_transcripts`` setting asks) its raw request and response
    #: (:mod:`evaljobs.evaluation.transcript`).
    timeline: list[dict[str, Any]] = field(default_factory=list)
