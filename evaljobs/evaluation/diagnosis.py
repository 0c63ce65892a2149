"""ActiveAgent's diagnosis heuristics: ``missing_capability`` and ``ungrounded_answer``.

ActiveAgent (``lib/active_agent/evals/diagnosis.rb``) fails an answer on two
readings of its text besides its expectations, and an imported ActiveAgent
suite asks for both (``expect.diagnose``) so that it gets the same verdicts:

* ``missing_capability`` — the answer says no tool covers the task ("I don't
  have access to...", "outside my capabilities"); not when the agent called a
  tool and its mean score still reaches the pass threshold.
* ``ungrounded_answer`` — the agent had tools, called none, and states a
  specific (a ``#123`` id, a ``2024-05-01`` date, "you have 3 open tickets")
  that no tool could have supplied.

The phrase lists are ActiveAgent's ``CAPABILITY_REFUSALS`` and
``SPECIFIC_CLAIMS``, in Python's syntax (its ``/x`` pattern is ``re.X`` here).
"""
from __future__ import annotations

import re

from evaljobs.evaluation.graders import graders

_REFUSED_VERBS = "have|access|retrieve|look up|query|check|view|search"
CAPABILITY_REFUSALS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\bI(?:'m| am)? (?:do not |don't |cannot |can't |unable to |not able to )(?:currently "
        rf")?(?:{_REFUSED_VERBS})\b",
        r"\b(?:no|don't have (?:a|any)) tools? (?:is |are )?(?:available|that can|to)\b",
        r"\bnot (?:something|able|possible) (?:I|to) (?:can|am able to )?(?:do|access|retrieve|look up)\b",
        r"\bI (?:don't|do not) have (?:the ability|a way|access|visibility|the tools?)\b",
        r"\boutside (?:of )?(?:my|the) (?:capabilities|available tools|scope)\b",
        r"\bcan(?:'|no)t (?:be )?(?:done|determined|answered) with (?:the|my) (?:current|available) tools\b",
    )
)
SPECIFIC_CLAIMS = (
    re.compile(r"#\d+\b"),
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),
    re.compile(r"\b(?:you have|there are|there is|we have|I found|found|showing|a total of)\s+(?:\*\*)?\d+\b",
               re.IGNORECASE),
    re.compile(r"""\b\d+\s+(?:\*\*)?(?:open|overdue|pending|active|closed|resolved|completed|unpaid|outstanding|new|matching|
          records?|results?|rows?|entries|items?|tickets?|orders?|tasks?|issues?|invoices?|customers?|users?|milestones?)\b""",
               re.IGNORECASE | re.VERBOSE),
)


def _excerpt(text: str, patterns, before: int, length: int) -> str | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            start = max(match.start() - before, 0)
            return text[start:start + length].strip()
    return None


def rule_mean(scores: dict[str, float]) -> float | None:
    """ActiveAgent's ``Scorer.mean`` over evaljobs' criteria: a check (an empty answer) never adds a score,
    and a criterion ActiveAgent scores all or nothing (``Grader.all_or_nothing``: its
    ``forbidden_content``) is 0 on any miss."""
    strict = {g.name for g in graders() if g.all_or_nothing}
    values = [(0.0 if v < 1.0 else 1.0) if c in strict else v for c, v in scores.items()]
    return round(sum(values) / len(values), 3) if values else None


def missing_capability(answer: str, called_tools: list[str], scores: dict[str, float],
                       threshold: float) -> str | None:
    """The refusal, quoted, when the answer says it lacks the capability (``None``: it does not)."""
    refusal = _excerpt(answer, CAPABILITY_REFUSALS, 80, 260)
    if refusal is None:
        return None
    mean = rule_mean(scores)
    if called_tools and (mean or 0.0) >= threshold:  # it used a tool and did well enough anyway
        return None
    return refusal


def ungrounded_answer(answer: str, available_tools: list[str], called_tools: list[str]) -> str | None:
    """The claim, quoted, when an agent with tools called none and still stated specifics."""
    if not available_tools or called_tools:
        return None
    return _excerpt(answer, SPECIFIC_CLAIMS, 40, 120)


__all__ = ["CAPABILITY_REFUSALS", "SPECIFIC_CLAIMS", "missing_capability", "rule_mean", "ungrounded_answer"]
