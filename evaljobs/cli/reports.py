"""``evaljobs report`` (json, md, junit, html, table; --baseline; --fail-under) and ``evaljobs compare``.

Thin shells over :meth:`evaljobs.api.Session.render_report` and
:meth:`~evaljobs.api.Session.compare`. Exit code 1 is reserved for a failed
gate (``--fail-under``, ``--fail-on-regression``), so CI can tell "worse" from
"broken"; errors map to exit codes in :mod:`evaljobs.cli._options`. The API is
imported inside the commands (start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from evaljobs.cli._options import conclude, db_option, echo, fail_under_option, gate_mode
from evaljobs.errors import UsageError

#: The formats of evaljobs.reports.render.FORMATS, written out (start-up time).
FORMATS = ("json", "md", "junit", "html", "table")


def _write(text: str, output: str | None) -> None:
    if not output:
        echo(text, nl=not text.endswith("\n"))
        return
    path = Path(output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    click.echo(f"wrote {output}", err=True)


def _note(text: str) -> None:
    echo(f"note: {text}", err=True)


@click.command("report")
@click.argument("run_id")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="md", show_default=True,
              help="md: pull-request comment; junit: CI test results; html: one self-contained file.")
@click.option("--baseline", metavar="RUN", default=None,
              help="Compare with an earlier run: flipped pairs in md, html, table and json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write to FILE.")
@click.option("--flaky", is_flag=True, help="List the flaky scenarios (epochs that disagree), per model.")
@fail_under_option
@click.option("--prefer-human", is_flag=True,
              help="With --fail-under: where a reviewer labelled a result, gate on their verdict.")
@db_option
def report(run_id: str, fmt: str, baseline: str | None, output: str | None, flaky: bool, gate: float | None,
           prefer_human: bool, db: str | None) -> None:
    """Render a run's report (also a CI gate with --fail-under)."""
    from evaljobs.api import Session  # start-up time (see the module docstring)

    with Session(db=db, create=False) as session:
        rendered = session.render_report(run_id, fmt, baseline=baseline, flaky=flaky, on_note=_note,
                                         prefer_human=prefer_human)
    _write(rendered.text, output)
    conclude(rendered.verdict(gate, gate_mode()))  # a gate only when asked to be one (--fail-under)


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 1 when a pair that passed in RUN_A does not pass in RUN_B.")
@db_option
def compare(run_a: str, run_b: str, as_json: bool, fail_on_regression: bool, db: str | None) -> None:
    """Show what changed from RUN_A (baseline) to RUN_B: flipped pairs, score and cost deltas."""
    from evaljobs.api import Session  # start-up time (see the module docstring)

    with Session(db=db, create=False) as session:
        comparison = session.compare(run_a, run_b, on_note=_note)
    if as_json:
        echo(json.dumps(comparison.to_dict(), indent=2, ensure_ascii=False))
    else:
        echo(comparison.render(), nl=False)
    conclude(comparison.verdict(fail_on_regression))


__all__ = ["report", "compare", "FORMATS"]
