"""Return a worker thread's database connection after every message.

Why: a worker thread that keeps its connection between messages holds one
connection per thread for the life of the worker, so ``--width`` would be
capped by the database's connection limit. Closing (or handing back to a
pool) after each message keeps connections proportional to the work in
progress, not to the number of threads.
"""
from __future__ import annotations

from typing import Callable

import dramatiq
from dramatiq.logging import get_logger


class DatabaseConnections(dramatiq.Middleware):
    """Call ``release`` after each processed or skipped message, success or failure.

    Parameters:
      release: closes the current thread's connection or returns it to its pool
        (for peewee: ``db.close`` guarded by ``db.is_closed()``).
    """

    def __init__(self, release: Callable[[], None]) -> None:
        self.logger = get_logger(__name__, type(self))
        self.release = release

    def _release(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - a failed close must not fail the message
            self.logger.warning("Could not release the database connection.", exc_info=True)

    def after_process_message(self, broker, message, *, result=None, exception=None):
        self._release()

    def after_skip_message(self, broker, message):
        self._release()

    def before_worker_thread_shutdown(self, broker, thread):
        self._release()
