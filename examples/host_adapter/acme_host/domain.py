"""The host's own state: the publishing domain the current thread works for.

This is ordinary host code that knows nothing about evaljobs or Dramatiq. It
is exactly the kind of state that does not survive a hop to a worker thread:
a ``threading.local`` is empty on every thread that did not set it.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class PublishingDomain(threading.local):
    """Per-thread holder of the current domain (attribute ``name``, absent when none is set)."""


#: The one holder the host (and the context provider) reads and writes.
DOMAIN = PublishingDomain()


class NoPublishingDomain(RuntimeError):
    """Code that needs a publishing domain ran on a thread that has none."""


def current_domain() -> str | None:
    return getattr(DOMAIN, "name", None)


def require_domain(what: str) -> str:
    """The current domain, or a loud error naming ``what`` needed it."""
    name = current_domain()
    if not name:
        raise NoPublishingDomain(
            f"{what} needs a publishing domain but this thread has none: start the run inside "
            "`with acme_host.publishing_domain(NAME):` (and install acme-host on every worker)"
        )
    return name


@contextmanager
def publishing_domain(name: str) -> Iterator[str]:
    """Make ``name`` the current thread's domain for the block; nesting restores the outer one."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a publishing domain is a non-empty string, not {name!r}")
    had, previous = hasattr(DOMAIN, "name"), getattr(DOMAIN, "name", None)
    DOMAIN.name = name
    try:
        yield name
    finally:
        if had:
            DOMAIN.name = previous
        else:
            del DOMAIN.name
