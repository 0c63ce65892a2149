"""A host's Dramatiq middleware for tests: records which publishing domain each evaljobs actor ran under.

Importable by worker processes (tests/ is on their PYTHONPATH). In-process it appends to
``Recorder.seen``; in a worker process it also appends JSON lines to ``$HOST_MW_RECORD``.
"""
from __future__ import annotations

import json
import os
import threading

import dramatiq
from acme_host import current_domain


class Recorder(dramatiq.Middleware):
    seen: list[tuple[str, str, str | None]] = []
    _lock = threading.Lock()

    def _record(self, hook: str, message) -> None:
        row = (hook, message.actor_name, current_domain())
        with self._lock:
            Recorder.seen.append(row)
            path = os.environ.get("HOST_MW_RECORD")
            if path:
                with open(path, "a", encoding="utf-8") as out:
                    out.write(json.dumps(row) + "\n")

    def before_process_message(self, broker, message) -> None:
        self._record("before", message)

    def after_process_message(self, broker, message, *, result=None, exception=None) -> None:
        self._record("after", message)


def not_a_middleware():
    return object()
