"""``ideal``: reference answers, compared with ``expect.ideal_grader`` (OpenAI evals', Inspect's)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaljobs.catalog.criteria.base import STRINGS, Criterion, Field, Walk
from evaljobs.catalog.model import IDEAL_GRADER_ARGUMENTS, IDEAL_GRADERS, Expect, ideal_grader_problem

_GRADER: dict[str, Any] = {"anyOf": [{"anyOf": [
    {"enum": [g for g in IDEAL_GRADERS if g not in IDEAL_GRADER_ARGUMENTS]},
    {"type": "string", "pattern": f"^({'|'.join(IDEAL_GRADER_ARGUMENTS)}):."}]}, {"type": "null"}]}


def _read(walk: Walk, path: tuple, where: str, raw: Mapping[str, Any], declared: list[str]) -> dict[str, Any]:
    ideal = walk.strings(path + ("ideal",), where, "expect.ideal", raw.get("ideal"))
    grader = raw.get("ideal_grader", "includes")
    problem = ideal_grader_problem(grader)
    if problem:
        walk.add(path + ("ideal_grader",), where, f"expect.ideal_grader {problem}")
        grader = "includes"
    return {"ideal": tuple(ideal), "ideal_grader": grader}


def _body(expect: Expect) -> dict[str, Any]:
    return {"ideal": list(expect.ideal), "ideal_grader": expect.ideal_grader} if expect.ideal else {}


CRITERION = Criterion(
    "ideal", present=lambda e: bool(e.ideal), enabled_by=("ideal",),
    fields=(Field("ideal", STRINGS, "Reference answers, compared with `ideal_grader`.", later=True),
            Field("ideal_grader", _GRADER, "How `ideal` answers are compared.", later=True)),
    read=_read, body=_body)
