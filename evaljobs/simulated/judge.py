"""The simulated provider as an LLM judge: a deterministic grader of the answer, not a canned reply.

When a request is a judge prompt (evaljobs' judge system message, then
``RUBRIC:`` / ``REQUEST:`` / optional ``REFERENCE ANSWER:`` / ``ANSWER:``
sections), the simulated provider answers it with a real, reproducible grade:
the share of the rubric's content words (and, when given, the reference
answer's) that the answer uses. An answer that says what the rubric asks for
scores high, one that ignores it scores low, so demo and test judge scores come
from the answers themselves. A directive in the prompt still wins (tests use it
to make a judge misbehave); this grader only answers when there is none.

Kept in its own module so the simulated provider's package split stays a move.
"""
from __future__ import annotations

import json
import re
from typing import Any

#: How a judge prompt starts (``evaljobs.evaluation.judge.JUDGE_SYSTEM``).
JUDGE_MARK = "You are an evaluation judge."

_SECTION = re.compile(r"^(RUBRIC|REQUEST|REFERENCE ANSWER|ANSWER):\n", re.M)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_STOP = frozenset("""
a an and are as at be been but by can did do does for from had has have how i if in into is it its
it's me my no not of on or our should so that the their them then there these they this to was we
were what when which who will with you your answer answers response responds reply user request
""".split())


def _terms(text: str) -> set[str]:
    words = set()
    for word in _WORD.findall(text.lower()):
        if word in _STOP or len(word) < 3:
            continue
        words.add(_stem(word))
    return words


def _stem(word: str) -> str:
    """A crude, deterministic stem so 'apologises' meets 'apologise' and 'refunds' meets 'refund'."""
    for suffix in ("ing", "ies", "es", "ed", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def sections(prompt: str) -> dict[str, str]:
    """``{"RUBRIC": ..., "REQUEST": ..., "REFERENCE ANSWER": ..., "ANSWER": ...}`` of a judge prompt."""
    parts = _SECTION.split(prompt)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        out[name] = body.strip()
    return out


def grade(rubric: str, answer: str, reference: str | None = None) -> tuple[float, str]:
    """Term overlap of the answer with the rubric (and the reference answer), 0..1, with a reason."""
    said = _terms(answer)
    if not answer.strip():
        return 0.0, "the answer is empty"
    wanted = _terms(rubric)
    rubric_hits = sorted(wanted & said)
    rubric_cover = len(rubric_hits) / len(wanted) if wanted else 1.0
    if reference:
        facts = _terms(reference)
        fact_hits = sorted(facts & said)
        fact_cover = len(fact_hits) / len(facts) if facts else 1.0
        score = 0.25 * rubric_cover + 0.75 * fact_cover
        reason = (f"uses {len(fact_hits)} of {len(facts)} reference terms"
                  + (f" ({', '.join(fact_hits[:5])})" if fact_hits else "")
                  + f" and {len(rubric_hits)} of {len(wanted)} rubric terms")
    else:
        score = rubric_cover
        reason = (f"uses {len(rubric_hits)} of {len(wanted)} rubric terms"
                  + (f" ({', '.join(rubric_hits[:5])})" if rubric_hits else ""))
    # A small floor for any non-empty answer, and two decimals: readable and stable.
    score = round(min(1.0, 0.1 + 0.9 * score), 2)
    return score, reason


def judge_answer(messages: list[dict[str, Any]]) -> str | None:
    """The simulated judge's JSON verdict for a judge request; ``None`` for any other request."""
    if len(messages) < 2 or messages[0].get("role") != "system":
        return None
    system = messages[0].get("content")
    if not isinstance(system, str) or not system.startswith(JUDGE_MARK):
        return None
    user = messages[-1].get("content")
    if not isinstance(user, str):
        return None
    parts = sections(user)
    if "RUBRIC" not in parts or "ANSWER" not in parts:
        return None
    score, reason = grade(parts["RUBRIC"], parts["ANSWER"], parts.get("REFERENCE ANSWER"))
    return json.dumps({"score": score, "reason": reason})
