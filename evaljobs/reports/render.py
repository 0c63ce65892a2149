"""A stored report in the format asked for: one dispatch for the CLI, the API and the viewer.

``json``, ``md`` (a pull-request comment), ``table`` (a terminal), ``junit``
(CI test results) and ``html`` (one self-contained file). With a
:class:`~evaljobs.reports.compare.Comparison` against a baseline, every format
but JUnit shows the flipped pairs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from evaljobs import reports
from evaljobs.errors import UsageError
from evaljobs.printable import printable
from evaljobs.reports.build import render_json, render_markdown, render_table

if TYPE_CHECKING:
    from evaljobs.evaluation.result import Result
    from evaljobs.reports.compare import Comparison

FORMATS = ("json", "md", "junit", "html", "table")


def partial_banner(partial: dict[str, Any], format: str) -> str:
    """What a partial report says first: the run's state, what is missing, the command that resumes it."""
    missing = partial.get("missing") or []
    shown = ", ".join(missing[:20]) + (f" (+{len(missing) - 20} more)" if len(missing) > 20 else "")
    text = (f"PARTIAL REPORT: run is {partial['status']}, {partial['finished']}/{partial['expected']} pairs "
            f"finished; missing ({len(missing)}): {shown or 'none'}; resume it with `{partial['resume']}`")
    if format == "md":
        return f"> **{text}**\n\n"
    if format == "html":
        from html import escape  # only an HTML report pays for it (start-up time: html.entities' table)
        return f'<p id="partial" class="partial">{escape(text)}</p>\n'
    return text + "\n\n"


def render(report: dict[str, Any], format: str = "md", *, results: Iterable[Result] = (),
           comparison: Comparison | None = None) -> str:
    """``report`` rendered as ``format``; ``results`` (the full rows) feed the JUnit and HTML details.

    A provider's or a catalog's terminal control characters are shown as ``\\uXXXX`` in every format
    (:func:`evaljobs.printable.printable`; in JSON that is the same string): a report is printed,
    pasted and ``cat``-ed, and an escape sequence in it would act on the reader's terminal.
    """
    return printable(_render(report, format, results=results, comparison=comparison))


def _render(report: dict[str, Any], format: str, *, results: Iterable[Result],
            comparison: Comparison | None) -> str:
    if format not in FORMATS:
        raise UsageError(f"unknown report format {format!r}: use one of {', '.join(FORMATS)}")
    if comparison is not None and format == "junit":
        raise UsageError("--baseline does not apply to --format junit: use md, html, table or json")
    partial = report.get("partial")
    if partial and format in ("table", "md", "html"):  # the one banner of a run that did not finish
        text = render({**report, "partial": None}, format, results=results, comparison=comparison)
        banner = partial_banner(partial, format)
        return text.replace("<body>", "<body>" + banner, 1) if format == "html" else banner + text
    if format == "json":
        return render_json({**report, "comparison": comparison.to_dict()} if comparison else report)
    if format == "md":
        return render_markdown(report, baseline=comparison)
    # The comparison, JUnit (xml.etree) and HTML renderers are loaded by the formats that use them
    # (the reports face): `evaljobs run` prints a table and pays for none of them (start-up time).
    if format == "table":
        if comparison is None:
            return render_table(report)
        return render_table(report) + "\n" + reports.compare.render_comparison(comparison)
    if format == "junit":
        return reports.junit.render_junit(report, list(results))
    return reports.html.render_html(report, list(results), baseline=comparison)


__all__ = ["render", "FORMATS"]
