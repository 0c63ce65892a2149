"""``expected_tools``: the fraction of expected tool calls made (``tools_match: any``: one is enough)."""
from __future__ import annotations

from typing import Any

from evaljobs.evaluation.graders.base import Grader, Grading, as_json, fraction, scored_below_one


def _tool_matches(expected_args: dict[str, Any], actual_args: dict[str, Any]) -> bool:
    """An expected tool call matches when its arguments are a subset of the actual ones."""
    for key, value in expected_args.items():
        if key not in actual_args:
            return False
        actual = actual_args[key]
        if isinstance(value, dict) and isinstance(actual, dict):
            if not _tool_matches(value, actual):
                return False
        elif actual != value and str(actual) != str(value):
            return False
    return True


def _grade(grading: Grading) -> None:
    expect, replay, scores, details = grading.scenario.expect, grading.replay, grading.scores, grading.details
    if expect.tools and grading.applies("expected_tools"):
        not_called = []
        for wanted in expect.tools:
            if not any(c.name == wanted.name and _tool_matches(wanted.arguments, c.arguments or {})
                       for c in replay.tool_calls):
                not_called.append({"name": wanted.name, "arguments": wanted.arguments})
        if expect.tools_match == "any":  # ActiveAgent: any one of the expected tools is enough
            scores["expected_tools"] = 0.0 if len(not_called) == len(expect.tools) else 1.0
        else:
            scores["expected_tools"] = fraction(len(expect.tools) - len(not_called), len(expect.tools))
        if scores["expected_tools"] < 1.0:
            details["expected_tools_not_called"] = not_called


def _explain(details: dict[str, Any]) -> list[str]:
    lines = []
    for wanted in details.get("expected_tools_not_called") or []:
        args = wanted.get("arguments") if isinstance(wanted, dict) else None
        name = wanted.get("name") if isinstance(wanted, dict) else wanted
        lines.append(f"expected tool not called: {name}" + (f" {as_json(args)}" if args else ""))
    return lines


GRADER = Grader("expected_tools", _grade, fault="expected_tool_not_called", gate_rank=40,
                blamed=scored_below_one("expected_tools"), explain=_explain)
