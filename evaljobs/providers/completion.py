"""What one provider call answered, whatever the wire format: the parsed ``Completion``.

Every wire format parses into this one shape, and ``raw_message`` is always the
assistant message in the OpenAI chat shape, so a conversation is kept in one
shape and each wire format translates it on the way out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evaljobs.catalog.pricing import Usage


@dataclass
class RequestedToolCall:
    """A tool call the model asked for. ``arguments_error`` is set when its JSON did not parse."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    arguments_error: str | None = None


@dataclass
class Completion:
    """One parsed chat answer."""

    content: str
    tool_calls: list[RequestedToolCall]
    input_tokens: int
    output_tokens: int
    #: In the OpenAI vocabulary (stop, length, tool_calls, content_filter) whatever the wire format.
    finish_reason: str | None
    latency_ms: float
    #: The assistant message to append to the conversation (tool_calls in OpenAI shape).
    raw_message: dict[str, Any]
    #: Rate-limit response headers (``x-ratelimit-*``, ``retry-after*``), lower-cased, for a governor.
    headers: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    #: Milliseconds from sending the request to the first streamed token; None when not streamed.
    ttft_ms: float | None = None
    #: What went over the wire, kept by reference (no copy, no encoding) for a transcript that asks
    #: for it: the request body as sent, and the response body (bytes) or the streamed answer folded
    #: into one body. None for an answer from the response cache.
    request_body: Any = field(default=None, repr=False)
    response_body: Any = field(default=None, repr=False)
    #: Parts of ``input_tokens`` read from / written to the provider's prompt cache (priced apart), and of
    #: the writes those at Anthropic's 1-hour duration.
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    #: Part of ``output_tokens`` spent reasoning, where the provider says (None: not reported).
    reasoning_tokens: int | None = None
    #: OpenAI's ``system_fingerprint``: the backend configuration that answered (with ``model``, the
    #: version that answered, recorded per pair).
    system_fingerprint: str | None = None

    @property
    def usage(self) -> Usage:
        """The call's tokens as the provider bills them."""
        return Usage(self.input_tokens, self.output_tokens, self.cache_read_tokens, self.cache_write_tokens,
                     self.cache_write_1h_tokens, self.reasoning_tokens)
