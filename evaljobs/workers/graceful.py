"""Graceful worker shutdown when the whole process group gets SIGTERM.

``evaljobs worker`` is Dramatiq's CLI: a main process that forwards SIGTERM to
its worker processes. Dramatiq reads a *second* SIGTERM in a worker process
as "kill now" (``sys.exit`` without stopping the worker). But the usual ways
to stop a service signal the whole process group at once — systemd's default
``KillMode=control-group``, supervisord's ``stopasgroup=true`` (our
``scripts/supervisord.conf``), ``kill -TERM -PGID`` — so each worker process
gets SIGTERM twice within milliseconds: once directly and once forwarded. The
second one turned every graceful stop into an abrupt exit: in-flight pairs
were dropped mid-call and prefetched messages stayed unacked until the
heartbeat timed out (60 s by default), then ran again.

:func:`tolerate_group_sigterm` wraps the worker process's handler so a
repeat within ``window`` seconds is the same stop request; a SIGTERM after
that still kills, as before.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

logger = logging.getLogger("evaljobs.graceful")

#: Seconds within which a repeated SIGTERM counts as the same stop request.
DUPLICATE_WINDOW = 2.0


def tolerate_group_sigterm(window: float = DUPLICATE_WINDOW) -> bool:
    """Make a SIGTERM repeated within ``window`` seconds a no-op in this process.

    Call it from the main thread of a Dramatiq worker process (``evaljobs.workers.boot``
    is imported there). Returns False, changing nothing, elsewhere or when no Python
    handler is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    original = signal.getsignal(signal.SIGTERM)
    if not callable(original) or getattr(original, "evaljobs_graceful", False):
        return False
    first: list[float] = []

    def handler(signum: int, frame: Any) -> Any:
        now = time.monotonic()
        if first and now - first[0] < window:
            logger.info("SIGTERM again %.2f s after the first: the same stop request, still stopping "
                        "gracefully", now - first[0])
            return None
        if not first:
            first.append(now)
        return original(signum, frame)

    handler.evaljobs_graceful = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGTERM, handler)
    return True
