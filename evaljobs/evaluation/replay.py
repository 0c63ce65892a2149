"""What an adapter returns: the record of one conversation between a model and a scenario."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evaljobs.catalog.pricing import Usage

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
    #: Parts of ``input_tokens`` read from / written to the provider's prompt cache.
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: Part of ``output_tokens`` spent reasoning (None: no call reported it).
    reasoning_tokens: int | None = None
    #: None when the model's price is unknown.
    cost: float | None = 0.0
    #: What prompt caching saved on the paid calls (None: a price is unknown).
    cache_saving: float | None = 0.0
    #: The model versions the provider said answered (``model``, OpenAI's ``system_fingerprint``).
    answered_by: list[str] = field(default_factory=list)
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

    def add_usage(self, usage: Usage) -> None:
        """Count one call's tokens."""
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        if usage.reasoning_tokens is not None:
            self.reasoning_tokens = (self.reasoning_tokens or 0) + usage.reasoning_tokens

    def note_answered_by(self, model: str | None, fingerprint: str | None = None) -> None:
        """Record the model version a call's answer names (once per distinct version)."""
        if not model and not fingerprint:
            return
        version = f"{model or '?'} ({fingerprint})" if fingerprint else str(model)
        if version not in self.answered_by and len(self.answered_by) < 8:
            self.answered_by.append(version)
