"""Values as text: in validation messages (one line, quoted, shortened) and in templates.

Shared by the validator, the YAML reader, the importers and live tools, so a
value is described the same way in every message and rendered the same way
into every prompt or query string.
"""
from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from typing import Any

from evaljobs.errors import suggest


def text_of(value: Any) -> str:
    """A template value as text (JSON for lists and mappings, 'true'/'false' for booleans)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def kind_of(value: Any) -> str:
    """What a value is, for "must be X, not <kind>" messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, str):
        return f"a string ({show(value)})"
    if isinstance(value, (int, float)):
        return f"a number ({show(value)})"
    if isinstance(value, bytes):
        return "binary data"
    return f"a {type(value).__name__}"


def show(value: Any, limit: int = 60) -> str:
    """``repr(value)``, shortened to ``limit`` characters."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # e.g. an integer too large to print
        return f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quote_hint(value: Any) -> str:
    """YAML reads unquoted yes/no/123/2024-01-01 as non-strings: say how to keep the text."""
    if isinstance(value, (bool, int, float, datetime.date)) or value is None:
        return "; quote it to make it text"
    return ""


def did_you_mean(key: Any, valid: Iterable[str], label: str) -> str:
    """`` (did you mean 'x'?)``, else ``; <label>: a, b, c`` (nothing when ``label`` is empty)."""
    valid = list(valid)
    close = suggest(key, valid)
    if close:
        return close
    return f"; {label}: {', '.join(valid)}" if label and valid else ""


_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def escape_breaks(text: str) -> str:
    """``text`` on one line: line breaks written as escapes (``\\n``), nothing else changed."""
    return text.translate(_BREAKS)


__all__ = ["did_you_mean", "escape_breaks", "kind_of", "quote_hint", "show", "text_of"]
