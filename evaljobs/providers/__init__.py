"""Talking to model providers: one client on httpx over the native wire formats, a response cache, errors.

The simulated provider to test it against is :mod:`evaljobs.simulated`; the governor that admits
each call is :mod:`evaljobs.governor`; live tools are :mod:`evaljobs.tools`.

Names are imported on first use: a command that makes no provider call (``evaljobs show``,
``report``, …) reaches this package through :mod:`evaljobs.providers.toolcall` and must not pay
for httpx and the wire formats (start-up time).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see; at run time each name loads on first use
    from evaljobs.network import deadline
    from evaljobs.providers import attempts, batches
    from evaljobs.providers.attempts import run_totals
    from evaljobs.providers.batched import (
        BatchingClient,
        BatchRequest,
        InBatch,
        current_pair,
        encode,
        for_pair,
        request_from_json,
        request_json,
    )
    from evaljobs.providers.endpoints import base_url_for
    from evaljobs.providers.cache import ResponseCache, default_ttl, for_epoch, parse_duration
    from evaljobs.providers.calls import ProviderCalls
    from evaljobs.providers.client import ChatClient, close_clients, get_client
    from evaljobs.providers.completion import Completion, RequestedToolCall
    from evaljobs.network.errors import (RETRYABLE, PermanentError, ProviderError, RateLimited,
                                           TransientError, is_retryable, parse_retry_after)
    from evaljobs.providers.preflight import (ProviderProblems, describe, problems, provider_problems,
                                              require_callable)
    from evaljobs.providers.probes import probe, probe_models
    from evaljobs.providers.toolcall import OUTPUT_CAP, ToolCall
    from evaljobs.providers.wire import batch_wires, wire_format

#: name → the module defining it (``""``: the name is a module of this package; a dotted name: a module
#: below this package, :mod:`evaljobs.network`, whose names users import from here).
_EXPORTS = {
    "deadline": "evaljobs.network.deadline",
    "attempts": "",
    "run_totals": "attempts",
    "batches": "",
    "BatchingClient": "batched",
    "BatchRequest": "batched",
    "InBatch": "batched",
    "current_pair": "batched",
    "encode": "batched",
    "for_pair": "batched",
    "request_from_json": "batched",
    "request_json": "batched",
    "base_url_for": "endpoints",
    "ResponseCache": "cache",
    "default_ttl": "cache",
    "for_epoch": "cache",
    "parse_duration": "cache",
    "ProviderCalls": "calls",
    "ChatClient": "client",
    "close_clients": "client",
    "get_client": "client",
    "Completion": "completion",
    "RequestedToolCall": "completion",
    "RETRYABLE": "evaljobs.network.errors",
    "PermanentError": "evaljobs.network.errors",
    "ProviderError": "evaljobs.network.errors",
    "RateLimited": "evaljobs.network.errors",
    "TransientError": "evaljobs.network.errors",
    "is_retryable": "evaljobs.network.errors",
    "parse_retry_after": "evaljobs.network.errors",
    "ProviderProblems": "preflight",
    "describe": "preflight",
    "probe": "probes",
    "probe_models": "probes",
    "problems": "preflight",
    "provider_problems": "preflight",
    "require_callable": "preflight",
    "OUTPUT_CAP": "toolcall",
    "ToolCall": "toolcall",
    "batch_wires": "wire",
    "wire_format": "wire",
}

__all__ = ["attempts", "run_totals",
           "batch_wires", "wire_format",
           "BatchingClient", "BatchRequest", "base_url_for", "batches", "current_pair", "encode",
           "request_from_json", "request_json", "InBatch", "for_pair", "OUTPUT_CAP", "RETRYABLE",
           "ChatClient", "Completion",
           "PermanentError", "ProviderCalls", "ProviderError", "ProviderProblems", "RateLimited",
           "RequestedToolCall", "ResponseCache", "ToolCall", "TransientError", "close_clients", "deadline",
           "default_ttl", "describe", "for_epoch", "get_client", "is_retryable", "parse_duration",
           "parse_retry_after",
           "probe", "probe_models", "problems", "provider_problems",
           "require_callable"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not module:
        return importlib.import_module(f"{__name__}.{name}")
    if module.endswith(f".{name}"):
        return importlib.import_module(module)
    return getattr(importlib.import_module(module if "." in module else f"{__name__}.{module}"), name)
