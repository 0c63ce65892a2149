"""``assertions``: the fraction of a scenario's assertions that pass, each run natively, by a transform
chain or by an external runtime (the injected runner)."""
from __future__ import annotations

from typing import Any

from evaljobs.catalog.criteria import criteria
from evaljobs.evaluation.refused import AssertionRefused
from evaljobs.evaluation.cost_check import cost_check
from evaljobs.evaluation.graders.base import Grader, Grading, Stop, fraction, scored_below_one


def _grade(grading: Grading) -> None:
    scenario, expect, answer = grading.scenario, grading.scenario.expect, grading.answer
    details = grading.details
    refused = [a for a in expect.assertions if a.get("kind") == "refused"]
    runnable = [a for a in expect.assertions if a.get("kind") != "refused"]
    if refused and not runnable and not any(c.present(expect) for c in criteria() if c.name != "assertions"):
        # Every assertion of the source test was refused at import (--lenient): nothing is left to grade,
        # and "the answer is not empty" is not the test the user wrote.
        details["not_gradable"] = [f"{a.get('label')}: {a.get('reason')}" for a in refused]
        raise Stop("not_gradable", keep_scores=False)
    if runnable and grading.applies("assertions"):
        if grading.assertions is None and any(a.get("kind") != "cost" for a in runnable):
            details["not_gradable"] = ["no assertion runner in this process"]
            raise Stop("not_gradable")
        outcomes = []
        for item in runnable:
            try:
                if item.get("kind") == "cost":  # the call's price, not the answer: graded on the replay
                    passed, value, reason = cost_check(item, grading.replay)
                else:
                    assert grading.assertions is not None
                    passed, value, reason = grading.assertions(item, answer, scenario)
            except AssertionRefused as exc:
                details["not_gradable"] = [str(exc)]
                raise Stop("not_gradable") from None
            outcomes.append({"assertion": item.get("label") or item.get("kind"), "pass": bool(passed),
                             "score": round(float(value), 6), "reason": reason[:500]})
        grading.scores["assertions"] = fraction(sum(1 for o in outcomes if o["pass"]), len(outcomes))
        details["assertions"] = outcomes


def _explain(details: dict[str, Any]) -> list[str]:
    outcomes = details.get("assertions")
    return [f"assertion {'passed' if o.get('pass') else 'failed'}: {o.get('assertion')}: "
            f"{o.get('reason') or ''}".rstrip() for o in (outcomes if isinstance(outcomes, list) else [])]


GRADER = Grader("assertions", _grade, fault="assertion_failed", gate_rank=100,
                blamed=scored_below_one("assertions"), explain=_explain)
