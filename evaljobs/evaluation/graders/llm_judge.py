"""``llm_judge``: the injected judge scores the answer against the rubric; the judgement passes or fails
on its own threshold and the judge's ``pass``, and is a gate unless the catalog says ``gate: false``.
Graded last: a judge call costs, and an answer that cannot be graded otherwise is not worth one."""
from __future__ import annotations

from typing import Any

from evaljobs.catalog import Scenario
from evaljobs.evaluation.graders.base import Grader, Grading, Stop, judgement_passes


def judge_threshold(scenario: Scenario) -> float:
    """The score the ``llm_judge`` criterion needs: its own ``threshold``, else the scenario's
    ``pass_threshold``."""
    threshold = scenario.expect.judge_threshold
    return scenario.pass_threshold if threshold is None else threshold


def _grade(grading: Grading) -> None:
    scenario, scores, details = grading.scenario, grading.scores, grading.details
    expect = scenario.expect
    if expect.judge and expect.judge_gate and grading.applies("llm_judge"):
        grading.gates.add("llm_judge")  # the judge decides its criterion unless the catalog says gate: false
    if expect.judge and grading.judge is not None and grading.applies("llm_judge"):
        verdict = grading.judge(scenario, grading.replay)
        if verdict is None:
            details["judge"] = "skipped: the run's judge-call cap is reached"
        else:
            info = verdict.details()
            if verdict.error:
                info.update(score=None, reason=verdict.error)
                details["judge"] = info
                raise Stop("judge_unavailable")
            scores["llm_judge"] = max(0.0, min(1.0, float(verdict.score)))
            threshold = judge_threshold(scenario)
            info.update(score=scores["llm_judge"], reason=verdict.reason, threshold=threshold,
                        passed=judgement_passes(verdict, scores["llm_judge"], threshold),
                        gate="llm_judge" in grading.gates)
            if verdict.passed is not None:
                info["judge_pass"] = verdict.passed
            details["judge"] = info


def _gate_failed(value: float, details: dict[str, Any]) -> bool:
    # the judgement passes or fails on its own (its threshold, its pass)
    return not details["judge"]["passed"]


GRADER = Grader("llm_judge", _grade, fault="low_quality", gate_rank=130, gate_failed=_gate_failed)
