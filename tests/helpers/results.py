"""Results of the support catalog the report tests render, built in one place."""
from __future__ import annotations

from typing import Any

from evaljobs.evaluation.result import Result


#: The assistant's call of ``lookup_order`` for order 1234 and the tool's answer, as chat messages.
ORDER_LOOKUP = [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "lookup_order", "arguments": "{\"order_id\": \"1234\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"status\": \"shipped\"}"},
]


def shipped_order(*, output: str, duration_ms: int, **fields: Any) -> Result:
    """sim/fast looks order 1234 up and says it has shipped: a passed pair (``fields``: tool calls, tokens,
    cost, details)."""
    return Result("order-status", "sim/fast", "passed", 1.0, scores={"contains": 1.0, "expected_tools": 1.0},
                  output=output, duration_ms=duration_ms, **fields)


def claimed_cancel(*, duration_ms: int, messages: list[dict[str, Any]], **details: Any) -> Result:
    """sim/fast says it cancelled order 5678 without calling ``cancel_order``: a failed pair whose fault is
    ``expected_tool_not_called`` (``details`` adds to its turns, missing words and uncalled tool)."""
    return Result(
        "cancel-order",
        "sim/fast",
        "failed",
        0.333,
        scores={"response_present": 1.0, "contains": 0.0, "expected_tools": 0.0},
        fault="expected_tool_not_called",
        output="Sure, consider it done!",
        duration_ms=duration_ms,
        details={
            "turns": 1,
            "missing": ["cancelled"],
            "expected_tools_not_called": [{"name": "cancel_order", "arguments": {"order_id": "5678"}}],
            "messages": messages,
            **details,
        },
    )
