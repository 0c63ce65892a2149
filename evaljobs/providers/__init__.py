"""Talking to model providers: one client on httpx over the native wire formats, a response cache, errors.

The simulated provider to test it against is :mod:`evaljobs.simulated`; the governor that admits
each call is :mod:`evaljobs.governor`; live tools are :mod:`evaljobs.tools`.

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
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
