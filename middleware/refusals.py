"""Refuse messages that can never succeed: dead-letter them at once, with the reason in the log.

Two kinds, both final by nature:

* Arguments that do not fit the actor's signature (a missing argument, an
  unknown keyword): the call raises ``TypeError`` every time, so Dramatiq's
  ``Retries`` would only delay the dead letter by its backoffs and log a
  traceback per attempt. :meth:`Refusals.before_process_message` binds the
  arguments to the signature first and refuses a message that does not fit,
  without running the actor.
* An exception the actor declares in its ``throws`` option (e.g. "unknown
  run"): ``Retries`` already dead-letters it without retrying, but Dramatiq
  logs only the exception's *type*. :meth:`Refusals.after_process_message`
  logs its message, so an operator can tell why the message was refused.

Place it after ``CurrentMessage`` in the middleware list; it keeps no state
between messages.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, NoReturn

from dramatiq.broker import Broker, MessageProxy
from dramatiq.errors import ActorNotFound
from dramatiq.logging import get_logger
from dramatiq.middleware import Middleware, SkipMessage

__all__ = ["Refusals", "dead_letter"]

#: Argument shapes remembered as fitting (a few per actor in practice; a bound against odd senders).
_MAX_SHAPES = 1024


def dead_letter(message: MessageProxy, reason: str) -> NoReturn:
    """Dead-letter ``message`` without running its actor; call it from ``before_process_message``.

    ``message.fail()`` has the broker dead-letter the message instead of acking it, and
    ``SkipMessage`` keeps the worker from running the actor (``Retries`` never sees it). The
    caller logs why first: ``reason`` is only the skip's one-line summary.
    """
    message.fail()
    raise SkipMessage(reason) from None


class Refusals(Middleware):
    """Dead-letters messages whose arguments cannot bind, and logs why declared ``throws`` refused one."""

    def __init__(self) -> None:
        self.logger = get_logger(__name__, type(self))
        self._signatures: dict[str, inspect.Signature | None] = {}
        # (actor, positional count, keyword names) of arguments that bound: ``Signature.bind`` looks at
        # nothing else, and at zero latency binding every message was a visible share of its CPU.
        self._fits: set[tuple[str, int, tuple[str, ...]]] = set()
        self._lock = threading.Lock()

    def _signature(self, broker: Broker, actor_name: str) -> inspect.Signature | None:
        with self._lock:
            if actor_name in self._signatures:
                return self._signatures[actor_name]
        try:
            signature: inspect.Signature | None = _plain(inspect.signature(broker.get_actor(actor_name).fn))
        except ActorNotFound:
            return None  # Dramatiq's consumer dead-letters messages for undefined actors itself
        except (TypeError, ValueError):
            signature = None  # a callable without an introspectable signature: nothing to check
        with self._lock:
            self._signatures[actor_name] = signature
        return signature

    def before_process_message(self, broker: Broker, message: MessageProxy) -> None:
        signature = self._signature(broker, message.actor_name)
        if signature is None:
            return
        args, kwargs = message.args, message.kwargs
        try:
            if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
                raise TypeError(f"args must be a list and kwargs a mapping, not {type(args).__name__} "
                                f"and {type(kwargs).__name__}")
            shape = (message.actor_name, len(args), tuple(kwargs))
            if shape in self._fits:
                return
            signature.bind(*args, **kwargs)
            if len(self._fits) < _MAX_SHAPES:
                self._fits.add(shape)
        except TypeError as e:
            self.logger.error(
                "Refused message %s (%s): its arguments do not fit %s%s: %s; dead-lettering without retries",
                message.message_id,
                _describe(message),
                message.actor_name,
                signature,
                e,
            )
            dead_letter(message, f"arguments do not fit {message.actor_name}{signature}")

    def after_process_message(self, broker: Broker, message: MessageProxy, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        if exception is None:
            return
        try:
            actor = broker.get_actor(message.actor_name)
        except ActorNotFound:
            return
        throws = message.options.get("throws") or actor.options.get("throws")
        if throws and isinstance(exception, throws):
            self.logger.warning(
                "Refused message %s (%s): %s; dead-lettering without retries",
                message.message_id,
                _describe(message),
                " ".join(str(exception).split()) or type(exception).__name__,
            )


def _plain(signature: inspect.Signature) -> inspect.Signature:
    """The signature without annotations, for log lines: ``evaluate(run_id, key, rl=0)``."""
    empty = inspect.Parameter.empty
    return signature.replace(parameters=[p.replace(annotation=empty) for p in signature.parameters.values()],
                             return_annotation=inspect.Signature.empty)


def _describe(message: MessageProxy, limit: int = 300) -> str:
    text = str(message)
    return text if len(text) <= limit else text[: limit - 1] + "…"
