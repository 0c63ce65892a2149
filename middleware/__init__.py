"""Generic Dramatiq middleware, reusable by any Dramatiq app (never imports evaljobs).

- :mod:`middleware.context` — carry host thread-local / context-var state across every hop.
- :mod:`middleware.db` — hand a worker thread's database connection back after each message.
- :mod:`middleware.crashes` — count messages that crash their worker process; give up on them.
"""
from .context import (ContextError,
                                         ContextMiddleware,
                                         ContextVarProvider,
                                         Provider,
                                         ThreadLocalProvider,
                                         discover_providers)
from .crashes import CrashCounter
from .db import DatabaseConnections

__all__ = [
    "ContextError",
    "ContextMiddleware",
    "ContextVarProvider",
    "CrashCounter",
    "DatabaseConnections",
    "Provider",
    "ThreadLocalProvider",
    "discover_providers",
]
