"""``llm_judge``: an LLM judge scores the answer against ``expect.judge`` (a rubric); it decides its
criterion on its own threshold and is a gate unless the catalog says ``gate: false``."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaljobs.catalog.criteria.base import (NONEMPTY, Criterion, Field, Shown, ValueProblem, Walk,
                                            score_threshold)
from evaljobs.catalog.model import Expect
from evaljobs.catalog.text import show

_BLOCK_KEYS = ("rubric", "threshold", "gate")
_JUDGE: dict[str, Any] = {"anyOf": [{"anyOf": [NONEMPTY, {
    "type": "object", "additionalProperties": False, "title": "Judge",
    "properties": {
        "rubric": {**NONEMPTY, "description": "What the judge scores the answer against."},
        "threshold": {"type": "number", "minimum": 0, "maximum": 1,
                      "description": "The judge score this criterion needs (default: pass_threshold)."},
        "gate": {"type": "boolean", "description": "false: a failed judgement only lowers the score."}},
    "required": ["rubric"]}]}, {"type": "null"}]}


def _show(expect: Expect) -> Shown | None:
    return Shown("judge rubric (the judge prompt's RUBRIC): ", block=expect.judge) if expect.judge else None


def _judge(walk: Walk, path: tuple, where: str, raw: Any) -> tuple[str | None, float | None, bool]:
    """``judge: RUBRIC`` or ``judge: {rubric: RUBRIC, threshold: 0..1, gate: false}`` -> (rubric,
    threshold, gate). The judged criterion passes on its own threshold (default: the scenario's
    ``pass_threshold``) and is a gate unless ``gate: false``."""
    if raw is None:
        return None, None, True
    if isinstance(raw, dict):
        walk.unknown_keys(path, f"{where}: expect.judge", raw, _BLOCK_KEYS)
        rubric, threshold, gate = raw.get("rubric"), raw.get("threshold"), raw.get("gate", True)
        if threshold is not None:
            try:
                threshold = score_threshold("expect.judge.threshold", threshold)
            except ValueProblem as exc:
                walk.add(path + ("threshold",), where, str(exc))
                threshold = None
        if not isinstance(gate, bool):
            walk.add(path + ("gate",), where, f"expect.judge.gate must be true or false, not {show(gate)}")
            gate = True
    else:
        rubric, threshold, gate = raw, None, True
    if not isinstance(rubric, str) or not rubric.strip():
        name = "expect.judge.rubric" if isinstance(raw, dict) else "expect.judge"
        walk.add(path, where, f"{name} must be a non-empty rubric string, not {show(rubric)}")
        return None, None, True
    return rubric, threshold, gate


def _read(walk: Walk, path: tuple, where: str, raw: Mapping[str, Any], declared: list[str]) -> dict[str, Any]:
    judge, threshold, gate = _judge(walk, path + ("judge",), where, raw.get("judge"))
    if raw.get("gate") is False:  # "gate: false": nothing is a gate, the judge neither
        gate = False
    reference = raw.get("reference")
    if reference is not None and (not isinstance(reference, str) or not reference.strip()):
        walk.add(path + ("reference",), where,
                 f"expect.reference must be the reference answer (a non-empty string), not {show(reference)}")
        reference = None
    if reference is not None and judge is None:
        walk.add(path + ("reference",), where, "expect.reference is the LLM judge's reference answer; "
                                               "add expect.judge (the rubric) or remove it")
    return {"judge": judge, "judge_threshold": threshold, "judge_gate": gate, "reference": reference}


def _body(expect: Expect) -> dict[str, Any]:
    """The rubric as written when the judge keeps its defaults (catalogs keep their digest), else the
    ``{rubric, threshold, gate}`` form; the reference answer when there is one."""
    judge: Any = expect.judge
    if judge is not None and (expect.judge_threshold is not None or not expect.judge_gate):
        judge = {"rubric": expect.judge}
        if expect.judge_threshold is not None:
            judge["threshold"] = expect.judge_threshold
        if not expect.judge_gate:
            judge["gate"] = False
    return {"judge": judge, **({"reference": expect.reference} if expect.reference else {})}


CRITERION = Criterion(
    "llm_judge", present=lambda e: e.judge is not None, show=_show, enabled_by=("judge",), judged=True,
    fields=(Field("judge", _JUDGE, "A rubric an LLM judge scores the answer against, or {rubric, threshold "
                                   "(default: pass_threshold), gate (default true)}."),
            Field("reference", {**NONEMPTY, "type": ["string", "null"]},
                  "The LLM judge's reference answer (needs `judge`).", later=True)),
    read=_read, body=_body)
