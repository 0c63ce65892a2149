"""``tools_succeeded``: no tool call failed. Tool errors are always in the details (and blamed first when
the scenario fails on its mean); the criterion is scored only as a gate, on a conversation with tool calls."""
from __future__ import annotations

from typing import Any

from evaljobs.evaluation.graders.base import Grader, Grading


def _grade(grading: Grading) -> None:
    tool_errors = grading.tool_errors
    if tool_errors:
        grading.details["tool_errors"] = [{"name": c.name, "error": c.error} for c in tool_errors]
    if "tools_succeeded" in grading.gates and grading.replay.tool_calls:
        grading.scores["tools_succeeded"] = 0.0 if tool_errors else 1.0


def _explain(details: dict[str, Any]) -> list[str]:
    return [f"tool error: {failed.get('name')}: {failed.get('error')}"
            for failed in details.get("tool_errors") or []]


GRADER = Grader("tools_succeeded", _grade, fault="tool_error", gate_rank=20,
                blamed=lambda grading: bool(grading.tool_errors), explain=_explain)
