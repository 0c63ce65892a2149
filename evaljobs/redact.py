"""One redaction for every URL evaljobs prints, logs, stores or puts in a report or an error.

Why one function: broker, governor and database URLs carry passwords
(``redis://:PASSWORD@host``, ``postgresql://user:PASSWORD@host/db``,
``?password=…``), and they reach output from many places — a command's
summary line, a status page, a worker log, a driver's exception text. Each
place redacting in its own way is how one of them forgot (issue 16: ``run``
printed the Redis password). :func:`redact` takes a URL; :func:`redact_text`
takes any text (an exception message) and redacts every URL in it.

Configured secrets too (issue 29): every value read through ``config.secret`` — API keys,
``headers:`` values that came from ``${VAR}`` — the context signing key and the passwords of the
configured URLs are registered here (:func:`register_secret`), and :func:`redact_text` replaces
each of them in every form it travels in: raw, URL-encoded (``%20``/``+``), JSON-escaped, and
base64 (standard and URL-safe, at each of the three byte alignments, so the key inside
``Basic base64(user:key)`` is found too). A provider that echoes a header back in its error
body therefore stores and prints ``***``. :func:`redact_value` applies it to a whole stored
value (a result's details, its tool calls).

This module imports nothing from evaljobs, so every layer may use it.
"""
from __future__ import annotations

import base64
import json
import re
import threading
from typing import Any
from urllib.parse import quote, quote_plus, urlsplit

MASK = "***"
#: Shorter values are not registered: replacing a 3-letter "secret" everywhere would mangle text
#: and protect nothing (a key that short is guessed sooner than leaked).
MIN_SECRET_CHARS = 6
#: Shortest base64 run looked for (a shorter one matches ordinary text by chance).
_MIN_BASE64_CHARS = 8

_lock = threading.Lock()
_secrets: set[str] = set()
_forms: tuple[str, ...] = ()

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
    """``text`` with every registered secret (in each of its forms), the password of every URL in
    it and every ``password=`` value replaced."""
    if not text:
        return text
    text = scrub_secrets(text)
    if "://" not in text and "=" not in text:
        # Each pattern needs one of them (a URL's scheme, a ``password=``): a text with neither, as a
        # result's ``answered_by`` usually is, skips the three regular expressions (issue 42, item 4).
        return text
    text = re.sub(_USERINFO, lambda m: f"{m['head']}:{MASK}@" if m["secret"] else m[0], text)
    text = re.sub(_LONE, lambda m: f"{m['head']}{MASK}@", text)
    return re.sub(_PARAM, lambda m: f"{m['head']}{MASK}", text)


def register_secret(value: str | None) -> None:
    """Remember ``value`` as a secret of this process: from now on it is scrubbed everywhere."""
    global _forms
    if not value or len(value.strip()) < MIN_SECRET_CHARS or value in _secrets:
        return
    with _lock:
        _secrets.add(value)
        forms = {form for secret in _secrets for form in _forms_of(secret)}
        _forms = tuple(sorted(forms, key=len, reverse=True))  # longest first: a form inside another


def scrub_secrets(text: str) -> str:
    """``text`` with every form of every registered secret replaced by ``***`` (fast when none occurs)."""
    for form in _forms:
        if form in text:
            text = text.replace(form, MASK)
    return text


def redact_value(value: Any) -> Any:
    """``value`` (str, or dicts and lists of them) with every registered secret scrubbed from its strings."""
    if not _forms:
        return value
    if isinstance(value, str):
        return scrub_secrets(value)
    if isinstance(value, dict):
        return {key: redact_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(item) for item in value]
    return value


def _forms_of(secret: str) -> set[str]:
    raw = secret.encode("utf-8")
    forms = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret), json.dumps(secret)[1:-1]}
    for offset in range(3):  # the secret inside a longer base64 text starts at any byte alignment
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * offset + raw).decode("ascii")
            start = -(-offset * 8 // 6)  # the first character made only of the secret's bits
            end = (offset + len(raw)) * 8 // 6  # past the last such character
            if end - start >= _MIN_BASE64_CHARS:
                forms.add(text[start:end])
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def password_of(url: str) -> str | None:
    """The password ``url`` carries (for tests and checks that it never appears), or None."""
    try:
        return urlsplit(url).password
    except ValueError:
        return None


__all__ = ["redact", "redact_text", "redact_value", "register_secret", "scrub_secrets", "password_of", "MASK"]
