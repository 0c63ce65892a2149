"""``evaljobs report`` (json, md, junit, html, table; --baseline; --fail-under) and ``evaljobs compare``.

The lead registers both on the main group (``main.add_command(report)``,
``main.add_command(compare)``), which also turns ``store.UnknownRun`` into a
one-line error with exit code 2. Exit code 1 is reserved for a failed gate
(``--fail-under``, ``--fail-on-regression``), so CI can tell "worse" from "broken".
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from evaljobs import store
from evaljobs.cli import EXIT_GATE, EXIT_USAGE, _gate, _rate, db_option
from evaljobs.reports.compare import Comparison, compare as compare_runs, render_comparison

FORMATS = ("json", "md", "junit", "html", "table")


class ReportError(click.ClickException):
    """A one-line error a user can fix; exit 2, like every other usage error of the CLI."""

    exit_code = EXIT_USAGE


def _side(run_id: str) -> tuple[store.RunInfo, Any]:
    """What a comparison reads for a run: its report when it has one, else its rows so far."""
    info = store.get_run(run_id)
    return info, (info.report if info.report is not None else store.list_results(run_id))


def _comparison(baseline_id: str, info: store.RunInfo, current: Any) -> Comparison:
    base, side = _side(baseline_id)
    if base.digest != info.digest:
        click.echo(f"note: {baseline_id} ran catalog {base.digest[:19]}, {info.id} ran {info.digest[:19]}; "
                   "pairs are matched by scenario key and model", err=True)
    return compare_runs(side, current, run_a=base.id, run_b=info.id)


def _write(text: str, output: str | None) -> None:
    if not output:
        click.echo(text, nl=not text.endswith("\n"))
        return
    path = Path(output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write {output}: {exc.strerror or exc}") from None
    click.echo(f"wrote {output}", err=True)


@click.command("report")
@click.argument("run_id")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="md", show_default=True,
              help="md: pull-request comment; junit: CI test results; html: one self-contained file.")
@click.option("--baseline", metavar="RUN", default=None,
              help="Compare with an earlier run: flipped pairs in md, html, table and json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write to FILE.")
@click.option("--fail-under", default=None, help="Exit 1 when the pass rate is under this (0.9 or 90%).")
@db_option
def report(run_id: str, fmt: str, baseline: str | None, output: str | None, fail_under: str | None,
           db: str | None) -> None:
    """Render a run's report (also a CI gate with --fail-under)."""
    from evaljobs.reports.html import render_html
    from evaljobs.reports.junit import render_junit
    from evaljobs.reports.build import render_json, render_markdown, render_table

    gate = _rate(fail_under)
    if baseline and fmt == "junit":
        raise ReportError("--baseline does not apply to --format junit: use md, html, table or json")
    store.connect(db)
    info = store.get_run(run_id)
    if info.report is None:
        raise ReportError(f"run {run_id} has no report yet ({info.status}, {info.persisted}/{info.expected} "
                          f"pairs); wait for it or try `evaljobs recover {run_id}`")
    comparison = _comparison(baseline, info, info.report) if baseline else None
    if fmt == "json":
        text = render_json({**info.report, "comparison": comparison.to_dict()} if comparison else info.report)
    elif fmt == "md":
        text = render_markdown(info.report, baseline=comparison)
    elif fmt == "table":
        text = render_table(info.report) + ("\n" + render_comparison(comparison) if comparison else "")
    elif fmt == "junit":
        text = render_junit(info.report, store.list_results(run_id))
    else:
        text = render_html(info.report, store.list_results(run_id), baseline=comparison)
    _write(text, output)
    _gate(info, gate)


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 1 when a pair that passed in RUN_A does not pass in RUN_B.")
@db_option
def compare(run_a: str, run_b: str, as_json: bool, fail_on_regression: bool, db: str | None) -> None:
    """Show what changed from RUN_A (baseline) to RUN_B: flipped pairs, score and cost deltas."""
    store.connect(db)
    info_b, side_b = _side(run_b)
    comparison = _comparison(run_a, info_b, side_b)
    if as_json:
        click.echo(json.dumps(comparison.to_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(render_comparison(comparison), nl=False)
    if fail_on_regression and comparison.regressed:
        click.echo(f"FAIL: {len(comparison.regressed)} pairs regressed from {run_a} to {run_b}", err=True)
        raise SystemExit(EXIT_GATE)


__all__ = ["report", "compare", "ReportError", "FORMATS"]
