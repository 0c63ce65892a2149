"""What every part of live tools shares: its errors, ``${NAME}`` secrets, and safe message text.

Messages never show header values or URL query strings (they may carry secrets).
"""
from __future__ import annotations

import json
import re
from typing import Any

from evaljobs.config import secret
from evaljobs.errors import UsageError, one_line
from evaljobs.providers.toolcall import OUTPUT_CAP
from evaljobs.tools.allowance import ENV_REF, ToolNotAllowed, allowance

DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 30.0



class LiveToolError(UsageError):
    """A live tool spec that cannot be used (one line, names the value and the fix)."""


class ToolFailed(Exception):
    """A live tool call that failed: recorded on the ToolCall, never raised to the conversation."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def resolve_env(value: str, what: str) -> str:
    """``${NAME}`` references replaced from the environment (raises naming a missing variable).

    Only a variable the operator allows a catalog's tools (``EVALJOBS_ALLOWED_ENV``) is ever read: the
    callers check the whole spec first (:func:`evaljobs.tools.allowance.refusal`), this is the backstop.
    """
    readable = allowance().readable

    def sub(match: re.Match) -> str:
        name = match.group(1)
        if name not in readable:
            raise ToolNotAllowed(f"{what} reads {name}, which this process's operator does not allow a "
                                 "catalog's tools to read (EVALJOBS_ALLOWED_ENV); nothing was read or sent")
        value = secret(name)
        if value is None:
            raise LiveToolError(f"{what} needs the environment variable {name}, which is not set; export it")
        return value

    return ENV_REF.sub(sub, value)


def body_of(response: Any) -> Any:
    return decoded(response.text)


def decoded(text: str) -> Any:
    """JSON if the text is JSON, else the text; oversized answers are cut (they are stored with results)."""
    if len(text) > OUTPUT_CAP:
        return cap(text)
    try:
        return json.loads(text)
    except ValueError:
        return text


def cap(text: str) -> str:
    return text if len(text) <= OUTPUT_CAP else text[:OUTPUT_CAP] + "…[truncated]"


def public_url(url: str) -> str:
    """The URL without query string or credentials, for messages."""
    url = url.split("?", 1)[0].split("#", 1)[0]
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        host, _, path = rest.partition("/")
        rest = host.rpartition("@")[2] + ("/" + path if path else "")
    return f"{scheme}{sep}{rest}"


def describe(spec: dict[str, Any]) -> str:
    if spec.get("url"):
        return public_url(str(spec["url"]))
    command = spec.get("command") or []
    return "'" + " ".join(str(c) for c in command) + "'"


def exception_text(exc: BaseException) -> str:
    """The innermost useful message, also inside anyio's exception groups."""
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, (list, tuple)) and inner:  # a group
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    text = one_line(exc, 200)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["CONNECT_TIMEOUT", "DEFAULT_TIMEOUT", "LiveToolError", "ToolFailed", "body_of", "cap", "decoded",
           "describe", "exception_text", "public_url", "resolve_env"]
