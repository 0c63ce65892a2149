"""The record of one tool call: what the model asked for and what the tool answered.

Defined here, below evaluation, because live tools (:mod:`evaljobs.tools`)
build these records and a :class:`~evaljobs.evaluation.replay.Replay` holds them
(``evaljobs.evaluation.replay`` re-exports it). :data:`OUTPUT_CAP` is here for
the same reason: a live tool's answer is cut to it before it is stored.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Stored outputs (answers, tool results) are capped so a runaway answer cannot bloat the database or a
#: report.
OUTPUT_CAP = 20_000


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
        stored: dict[str, Any] = {k: data.get(k) for k in ("name", "arguments", "result", "error")}
        return cls(**stored, duration_ms=float(data.get("duration_ms") or 0.0))


__all__ = ["OUTPUT_CAP", "ToolCall"]
