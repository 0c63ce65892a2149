"""``evaljobs labels export|import``: reviewers' labels as JSON Lines, to keep beside the catalog.

A thin shell over :func:`evaljobs.api.export_labels` and :func:`~evaljobs.api.import_labels`,
imported inside each command (start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import json

import click

from evaljobs.cli._options import db_option


@click.group()
def labels() -> None:
    """Reviewers' labels on pairs: export and import them as JSONL."""


@labels.command("export")
@db_option
@click.argument("runs", nargs=-1)
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write to this file (default: standard output).")
def labels_export(db, runs, output) -> None:
    """Write the labels given in RUNS (ids, prefixes, latest; default: all), one JSON object a line."""
    from evaljobs import api  # start-up time (see the module docstring)

    text = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in api.export_labels(runs, db=db))
    if output is None:
        click.echo(text, nl=False)
        return
    with open(output, "w", encoding="utf-8") as out:
        out.write(text)
    click.echo(f"wrote {text.count(chr(10))} labels to {click.format_filename(output)}", err=True)


@labels.command("import")
@db_option
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
def labels_import(db, path) -> None:
    """Keep the labels of PATH (a `labels export`); a label for the same pair replaces the one kept."""
    from evaljobs import api  # start-up time (see the module docstring)

    click.echo(f"imported {api.import_labels(path, db=db)} labels from {click.format_filename(path)}")


@click.command("judge-agreement")
@db_option
@click.argument("runs", nargs=-1)
@click.option("--min-kappa", type=click.FloatRange(-1, 1), default=None,
              help="Warn when a judge decides a gate on a rubric with a kappa under this (default 0.6).")
@click.option("--json", "as_json", is_flag=True, help="Print the agreements as JSON.")
def judge_agreement(db, runs, min_kappa, as_json) -> None:
    """How far each LLM judge agrees with reviewers' labels, per rubric: confusion matrix, Cohen's kappa.

    Also the kappa's 95% interval and the threshold that would agree best. RUNS: ids, prefixes or latest
    (default: every run a label was given in). A judge that decides a gate on a rubric under --min-kappa
    is a warning on stderr."""
    from evaljobs import api  # start-up time (see the module docstring)

    found = api.judge_agreement(runs, db=db, min_kappa=min_kappa)
    if as_json:
        click.echo(json.dumps(found.to_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(found.render(), nl=False)
    for line in found.warnings:
        click.echo(line, err=True)


__all__ = ["labels", "judge_agreement"]
