"""Directives: the ``[sim…: action args]`` spans a catalog embeds in messages to steer the simulated provider.

Parsing only (no I/O): what a directive says, which model it applies to, and the
text without it, so directives never leak into an answer.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from evaljobs.errors import UsageError, suggest

#: Actions that apply on every turn, before the step logic.
FAULT_ACTIONS = ("status", "ratelimit", "fail-first", "sleep", "malformed", "truncate", "reset", "huge",
                 "echo", "flaky", "usage")
STEP_ACTIONS = ("say", "call")
#: The simulated models every catalog may name. ``tool`` calls the first tool when no directive says
#: otherwise and ``judge`` is the usual judge; the others differ only by the ``[sim@NAME: …]`` directives
#: that address them, so a misspelt name would silently get none of its directives.
NAMED_MODELS = ("fast", "judge", "sim", "smart", "tool")
ACTIONS = STEP_ACTIONS + FAULT_ACTIONS

# Greedy name: it runs to the last ':' before whitespace, so "llama3:8b" is a valid model name.
_DIRECTIVE_START = re.compile(r"\[sim(?:@([^\s\]]+))?:")


class Directive(NamedTuple):
    action: str
    args: str
    model: str | None = None
    #: Where it was found, for error messages ("message 2").
    where: str = ""


class DirectiveError(UsageError):
    """A directive the simulator cannot follow; answered as HTTP 400 with this one-line message."""


def find_directives(text: str) -> list[tuple[int, int, str | None, str]]:
    """``(start, end, model, body)`` for each ``[sim…: …]`` span in ``text``.

    The closing ``]`` is found with bracket matching (JSON arguments may contain
    ``]``); double quotes only count as strings inside ``{…}``/``[…]`` so that a
    ``say`` text may contain a lone quote.
    """
    found: list[tuple[int, int, str | None, str]] = []
    pos = 0
    while True:
        match = _DIRECTIVE_START.search(text, pos)
        if match is None:
            return found
        end = _closing_bracket(text, match.end())
        if end is None:
            return found
        found.append((match.start(), end + 1, match.group(1), text[match.end():end]))
        pos = end + 1


def _closing_bracket(text: str, start: int) -> int | None:
    depth = 0
    in_string = False
    escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"' and depth > 0:
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            if depth == 0:
                if char == "]":
                    return index
            else:
                depth -= 1
    fallback = text.find("]", start)
    return fallback if fallback >= 0 else None


def strip_directives(text: str) -> str:
    """``text`` without its directives, so they never leak into an answer."""
    spans = find_directives(text)
    if not spans:
        return text.strip()
    pieces, pos = [], 0
    for start, end, _, _ in spans:
        pieces.append(text[pos:start])
        pos = end
    pieces.append(text[pos:])
    return re.sub(r"[ \t]{2,}", " ", "".join(pieces)).strip()


def collect_directives(messages: list[dict[str, Any]], model: str) -> list[Directive]:
    """Directives of the system/user messages, in order, that apply to ``model``."""
    directives = []
    for number, message in enumerate(messages, start=1):
        if message.get("role") not in ("system", "user", "developer"):
            continue
        for _, _, name, body in find_directives(text_of(message.get("content"))):
            if name is not None and name != model:
                continue
            action, _, args = body.strip().partition(" ")
            directives.append(Directive(action.strip().lower(), args.strip(), name, f"message {number}"))
    return directives



def text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def addressed_models(texts: Iterable[str]) -> set[str]:
    """The model names that ``[sim@NAME: …]`` directives in ``texts`` address."""
    return {match.group(1) for text in texts for match in _DIRECTIVE_START.finditer(text) if match.group(1)}


def unknown_judge_problem(model: str, texts: Iterable[str]) -> str | None:
    """Why ``sim/model`` cannot be a judge (None when it can): a judge is named by the simulator's own
    names (or a name the catalog addresses), so a typo (``sim/jduge``) is not silently a judge."""
    names = set(NAMED_MODELS) | addressed_models(texts)
    if model in names:
        return None
    hint = suggest(model, sorted(names)).replace(" (did you mean '", " (did you mean 'sim/")
    return (f"unknown simulated judge model 'sim/{model}'{hint}: a simulated judge is one of "
            f"{', '.join('sim/' + name for name in sorted(names))}")


def unknown_model_problem(model: str, texts: Iterable[str], *, source: str = "the catalog") -> str | None:
    """Why ``sim/model`` would silently miss its directives (None when the name is fine).

    Only a catalog that addresses models by name makes a name matter: when it does, a name that is
    neither built in nor addressed (``sim/fsat`` for ``sim/fast``) gets none of the model-specific
    directives and would run as some other model; it is refused with the names that mean something.
    """
    addressed = addressed_models(texts)
    if not addressed or model in addressed or model in NAMED_MODELS:
        return None
    names = sorted(set(NAMED_MODELS) | addressed)
    known = ["sim/" + name for name in names]
    hint = suggest(model, names).replace(" (did you mean '", " (did you mean 'sim/")
    return (f"unknown simulated model 'sim/{model}'{hint}: {source} steers "
            f"{', '.join('sim/' + name for name in sorted(addressed))} with [sim@NAME: …] directives, which "
            f"'sim/{model}' would never see; known: {', '.join(known)}")

