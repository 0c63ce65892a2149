"""Talking to model providers: an OpenAI-compatible client and a simulated provider to test it against."""
from evaljobs.providers.client import ChatClient, Completion, RequestedToolCall, close_clients, get_client
from evaljobs.providers.errors import (RETRYABLE,
                                       PermanentError,
                                       ProviderError,
                                       RateLimited,
                                       TransientError,
                                       is_retryable,
                                       parse_retry_after)
from evaljobs.providers.simulated import SimulatedProvider, parse_simulate_options

__all__ = [
    "ChatClient",
    "Completion",
    "PermanentError",
    "ProviderError",
    "RETRYABLE",
    "RateLimited",
    "RequestedToolCall",
    "SimulatedProvider",
    "TransientError",
    "close_clients",
    "get_client",
    "is_retryable",
    "parse_retry_after",
    "parse_simulate_options",
]
