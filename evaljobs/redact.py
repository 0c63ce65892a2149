"""One redaction for every URL evaljobs prints, logs, stores or puts in a report or an error.

Why one function: broker, governor and database URLs carry passwords
(``redis://:PASSWORD@host``, ``postgresql://user:PASSWORD@host/db``,
``?password=…``), and they reach output from many places — a command's
summary line, a status page, a worker log, a driver's exception text. Each
place redacting in its own way is how one of them forgot (issue 16: ``run``
printed the Redis password). :func:`redact` takes a URL; :func:`redact_text`
takes any text (an exception message) and redacts every URL in it.

This module imports nothing from evaljobs, so every layer may use it.
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit

MASK = "***"

# The patterns are compiled on first use (re's own cache), not at import: `evaljobs --help` imports
# this module and redacts nothing (start-up time).
# scheme://[user][:password]@  — the password part only (up to the authority's last @, so an
# unencoded @ in a password is covered); the user name stays (it says who, not how).
_USERINFO = r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/@:]*):(?P<secret>[^\s/]*)@"
# scheme://secret@ with no colon: Redis reads a lone user-info as the password (``redis://pw@host``).
_LONE = r"(?P<head>\b(?:redis|rediss|unix)://)(?P<secret>[^\s/@:]+)@"
# password=… / passwd=… in a query string or a libpq key=value string.
_PARAM = r"(?i)(?P<head>(?:[?&;\s]|^)(?:password|passwd|pass|pwd)=)(?P<secret>[^&\s;'\"]+)"


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (a URL without one comes back unchanged)."""
    return redact_text(url)


def redact_text(text: str) -> str:
    """``text`` with the password of every URL in it (and every ``password=`` value) replaced."""
    if not text:
        return text
    text = re.sub(_USERINFO, lambda m: f"{m['head']}:{MASK}@" if m["secret"] else m[0], text)
    text = re.sub(_LONE, lambda m: f"{m['head']}{MASK}@", text)
    return re.sub(_PARAM, lambda m: f"{m['head']}{MASK}", text)


def password_of(url: str) -> str | None:
    """The password ``url`` carries (for tests and checks that it never appears), or None."""
    try:
        return urlsplit(url).password
    except ValueError:
        return None


__all__ = ["redact", "redact_text", "password_of", "MASK"]
