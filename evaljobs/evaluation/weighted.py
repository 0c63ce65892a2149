"""Weighted assertion lists: a scenario graded the way promptfoo grades a test.

An imported promptfoo test whose assertions carry a ``weight``, whose test sets a
``threshold``, or which groups assertions in an ``assert-set``, is graded by its
assertion list alone (``expect.weighted``), with promptfoo's own rules as its
source has them (``src/assertions/index.ts`` ``runAssertions`` /
``runAssertionInternal`` and ``src/assertions/assertionsResult.ts``
``AssertionsResult``):

* the score is ``sum(score_i * weight_i) / sum(weight_i)`` over the list, each
  weight defaulting to 1; with no weight at all (every one 0) the score is 0;
* an assertion of weight 0 always passes (it is a metric only) and adds nothing
  to the score; an ``assert-set`` of weight 0 still fails its parent when it
  fails (promptfoo forces the pass of single assertions only);
* without a ``threshold`` the list passes when none of its assertions failed;
  with one, the list passes when its score reaches it, whatever the single
  assertions say (``threshold: 0`` never fails);
* an ``assert-set`` is a nested list with its own ``threshold``; its score and
  pass count as one assertion of the parent, with the set's ``weight``.

Pure code: the judge and the external-assertion runner are passed in, as in
:mod:`evaljobs.evaluation.grading`, which calls :func:`combine`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evaljobs import evaluation
from evaljobs.catalog.model import SET_ENTRIES
from evaljobs.evaluation.assertions import builtin_checks
from evaljobs.evaluation.graders import graders

#: ``evaluate(entry) -> Outcome | None`` for one entry that is not a ``set`` (``None``: not graded, e.g.
#: the run's judge-call cap is reached; the entry then counts neither in the score nor in the verdict).
Evaluate = Callable[[dict], "Outcome | None"]



@dataclass
class Outcome:
    """One assertion's (or one set's) verdict."""

    label: str
    passed: bool
    score: float
    reason: str = ""
    fault: str | None = None
    weight: float = 1.0
    children: list[Outcome] = field(default_factory=list)

    def as_detail(self) -> dict[str, Any]:
        out: dict[str, Any] = {"assertion": self.label, "pass": self.passed, "score": round(self.score, 6),
                               "weight": self.weight, "reason": self.reason[:500]}
        if self.children:
            out[SET_ENTRIES] = [c.as_detail() for c in self.children]  # as a set holds its entries
        return out


def combine(entries, threshold: float | None, evaluate: Evaluate, label: str = "assertions") -> Outcome:
    """The verdict of one assertion list (a test, or an assert-set), as promptfoo's AssertionsResult gives
    it."""
    if not entries:  # AssertionsResult.noAssertsResult (src/assertions/assertionsResult.ts): pass, score 1
        return Outcome(label=label, passed=True, score=1.0, reason="No assertions")
    outcomes: list[Outcome] = []
    for entry in entries:
        if entry.get("kind") == "refused":
            continue  # refused at import (--lenient): promptfoo would have run it; it is reported, not graded
        weight = float(entry.get("weight", 1))
        outcome: Outcome | None
        if entry.get("kind") == "set":
            outcome = combine(entry.get(SET_ENTRIES) or [], entry.get("threshold"), evaluate,
                              entry.get("label") or "assert-set")
        else:
            outcome = evaluate(entry)
            if outcome is None:
                continue
            if weight == 0:  # runAssertionInternal: "If weight is 0, treat this as a metric-only assertion"
                outcome.passed = True
        outcome.weight = weight
        outcomes.append(outcome)
    total_weight = sum(o.weight for o in outcomes)
    score = sum(o.score * o.weight for o in outcomes) / total_weight if total_weight > 0 else 0.0
    failed = [o for o in outcomes if not o.passed]
    if threshold is None:
        passed = not failed
        reason = failed[0].reason if failed else "all assertions passed"
    else:  # "A numeric test threshold overrides the pass/fail status of individual assertions."
        passed = score >= threshold
        reason = f"aggregate score {score:.2f} {'>=' if passed else '<'} {threshold:g} threshold"
    fault = None if passed else (failed[0].fault if failed else "low_quality")
    return Outcome(label=label, passed=passed, score=score, reason=reason, fault=fault, children=outcomes)


def check_outcome(entry: dict, text: str) -> Outcome:
    """A ``builtin`` or ``promptfoo`` entry without transforms: checked in this process."""
    if entry.get("kind") == "promptfoo":
        passed, score, reason = evaluation.promptfoo_checks.check(entry, text)  # loaded by promptfoo's only
    else:
        passed, score, reason = builtin_checks(text, entry.get("expect") or {})
    return Outcome(label=entry.get("label") or "builtin", passed=passed, score=score, reason=reason,
                   fault=None if passed else fault_of(entry))


def fault_of(entry: dict) -> str:
    """The fault a failed entry stands for: a native check's own, else ``assertion_failed``."""
    if entry.get("kind") == "builtin":
        checks = entry.get("expect") or {}
        # the fault of the criterion of the same name, the most mechanical first (the graders' gate order)
        ranked = sorted(graders(), key=lambda g: g.gate_rank)
        return next((g.fault for g in ranked if checks.get(g.name)), "assertion_failed")
    return "assertion_failed"


def walk(entries):
    """Every entry of a list, sets' entries included."""
    for entry in entries:
        yield entry
        if entry.get("kind") == "set":
            yield from walk(entry.get(SET_ENTRIES) or [])


__all__ = ["Outcome", "check_outcome", "combine", "fault_of", "walk"]
