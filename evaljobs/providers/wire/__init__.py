"""Wire formats: how a request is written and its answer read — chat, streamed and batched — one module
per provider API.

A wire format is a stateless object (see ``WireFormat``) that the HTTP clients drive: the chat client
(``evaljobs.providers.client.ChatClient``) asks it for the URL and headers, the JSON body written from
an OpenAI-shaped conversation, a JSON answer or an SSE stream read back into a ``Completion``, and the
provider's errors mapped onto ours; the batch client (``evaljobs.providers.batches.BatchClient``) asks
it where batches live, how one is submitted, what a batch's status and each result line say. What
differs between providers is asked of the format, never decided by its name
(``tests/system/test_architecture.py`` finds a comparison with a wire name outside these modules).

Adding a format:

1. one module here with a class implementing all of ``WireFormat``: subclass ``_common.WireDefaults``
   (what most formats answer alike; no batch API) or a format it resembles, as ``azure.py`` does
   ``openai.py``; ``mypy`` checks the class against the Protocol through ``wire_format``'s table;
2. its name in ``wire_format``'s table and in ``evaljobs.catalog.modelspec.WIRE_FORMATS`` (what a
   providers file may name);
3. its server side in ``evaljobs.simulated.wire.SERVER_WIRES`` (a ``ServerWire``: read a request,
   write an answer, a stream, an error), so the simulated provider speaks it;
4. a test against the capture server (``tests/providers/test_wire_formats.py``), and its batch API's against
   the simulated desk (``tests/simulated/test_sdk_batches.py``) if it has one.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Mapping, Protocol

from evaljobs.catalog.modelspec import WIRE_FORMATS
from evaljobs.providers.batch_items import BatchCall, BatchItem, BatchStatus
from evaljobs.providers.completion import Completion
from evaljobs.network.errors import ProviderError
from evaljobs.providers.wire._common import request_body
from evaljobs.providers.wire.anthropic import AnthropicWire
from evaljobs.providers.wire.azure import AzureWire
from evaljobs.providers.wire.openai import OpenAIWire


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

    # -- what the rest of evaljobs asks of a format (instead of asking its name) --------------------

    #: Why a scenario's ``seed`` is not sent ("" when the API takes one; an unknown field is a 400).
    seed_unsupported: str
    #: ``max_tokens`` of the pre-flight probe (None: leave it out; reasoning models refuse it).
    probe_max_tokens: int | None
    #: A ``base_url`` to show in the error for a provider that has none.
    example_base_url: str

    def endpoint_problem(self, base_url: str, api_version: str | None, fix: str) -> str | None:
        """What a well-formed ``base_url`` still lacks for this format (``fix``: where to mend it)."""
        ...

    # -- the batch API (driven by ``evaljobs.providers.batches.BatchClient``) -------------------------

    #: Whether the provider API has a batch API (``False``: the methods below are never called, and a
    #: run calls the provider one request at a time).
    has_batch_api: bool
    #: Whether a batch carries our key (``batch_key``); if not, ``find`` matches by the results' custom ids.
    batch_keeps_key: bool
    #: Where batches are listed (``GET``); ``{batches_path}/{id}`` is one, ``…/cancel`` cancels it.
    batches_path: str

    def batch_url(self, base_url: str, path: str, api_version: str | None) -> str: ...

    def batch_submit(self, call: BatchCall, requests: list[tuple[str, dict[str, Any]]],
                     key: str) -> dict[str, Any]: ...

    def batch_page_params(self, after: str | None) -> dict[str, Any]: ...

    def batch_key(self, raw: dict[str, Any]) -> str | None: ...

    def batch_status(self, raw: dict[str, Any]) -> BatchStatus: ...

    def batch_result_files(
        self, status: BatchStatus, url_of: Callable[[str], str]
    ) -> list[tuple[str, str]]: ...

    def batch_item(self, line: dict[str, Any]) -> BatchItem: ...


#: Each ``api:`` name's format (stateless objects, made once). Every run's chat client asks for one
#: (ChatClient), so the three modules load with this package rather than on first use.
_FORMATS: dict[str, WireFormat] = {
    "openai": OpenAIWire(),
    "anthropic": AnthropicWire(),
    "azure": AzureWire(),
}


def wire_format(name: str) -> WireFormat:
    """The wire format for an ``api:`` name; ``KeyError`` when there is none."""
    return _FORMATS[name]


def batch_wires() -> tuple[str, ...]:
    """The ``api:`` names whose provider API has a batch API (what ``--batch`` can send through)."""
    return tuple(name for name in WIRE_FORMATS if wire_format(name).has_batch_api)


__all__ = ["StreamReader", "WIRE_FORMATS", "WireFormat", "batch_wires", "request_body", "wire_format"]
