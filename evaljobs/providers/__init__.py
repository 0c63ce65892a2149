"""Talking to model providers: an OpenAI-compatible client and a simulated provider to test it against.

Names are imported on first use: a command that makes no provider call (``evaljobs show``,
``report``, …) reaches this package through :mod:`evaljobs.providers.toolcall` and must not pay
for httpx and the wire formats (start-up time).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "ChatClient": "client",
    "Completion": "client",
    "RequestedToolCall": "client",
    "close_clients": "client",
    "get_client": "client",
    "RETRYABLE": "errors",
    "PermanentError": "errors",
    "ProviderError": "errors",
    "RateLimited": "errors",
    "TransientError": "errors",
    "is_retryable": "errors",
    "parse_retry_after": "errors",
    "SimulatedProvider": "simulated",
    "parse_simulate_options": "simulated",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
