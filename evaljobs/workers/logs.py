"""``--log-format json``: one JSON object a line, with the run and pair a line was logged for.

Log shippers (Loki, Elasticsearch, CloudWatch, journald's JSON export) index fields, not prose: each
line is ``{"time", "level", "logger", "message", "run", "pair", "worker", "thread"}`` (plus
``"exception"`` with the traceback when there is one). ``run`` and ``pair`` come from the Dramatiq
message the thread is processing (:class:`LogContext`, a middleware that reads the actor's
arguments), so a line logged deep inside a provider call still says which pair it was for; they are
null outside a message. Messages and tracebacks go through the one redaction
(:func:`evaljobs.redact.redact_text`), like everything else evaljobs prints.
"""
from __future__ import annotations

import contextvars
import json
import logging
import os
import socket
import sys
import threading
from datetime import datetime, timezone
from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy

from evaljobs.redact import redact_text

#: (run id, pair) of the message this thread is processing.
_work: contextvars.ContextVar[tuple[str | None, str | None]] = contextvars.ContextVar(
    "evaljobs_log_work", default=(None, None))
#: Actors whose arguments start (run_id, scenario_key, model[, epoch]).
_PAIR_ACTORS = ("evaluate_scenario",)


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (``ensure_ascii=False``: one line, UTF-8)."""

    def format(self, record: logging.LogRecord) -> str:
        run, pair = _work.get()
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_text(record.getMessage()),
            "run": run,
            "pair": pair,
            "worker": _worker_id(),
            "thread": record.threadName,
        }
        if record.exc_info:
            entry["exception"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


def pair_of(actor_name: str, args: tuple | list) -> tuple[str | None, str | None]:
    """(run, pair) an actor's arguments name: the pair as ``scenario/model`` (``#epoch`` after the first)."""
    run = str(args[0]) if args else None
    if actor_name in _PAIR_ACTORS and len(args) >= 3:
        epoch = args[3] if len(args) > 3 else 0
        pair = f"{args[1]}/{args[2]}" + (f"#{epoch}" if epoch else "")
        return run, pair
    return run, None


class LogContext(dramatiq.Middleware):
    """Puts the run and pair of the message a thread processes into its log lines (see the module)."""

    def __init__(self) -> None:
        self._tokens = threading.local()

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        self._tokens.token = _work.set(pair_of(message.actor_name, message.args))

    def after_process_message(self, broker: dramatiq.Broker, message: MessageProxy, *,
                              result: Any = None, exception: BaseException | None = None) -> None:
        token = getattr(self._tokens, "token", None)
        self._tokens.token = None
        if token is not None:
            try:
                _work.reset(token)
            except ValueError:  # set in another context: fall back to "no message"
                _work.set((None, None))

    after_skip_message = after_process_message


def use_json_logs(level: int | None = None, stream: Any = None) -> None:
    """Send the root logger's lines to ``stream`` (default: ``sys.stderr`` now) as JSON, one handler.

    Replaces the root's handlers: a Dramatiq worker process's stderr is the pipe to the main process,
    and a handler inherited through ``fork`` would still write to the main process's stream.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    if level is not None:
        root.setLevel(level)
    # What Python prints itself — "Exception ignored in …" (a finalizer's error) and a thread's
    # uncaught exception — went to stderr as plain-text tracebacks between the JSON lines.
    sys.unraisablehook = _log_unraisable
    threading.excepthook = _log_thread_exception


def _log_unraisable(unraisable: Any) -> None:
    what = f"{unraisable.err_msg or 'Exception ignored in'}: {unraisable.object!r}"
    exc = unraisable.exc_value
    info = (unraisable.exc_type, exc, unraisable.exc_traceback) if exc is not None else None
    logging.getLogger("evaljobs.workers.logs").error(what, exc_info=info)


def _log_thread_exception(args: Any) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "a thread"
    logging.getLogger("evaljobs.workers.logs").error("uncaught exception in %s", name,
                                                exc_info=(args.exc_type, args.exc_value, args.exc_traceback))


def main() -> None:
    """``python -m evaljobs.workers.logs ARGS``: Dramatiq's CLI with its own lines in JSON too.

    ``evaljobs worker --log-format json`` runs this (with ``--skip-logging``) instead of ``python -m
    dramatiq``, so the main process's lines (booting, a worker process that died) are JSON like the
    worker processes' (which :mod:`evaljobs.workers.boot` sets up).
    """
    from dramatiq.cli import main as dramatiq_main

    verbose = "--verbose" in sys.argv or "-v" in sys.argv
    use_json_logs(logging.DEBUG if verbose else logging.INFO)
    sys.exit(dramatiq_main())


__all__ = ["JsonFormatter", "LogContext", "main", "pair_of", "use_json_logs"]

if __name__ == "__main__":
    main()
