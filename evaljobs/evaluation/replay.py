"""What an adapter returns: the record of one conversation between a model and a scenario."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ToolCall:
    """One tool call the model made, and what the scenario's tool answered."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    error: str | None = None
    duration_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ToolCall":
        return cls(**{k: data.get(k) for k in ("name", "arguments", "result", "error")},
                   duration_ms=float(data.get("duration_ms") or 0.0))


@dataclass
class Replay:
    """The outcome of running one scenario against one model.

    ``error`` is set when the conversation could not be completed (the adapter
    raised, the provider failed for good); graders then fault it as ``run_error``.
    """

    answer: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    duration_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    turns: int = 0
    error: str | None = None
    cached: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
