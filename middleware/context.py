"""Carry host thread-local / context-var state from the enqueuing thread to the actor.

Hosts keep state such as a "publishing domain" in thread-locals or context
variables around the code that enqueues. A Dramatiq worker thread does not
inherit the enqueuing thread's locals, so code running inside an actor would
silently see the wrong (or no) state. :class:`ContextMiddleware` makes that
state travel with the message:

* ``before_enqueue`` captures every :class:`Provider` into
  ``message.options[option]`` as ``{"v": {name: value}}`` (plus ``"sig"``,
  an HMAC-SHA256, when a signing key is configured). A message that already
  carries the option (a retry, a delayed message, a re-enqueue) keeps it.
* ``before_process_message`` restores the carried values on the worker thread.
* ``after_process_message`` and ``after_skip_message`` clear them again, so the
  next message on that thread never sees them.

Placement in the middleware list (verified against Dramatiq 2.2.1,
``Broker.emit_before`` / ``Broker.emit_after``): *before* hooks run in list
order, *after* hooks run in **reverse** list order. ``Callbacks``,
``Pipelines``, ``GroupCallbacks`` and ``Retries`` (``on_retry_exhausted``)
send new messages from their ``after_process_message``; those messages only
capture the context if this middleware's clear runs after them, i.e. if
ContextMiddleware sits **before** them in ``broker.middleware``. With the
default stack (AgeLimit, TimeLimit, ShutdownNotifications, Callbacks,
Pipelines, Retries) add it with::

    broker.add_middleware(ContextMiddleware(providers), before=Callbacks)

Middleware appended later (GroupCallbacks, Results, …) is then placed
correctly by construction. A misplaced instance logs a warning at worker boot.
Plain retries are safe in any position: Retries re-enqueues the same message,
whose captured option is kept as is.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import threading
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

from dramatiq.broker import Broker, MessageProxy
from dramatiq.logging import get_logger
from dramatiq.message import Message
from dramatiq.middleware import Callbacks, GroupCallbacks, Middleware, MiddlewareError, Pipelines, Retries

from .refusals import dead_letter

__all__ = [
    "ContextError",
    "ContextMiddleware",
    "ContextVarProvider",
    "Provider",
    "ThreadLocalProvider",
    "discover_providers",
]

#: Middleware that enqueue new messages from ``after_process_message`` and so
#: need the context still restored while they run.
_ENQUEUING_AFTER_HOOKS = (Callbacks, Pipelines, GroupCallbacks, Retries)


class ContextError(MiddlewareError, ValueError):
    """A context cannot be carried (not JSON-serializable, too large, bad provider).

    It derives from ``MiddlewareError`` because ``Broker.emit_before`` only
    re-raises those: any other exception in ``before_enqueue`` would be
    logged and swallowed, and the message sent without its context.
    """


@runtime_checkable
class Provider(Protocol):
    """One piece of host state that travels with messages.

    ``capture`` runs on the enqueuing thread and returns a JSON-able value
    (``None``: nothing to carry). ``restore`` runs on the worker thread before
    the actor and returns a token; ``clear(token)`` runs on the same thread
    afterwards and must put back exactly the state ``restore`` replaced.
    """

    name: str

    def capture(self) -> Any: ...

    def restore(self, value: Any) -> Any: ...

    def clear(self, token: Any) -> None: ...


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


#: Token meaning "the attribute did not exist before restore".
_ABSENT = _Absent()


class ThreadLocalProvider:
    """Carries ``getattr(local, attribute)``; a missing attribute carries nothing."""

    def __init__(self, name: str, local: threading.local, attribute: str) -> None:
        self.name = name
        self.local = local
        self.attribute = attribute

    def capture(self) -> Any:
        return getattr(self.local, self.attribute, None)

    def restore(self, value: Any) -> Any:
        previous = getattr(self.local, self.attribute, _ABSENT)
        setattr(self.local, self.attribute, value)
        return previous

    def clear(self, token: Any) -> None:
        if token is _ABSENT:
            if hasattr(self.local, self.attribute):
                delattr(self.local, self.attribute)
        else:
            setattr(self.local, self.attribute, token)

    def __repr__(self) -> str:
        return f"ThreadLocalProvider({self.name!r}, attribute={self.attribute!r})"


class ContextVarProvider:
    """Carries a ``contextvars.ContextVar``; an unset variable carries nothing.

    The variable's own default is not carried: the worker sees that default
    anyway when nothing is restored.
    """

    def __init__(self, name: str, var: contextvars.ContextVar) -> None:
        self.name = name
        self.var = var
        self.logger = get_logger(__name__, type(self))

    def capture(self) -> Any:
        return self.var.get(None)

    def restore(self, value: Any) -> contextvars.Token:
        return self.var.set(value)

    def clear(self, token: contextvars.Token) -> None:
        try:
            self.var.reset(token)
        except (ValueError, RuntimeError):
            # The token belongs to another Context (or was already used), so
            # the previous value cannot be put back here. Fall back to the
            # variable's default; a variable without one cannot be unset, and
            # None is the only value that carries no host state.
            default = _var_default(self.var)
            if default is _ABSENT:
                self.logger.warning(
                    "Context variable %r has no default and cannot be reset here; setting it to None.",
                    self.var.name,
                )
                default = None
            self.var.set(default)

    def __repr__(self) -> str:
        return f"ContextVarProvider({self.name!r}, var={self.var.name!r})"


def _var_default(var: contextvars.ContextVar) -> Any:
    """The variable's declared default, read from an empty Context (``_ABSENT`` if none)."""
    try:
        return contextvars.Context().run(var.get)
    except LookupError:
        return _ABSENT


def discover_providers(group: str, entry_points: Iterable[Any] | None = None) -> list[Provider]:
    """Load the providers registered under the entry-point ``group``.

    Each entry point resolves to a provider instance, or to a zero-argument
    factory (a class or function) returning one. Installing a package is
    enough to plug its state in; a broken registration fails loudly here,
    at start-up, rather than leaving actors to run without their state.
    ``entry_points``: the group's entry points when the caller has them already
    (an application that scans installed distributions once for several groups).
    """
    if entry_points is None:
        from importlib import metadata  # noqa: PLC0415 - callers that scanned already need not import it

        entry_points = metadata.entry_points(group=group)
    providers: list[Provider] = []
    for entry_point in entry_points:
        where = f"context provider entry point {entry_point.name!r} ({entry_point.value}) in group {group!r}"
        try:
            obj = entry_point.load()
            if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Provider)):
                obj = obj()
        except Exception as e:
            raise ContextError(
                f"{where} failed to load: {type(e).__name__}: {e}; "
                "fix or uninstall the package that registers it"
            ) from e
        if not isinstance(obj, Provider):
            raise ContextError(
                f"{where} resolved to {obj!r}, which is not a context provider "
                "(needs name, capture, restore and clear)"
            )
        providers.append(obj)
    return providers


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


class ContextMiddleware(Middleware):
    """Captures host context at enqueue, restores it around each actor, clears it after.

    Parameters:
      providers: the pieces of state to carry; names must be unique.
      option: the ``message.options`` key holding the captured context.
      signing_key: when set, contexts are signed at enqueue and a message
        whose context is unsigned, altered or re-bound is dead-lettered
        without running its actor.
      max_bytes: cap on the serialized context; contexts are meant to carry
        identifiers, not data.
      bind: ``bind(message) -> str`` ties a signed context to the message it
        was captured for (e.g. a run id from its args), so a context copied
        onto another message fails verification. It must read only what a
        re-enqueue keeps (actor name, args, kwargs), not the queue name.
    """

    def __init__(
        self,
        providers: Iterable[Provider] = (),
        *,
        option: str = "context",
        signing_key: bytes | str | None = None,
        max_bytes: int = 8192,
        bind: Callable[[Message | MessageProxy], str] | None = None,
    ) -> None:
        self.logger = get_logger(__name__, type(self))
        self.providers: dict[str, Provider] = {}
        for provider in providers:
            if not isinstance(provider, Provider):
                raise TypeError(
                    f"{provider!r} is not a context provider (needs name, capture, restore and clear)"
                )
            if not isinstance(provider.name, str) or not provider.name:
                raise ValueError(f"context provider {provider!r} needs a non-empty string name")
            if provider.name in self.providers:
                raise ValueError(f"two context providers are named {provider.name!r}; names must be unique")
            self.providers[provider.name] = provider
        if isinstance(signing_key, str):
            signing_key = signing_key.encode("utf-8")
        if signing_key is not None and not signing_key:
            raise ValueError("signing_key is empty; pass a secret or None to disable signing")
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.option = option
        self.signing_key = signing_key
        self.max_bytes = max_bytes
        self.bind = bind
        self._state = threading.local()

    # -- enqueue ---------------------------------------------------------

    def before_enqueue(self, broker: Broker, message: Message, delay: int | None) -> None:
        if self.option in message.options:
            return

        values: dict[str, Any] = {}
        for name, provider in self.providers.items():
            value = provider.capture()
            if value is None:
                continue
            try:
                # Keep the JSON round trip: it is exactly what the worker will
                # decode and verify (tuples become lists, int keys strings).
                values[name] = json.loads(json.dumps(value, allow_nan=False))
            except (TypeError, ValueError) as e:
                raise ContextError(
                    f"context provider {name!r} returned a value that is not JSON-serializable "
                    f"({type(value).__name__}): {e}"
                ) from e
        if not values:
            return
        self.attach(message, values)

    def attach(self, message: Message, values: dict[str, Any]) -> Message:
        """Give ``message`` an explicit context (signed when a key is set), e.g. one stored earlier.

        Used to re-enqueue work with the context it was first started with,
        from a thread that has none (recovery, reruns).
        """
        context: dict[str, Any] = {"v": values}
        if self.signing_key is not None:
            binding = self._binding(message, strict=True)
            assert binding is not None  # strict: a failed binding raised ContextError
            context["sig"] = self._sign(values, binding)

        size = len(_canonical(context))
        if size > self.max_bytes:
            raise ContextError(
                f"context for {message.actor_name} is {size} bytes, over the cap of {self.max_bytes} bytes "
                f"(providers: {', '.join(sorted(values))}); carry an identifier instead, or raise max_bytes"
            )
        message.options[self.option] = context
        return message

    # -- process ---------------------------------------------------------

    def before_process_message(self, broker: Broker, message: MessageProxy) -> None:
        leftover = getattr(self._state, "restored", None)
        if leftover:
            self.logger.warning("Clearing context left over from a previous message on this thread.")
            self._clear()
        self._state.restored = []

        context = message.options.get(self.option)
        if context is None:
            return

        values = self._verified_values(message, context)
        if values is None:
            dead_letter(message, f"context of message {message.message_id} rejected")

        restored = self._state.restored
        for name, value in values.items():
            provider = self.providers.get(name)
            if provider is None:
                self.logger.warning(
                    "Message %s carries context %r, which no provider on this worker restores.",
                    message.message_id,
                    name,
                )
                continue
            try:
                restored.append((provider, provider.restore(value)))
            except Exception:
                # Running the actor with part of its state would be the silent
                # failure this middleware exists to prevent.
                self.logger.error(
                    "Rejected message %s: context provider %r failed to restore; dead-lettering",
                    message.message_id,
                    name,
                    exc_info=True,
                )
                dead_letter(message, f"context provider {name!r} failed to restore")

    def after_process_message(self, broker: Broker, message: MessageProxy, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        self._clear()

    def after_skip_message(self, broker: Broker, message: MessageProxy) -> None:
        self._clear()

    def before_worker_boot(self, broker: Broker, worker: Any) -> None:
        # Once per worker, which mode it is in: an operator must be able to tell from the log
        # whether contexts arriving from the broker are authenticated.
        if self.signing_key is None:
            self.logger.info(
                "Context signing off (no signing key): carried contexts are restored unverified."
            )
        else:
            self.logger.info("Context signing on: a context without a valid signature is dead-lettered.")
        position = next((i for i, m in enumerate(broker.middleware) if m is self), None)
        if position is None:
            return
        earlier = broker.middleware[:position]
        misplaced = [type(m).__name__ for m in earlier if isinstance(m, _ENQUEUING_AFTER_HOOKS)]
        if misplaced:
            self.logger.warning(
                "ContextMiddleware sits after %s in the middleware list; after-hooks run in reverse "
                "order, so messages they send lose the context. Add it with add_middleware(..., before=%s).",
                ", ".join(misplaced),
                misplaced[0],
            )

    # -- helpers ---------------------------------------------------------

    def _clear(self) -> None:
        restored = getattr(self._state, "restored", None) or []
        self._state.restored = []
        for provider, token in reversed(restored):
            try:
                provider.clear(token)
            except Exception:
                self.logger.error("Context provider %r failed to clear.", provider.name, exc_info=True)

    def _binding(self, message: Message | MessageProxy, *, strict: bool) -> str | None:
        if self.bind is None:
            return ""
        try:
            binding = self.bind(message)
        except Exception as e:
            if strict:
                raise ContextError(
                    f"context binding failed for {message.actor_name}: {type(e).__name__}: {e}"
                ) from e
            return None
        if not isinstance(binding, str):
            if strict:
                raise ContextError(
                    f"context binding for {message.actor_name} must be a str, got {type(binding).__name__}"
                )
            return None
        return binding

    def _sign(self, values: dict[str, Any], binding: str) -> str:
        assert self.signing_key is not None
        return hmac.new(self.signing_key, _canonical({"v": values, "b": binding}), hashlib.sha256).hexdigest()

    def _verified_values(self, message: MessageProxy, context: Any) -> dict[str, Any] | None:
        """The carried values, or None (after logging why) if they must not be restored."""
        values = context.get("v") if isinstance(context, dict) else None
        if not isinstance(values, dict):
            self.logger.error(
                "Rejected message %s: context option %r is malformed; dead-lettering",
                message.message_id,
                self.option,
            )
            return None
        if self.signing_key is None:
            return values

        signature = context.get("sig")
        binding = self._binding(message, strict=False)
        valid = False
        if isinstance(signature, str) and binding is not None:
            try:
                expected = self._sign(values, binding)
            except (TypeError, ValueError):
                expected = None
            valid = expected is not None and hmac.compare_digest(expected.encode(), signature.encode("utf-8"))
        if not valid:
            self.logger.error(
                "Rejected message %s: context signature invalid (altered or forged); dead-lettering",
                message.message_id,
            )
            return None
        return values
