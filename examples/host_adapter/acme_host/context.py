"""The context provider that makes the publishing domain travel with evaljobs messages.

Registered under the entry-point group ``evaljobs.context_providers`` (see
``pyproject.toml``), so every evaljobs process that has this package installed
captures the domain when it enqueues and restores it on the worker thread
before an actor runs — and clears it afterwards.
"""
from __future__ import annotations

from evaljobs_middleware.context import ThreadLocalProvider

from .domain import DOMAIN

#: The key under which the domain travels in ``message.options["context"]`` and ``Run.context``.
NAME = "publishing_domain"


def provider() -> ThreadLocalProvider:
    return ThreadLocalProvider(NAME, DOMAIN, "name")
