"""Wire formats: how a chat request is written and its answer read, one module per provider API.

A wire format is a stateless object (see ``WireFormat``) that the one HTTP client
(``evaljobs.providers.client.ChatClient``) drives: it names the URL and headers,
writes the JSON body from an OpenAI-shaped conversation, reads a JSON answer or
an SSE stream back into a ``Completion``, and maps the provider's errors onto
ours. Adding a format is one module here, its name in ``wire_format`` and in
``evaljobs.catalog.modelspec.WIRE_FORMATS`` (what a providers file may name), and a
test against the capture server.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol

from evaljobs.catalog.modelspec import WIRE_FORMATS
from evaljobs.providers.completion import Completion
from evaljobs.providers.errors import ProviderError


class StreamReader(Protocol):
    """Accumulates one SSE stream; ``feed`` says whether the event carried the first token."""

    def feed(self, event: str | None, data: str) -> bool: ...

    def result(self) -> Any: ...


class WireFormat(Protocol):
    #: The ``api:`` value in a providers file.
    name: str

    def url(self, base_url: str, model: str, api_version: str | None) -> str: ...

    def static_headers(self, api_version: str | None) -> dict[str, str]: ...

    def auth_headers(self, api_key: str) -> dict[str, str]: ...

    def body(self, model: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None,
             temperature: float | None, max_tokens: int | None, extra: dict[str, Any] | None,
             stream: bool) -> dict[str, Any]: ...

    def completion(
        self, data: Any, status: int, latency_ms: float, headers: dict[str, str]
    ) -> Completion: ...

    def error(self, status: int, headers: Mapping[str, str], payload: bytes) -> ProviderError: ...

    def limit_headers(self, headers: Mapping[str, str]) -> dict[str, str]: ...

    def stream_reader(self) -> StreamReader: ...


def wire_format(name: str) -> WireFormat:
    """The wire format for an ``api:`` name; ``KeyError`` when there is none."""
    # The formats import this package's Protocol and helpers, so they are imported on first use.
    from evaljobs.providers.wire.anthropic import AnthropicWire
    from evaljobs.providers.wire.azure import AzureWire
    from evaljobs.providers.wire.openai import OpenAIWire

    formats: dict[str, WireFormat] = {
        "openai": OpenAIWire(),
        "anthropic": AnthropicWire(),
        "azure": AzureWire(),
    }
    return formats[name]


__all__ = ["StreamReader", "WIRE_FORMATS", "WireFormat", "wire_format"]
