"""Return a worker thread's database connection after every message.

Why: a worker thread that keeps its connection between messages holds one
connection per thread for the life of the worker, so ``--width`` would be
capped by the database's connection limit. Closing (or handing back to a
pool) after each message keeps connections proportional to the work in
progress, not to the number of threads.

``hold`` (optional) runs before each message: a store whose connections are
cheap to keep but costly to open (SQLite runs its pragmas on every connect)
keeps one connection for the whole message instead of one per query — the
release after the message still bounds it to the work in progress.
"""
from __future__ import annotations

from typing import Callable

import dramatiq
from dramatiq.logging import get_logger


class DatabaseConnections(dramatiq.Middleware):
    """Call ``hold`` before and ``release`` after each processed or skipped message.

    Parameters:
      release: closes the current thread's connection or returns it to its pool
        (for peewee: ``db.close`` guarded by ``db.is_closed()``); runs on success and failure.
      hold: optional; tells the store that a message is in progress on this thread, so it
        may keep its connection open until ``release``.
    """

    def __init__(self, release: Callable[[], None], hold: Callable[[], None] | None = None) -> None:
        self.logger = get_logger(__name__, type(self))
        self.release = release
        self.hold = hold

    def _release(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - a failed close must not fail the message
            self.logger.warning("Could not release the database connection.", exc_info=True)

    def before_process_message(self, broker, message):
        if self.hold is not None:
            self.hold()

    def after_process_message(self, broker, message, *, result=None, exception=None):
        self._release()

    def after_skip_message(self, broker, message):
        self._release()

    def before_worker_thread_shutdown(self, broker, thread):
        self._release()
