"""A JavaScript regular expression (``new RegExp(value)``, no flags) as a Python one matching the same texts.

promptfoo's ``regex`` assertion is ``new RegExp(value).test(output)``. Python's ``re``
reads most such patterns alike, with three differences that change verdicts on
ordinary answers, translated here:

- ``$`` ends the input in JavaScript; in Python it also matches before a final
  newline (``"Bonjour !\\n"`` matches ``[!.]$`` only in Python): it becomes ``\\Z``.
- ``\\d``, ``\\w`` and ``\\b`` are ASCII in JavaScript, Unicode in Python: the pattern
  is compiled ASCII (``(?a)``) ...
- ... but ``\\s`` is Unicode in JavaScript (no-break space, ideographic space...):
  outside a character class it becomes the explicit JavaScript set.

``(?<name>...)`` (a JavaScript named group) becomes Python's ``(?P<name>...)``.
"""
from __future__ import annotations

#: JavaScript's ``\s``: WhiteSpace and LineTerminator (ECMA-262), without the brackets.
_JS_SPACE = "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"


def python_pattern(pattern: str) -> str:
    """The Python pattern that matches what ``new RegExp(pattern)`` matches."""
    out = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "s":
                out.append(_JS_SPACE if in_class else f"[{_JS_SPACE}]")
            elif nxt == "S" and not in_class:
                out.append(f"[^{_JS_SPACE}]")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "]":  # JavaScript's "[]" matches nothing; Python reads "]" as a member
                out.append("(?!)")
                i += 2
                in_class = False
                continue
        elif ch == "$":
            ch = r"\Z"
        elif pattern.startswith("(?<", i) and pattern[i + 3:i + 4] not in ("=", "!"):
            ch, i = "(?P<", i + 2
        out.append(ch)
        i += 1
    return "(?a)" + "".join(out)


__all__ = ["python_pattern"]
