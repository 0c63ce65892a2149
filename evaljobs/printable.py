"""One neutralisation for text that reaches a terminal: a provider's or a catalog's control characters.

Why: a provider's error text, an answer or a catalog's name is printed by ``run``, ``show``,
``report``, ``compare`` and the error lines. Printed raw, ``ESC ] 0 ; … BEL`` retitled the window,
``ESC ] 52 ; c ; …`` wrote the clipboard (OSC 52), ``ESC [ 2 J`` cleared the screen and a green
"ALL PAIRS PASSED" was drawn over a failed run (issue 40.16). Stored data is kept as it came;
:func:`printable` is applied where text is rendered or printed.

Every C0 control but newline and tab, DEL, every C1 control (``0x9b`` is a one-byte CSI to some
terminals) and the Unicode controls that reorder or hide text (bidirectional overrides and
isolates, the line and paragraph separators) become the visible escape ``\\uXXXX``: readable on a
terminal, in Markdown and in text, and — being JSON's own escape — still valid inside a JSON string.

This module imports nothing from evaljobs, so every layer may use it.
"""
from __future__ import annotations

import re

#: What is neutralised: C0 (not \t, \n), DEL, C1, bidi embeddings/overrides/isolates, marks, separators.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str) -> str:
    """``text`` with every terminal control character shown as ``\\uXXXX`` (newlines and tabs kept)."""
    if text.isprintable():  # the common case: nothing to do (isprintable is false for \n and \t too)
        return text
    return _CONTROLS.sub(_escape, text)


__all__ = ["printable"]
