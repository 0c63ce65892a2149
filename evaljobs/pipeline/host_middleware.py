"""A host's own Dramatiq middleware on evaljobs' brokers: ``--middleware module:Class`` and an entry-point
group.

Where they go: after all of evaljobs' middleware (see :func:`evaljobs.pipeline.broker.middleware_stack`).
Dramatiq runs ``before_*`` hooks in list order and ``after_*`` hooks in reverse order, so a
host middleware's ``before_process_message`` runs with the host context already restored by
``ContextMiddleware`` (first in the list) and the current message set, and its
``after_process_message`` / ``after_skip_message`` run before evaljobs' own after-hooks — the
context is cleared last, so the host still sees it there.

Two sources, in this order: the entry-point group ``evaljobs.middleware`` (every installed
package's, sorted by entry-point name, so every worker builds the same stack), then the
references given with ``evaljobs worker --middleware`` (``EVALJOBS_MIDDLEWARE``, comma-separated).
A reference names a ``Middleware`` subclass (called with no argument), a factory returning one,
or an instance.
"""
from __future__ import annotations

import pkgutil
import sys
from typing import Any, Iterable

import dramatiq

from evaljobs import entry_points
from evaljobs.errors import UsageError

MIDDLEWARE_GROUP = "evaljobs.middleware"


class MiddlewareError(UsageError):
    """A host middleware reference that cannot be loaded or is not a Dramatiq middleware (one line)."""


def references(text: str | None) -> list[str]:
    """``"a:B, c:D"`` → ``["a:B", "c:D"]`` (the ``EVALJOBS_MIDDLEWARE`` form)."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _instance(target: Any, what: str) -> dramatiq.Middleware:
    if isinstance(target, dramatiq.Middleware):
        return target
    if callable(target):
        try:
            made = target()
        except Exception as exc:  # noqa: BLE001 - a host constructor's failure, said in one line
            raise MiddlewareError(
                f"host middleware {what} could not be created: {type(exc).__name__}: {exc}"
            ) from None
        if isinstance(made, dramatiq.Middleware):
            return made
        target = made
    raise MiddlewareError(f"host middleware {what} is a {type(target).__name__}, not a dramatiq.Middleware "
                          "(subclass dramatiq.Middleware, or name a factory that returns one)")


def load(reference: str) -> dramatiq.Middleware:
    """The middleware named ``module:Attribute`` (one-line :class:`MiddlewareError` when it cannot be)."""
    module_name, colon, attr = reference.partition(":")
    if not colon or not module_name or not attr:
        raise MiddlewareError(f"--middleware '{reference}' is not module:Class (for example "
                              "acme_host.audit:AuditMiddleware)")
    try:
        target: Any = pkgutil.resolve_name(reference)
    except (ImportError, AttributeError, ValueError) as exc:  # ValueError: not module:name
        raise MiddlewareError(f"cannot load host middleware '{reference}': {exc}") from None
    return _instance(target, f"'{reference}'")


#: (sys.path when scanned, every installed entry point): see :func:`installed`.
_scanned: tuple[tuple[str, ...], list[entry_points.EntryPoint]] | None = None


def installed(group: str) -> list[entry_points.EntryPoint]:
    """The entry points installed distributions register under ``group``
    (:func:`evaljobs.entry_points.installed`).

    One scan of every distribution's entry points serves every group: a run looks up host
    middleware and context providers. The scan is redone when ``sys.path`` changes, so a package
    made importable later is still found.
    """
    global _scanned
    scanned = _scanned
    if scanned is None or scanned[0] != tuple(sys.path):
        scanned = _scanned = (tuple(sys.path), entry_points.installed())
    return [ep for ep in scanned[1] if ep.group == group]


def discover(group: str = MIDDLEWARE_GROUP) -> list[dramatiq.Middleware]:
    """The middleware registered under ``group``, sorted by entry-point name."""
    found = []
    for ep in sorted(installed(group), key=lambda ep: ep.name):
        try:
            target = ep.load()
        except Exception as exc:  # noqa: BLE001 - any import failure of a host package, in one line
            raise MiddlewareError(
                f"cannot load '{group}' entry point '{ep.name}' ({ep.value}): {exc}"
            ) from None
        found.append(_instance(target, f"entry point '{ep.name}' ({ep.value})"))
    return found


def host_middleware(given: Iterable[str] = ()) -> list[dramatiq.Middleware]:
    """Entry-point middleware, then ``given`` references: what goes after evaljobs' stack."""
    return discover() + [load(reference) for reference in given]
