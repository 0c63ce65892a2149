"""Generic Dramatiq middleware, reusable by any Dramatiq app (never imports evaljobs).

- :mod:`middleware.context` — carry host thread-local / context-var state across every hop.
- :mod:`middleware.db` — hand a worker thread's database connection back after each message.
"""
from evaljobs_middleware.context import (ContextError,
                                         ContextMiddleware,
                                         ContextVarProvider,
                                         Provider,
                                         ThreadLocalProvider,
                                         discover_providers)
from evaljobs_middleware.db import DatabaseConnections

__all__ = [
    "ContextError",
    "ContextMiddleware",
    "ContextVarProvider",
    "DatabaseConnections",
    "Provider",
    "ThreadLocalProvider",
    "discover_providers",
]
