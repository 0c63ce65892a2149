"""The row a report is built from: what ``finalize`` reads of each result, as a tuple."""
# No ``from __future__ import annotations`` here: typing turns a NamedTuple's string annotations into
# ForwardRefs, each compiled from its text at import (start-up time, BENCHMARKS.md session 13).

from typing import Any, NamedTuple


class ReportRow(NamedTuple):
    """What the report reads of one result: ``finalize`` builds these from fetched tuples.

    A tuple, not a :class:`Result`: 4,000 rows are built between the last result and the
    report. ``build_report`` reads any object with these attributes (a ``Result`` too).
    ``finalize`` fetches every column but ``details``, in this order, so a fetched tuple becomes a
    row by swapping ``scores`` (the JSON text) for the parsed dict and putting ``details`` (None) before
    the last.
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
    cache_read_tokens: int
    cache_write_tokens: int
    cache_saving: float | None
    answered_by: str | None
    scores: dict[str, float]
    details: dict[str, Any] | None = None
    #: The digest of the scenario the pair was graded against (None: stored before it was kept).
    scenario_digest: str | None = None


def short_digest(digest: str) -> str:
    """The first 16 hex digits of a ``sha256:`` scenario digest: what a report row keeps (64 bits tell two
    versions of one scenario apart), and what ``compare`` matches both sides' digests by."""
    return digest.split(":")[-1][:16]


__all__ = ["ReportRow", "short_digest"]
