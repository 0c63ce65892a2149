"""A stored report in the format asked for: one dispatch for the CLI, the API and the viewer.

``json``, ``md`` (a pull-request comment), ``table`` (a terminal), ``junit``
(CI test results) and ``html`` (one self-contained file). With a
:class:`~evaljobs.reports.compare.Comparison` against a baseline, every format
but JUnit shows the flipped pairs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from evaljobs.errors import UsageError
from evaljobs.reports.build import render_json, render_markdown, render_table

if TYPE_CHECKING:
    from evaljobs.evaluation.result import Result
    from evaljobs.reports.compare import Comparison

FORMATS = ("json", "md", "junit", "html", "table")


def render(report: dict[str, Any], format: str = "md", *, results: Iterable[Result] = (),
           comparison: Comparison | None = None) -> str:
    """``report`` rendered as ``format``; ``results`` (the full rows) feed the JUnit and HTML details."""
    if format not in FORMATS:
        raise UsageError(f"unknown report format {format!r}: use one of {', '.join(FORMATS)}")
    if comparison is not None and format == "junit":
        raise UsageError("--baseline does not apply to --format junit: use md, html, table or json")
    if format == "json":
        return render_json({**report, "comparison": comparison.to_dict()} if comparison else report)
    if format == "md":
        return render_markdown(report, baseline=comparison)
    # The comparison, JUnit (xml.etree) and HTML renderers are imported by the formats that use them:
    # `evaljobs run` prints a table and pays for none of them (start-up time).
    if format == "table":
        if comparison is None:
            return render_table(report)
        # start-up time: only the renderer asked for
        from evaljobs.reports.compare import render_comparison
        return render_table(report) + "\n" + render_comparison(comparison)
    if format == "junit":
        # start-up time: only the renderer asked for
        from evaljobs.reports.junit import render_junit
        return render_junit(report, list(results))
    # start-up time: only the renderer asked for
    from evaljobs.reports.html import render_html
    return render_html(report, list(results), baseline=comparison)


__all__ = ["render", "FORMATS"]
