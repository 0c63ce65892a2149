"""``evaljobs catalog check`` and ``catalog convert``: validate or convert a catalog without running it.

Catalog parsing does no I/O beyond reading the file; a native catalog's live
tools are expanded (MCP schemas fetched) as an explicit step, as a session
does. Imported inside the commands: the catalog code (start-up time of
``evaljobs --help``).
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from evaljobs.cli._options import allow_code_option, echo, import_options, json_option, providers_option
from evaljobs.cli._stages import quiet_stage, stage

#: Scenarios from which `catalog convert` reports its stages as it goes (20,000 JSONL samples take
#: about a minute, most of it writing YAML, and a silent minute looks hung).
LARGE_CATALOG = 500


@click.group()
def catalog() -> None:
    """Catalog tools."""


@catalog.command("schema")
def catalog_schema() -> None:
    """Print the catalog JSON Schema (for editors: evaljobs catalog schema > catalog.schema.json)."""
    from evaljobs import api  # start-up time (see the module docstring)

    click.echo(api.catalog_schema(), nl=False)


@catalog.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
@import_options
@json_option
@providers_option
@allow_code_option
def catalog_check(path, catalog_format, include_production_only, lenient, grader, fields, as_json,
                  providers) -> None:
    """Validate a catalog (native or imported) and print its digest and what was imported how."""
    from evaljobs import api  # start-up time (see the module docstring)

    checked = api.check_catalog(path, providers=providers, format=catalog_format, lenient=lenient,
                                    include_production_only=include_production_only, grader=grader,
                                    fields=fields)
    for warning in checked.warnings:
        echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps(checked.to_dict()))
        return
    extra = f", {checked.excluded} production_only left out" if checked.excluded else ""
    echo(f"{path}: ok — {checked.format} catalog '{checked.name}', {checked.scenarios} scenarios{extra}, "
         f"{checked.digest}")
    counts = checked.counts
    if counts and checked.format != "native":  # a native catalog's checks are native: nothing was imported
        click.echo(
            f"assertions: {counts.get('assertions', 0)} imported, {counts.get('mapped', 0)} mapped to "
            f"native checks, {counts.get('external', 0)} executed externally (Node, Python, jsonschema), "
            f"{counts.get('refused', 0)} refused"
        )


@catalog.command("convert")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the native YAML here (default: stdout).")
@import_options
@providers_option
def catalog_convert(path, output, catalog_format, include_production_only, lenient, grader, fields,
                    providers) -> None:
    """Convert an ActiveAgent, promptfoo, OpenAI evals registry file or JSONL samples to the native YAML
    format."""
    from evaljobs import api  # start-up time (see the module docstring)

    def show(text: str, scenarios: int):  # on stderr: stdout may be the YAML itself
        return (stage if scenarios >= LARGE_CATALOG else quiet_stage)(text)

    converted = api.convert_catalog(path, providers=providers, format=catalog_format, lenient=lenient,
                                        include_production_only=include_production_only, grader=grader,
                                        fields=fields, on_warning=_warn, stage=show)
    text, count = converted.text, converted.scenarios
    if output:
        Path(output).write_text(text, encoding="utf-8")
        click.echo(
            f"wrote {output}: {count} scenarios from {converted.format}"
            + (f" ({converted.excluded} production_only left out)" if converted.excluded else ""),
            err=True,
        )
    else:
        click.echo(text, nl=False)


def _warn(warning: str) -> None:
    echo(f"warning: {warning}", err=True)


__all__ = ["LARGE_CATALOG", "catalog"]
