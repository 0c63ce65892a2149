"""The row a report is built from: what ``finalize`` reads of each result, as a tuple."""
from __future__ import annotations

from typing import Any, NamedTuple


class ReportRow(NamedTuple):
    """What the report reads of one result: ``finalize`` builds these from fetched tuples.

    A tuple, not a :class:`Result`: 4,000 rows are built between the last result and the
    report. ``build_report`` reads any object with these attributes (a ``Result`` too).
    ``scores`` is the last column ``finalize`` fetches, so a fetched tuple becomes a row by
    swapping its last item (the JSON text) for the parsed dict.
    """

    scenario_key: str
    model: str
    epoch: int
    status: str
    score: float
    fault: str | None
    error: str | None
    duration_ms: int
    cost: float | None
    cached: bool
    input_tokens: int
    output_tokens: int
    ttft_ms: float | None
    latency_ms: float | None
    reused_from: str | None
    scores: dict[str, float]
    details: dict[str, Any] | None = None


__all__ = ["ReportRow"]
