"""``evaljobs run`` and ``evaljobs demo``: evaluate a catalog and print its report.

Thin shells over :class:`evaljobs.api.Session`. The API, the pipeline and the
report renderers are imported inside the commands: ``evaljobs --help`` (and a
mistyped flag) must not pay for loading them (start-up time).
"""
from __future__ import annotations

from pathlib import Path

import click

from evaljobs.cli._options import (allow_code_option, broker_option, db_option, echo, fail_under_option,
                                   finish, import_options, providers_option, sigterm_interrupts, width_option)
from evaljobs.cli._options import run_flags, run_option_flag

#: The strategies (evaljobs.pipeline.strategies.STRATEGIES), written out for the same reason.
STRATEGIES = ("sequential", "threads", "fanout", "per-model")
DEFAULT_STRATEGY = "fanout"


@click.command()
@click.argument("catalog", type=click.Path(dir_okay=False))
@click.option(
    "-m",
    "--model",
    "models",
    multiple=True,
    required=True,
    help="Model spec provider/model[@label]; repeat for several models.",
)
@click.option("--strategy", type=click.Choice(STRATEGIES), default=DEFAULT_STRATEGY, show_default=True)
@width_option
@click.option(
    "--wait/--no-wait",
    default=None,
    help="Follow the run to its report (default: yes, except fanout/per-model on Redis).",
)
@fail_under_option
@run_option_flag("adapter")
@run_option_flag("judge_model")
@run_option_flag("judge_cap")
@run_option_flag("allow_self_judge")
@run_option_flag("time_limit")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
@run_option_flag("cache")
@run_option_flag("epochs")
@click.option(
    "--filter",
    "filters",
    multiple=True,
    metavar="GLOB",
    help="Only scenarios whose key matches GLOB (repeatable: any matches).",
)
@click.option("--tag", "tags", multiple=True, help="Only scenarios with TAG (repeatable: any of them).")
@click.option(
    "--exclude-tag", "exclude_tags", multiple=True, help="Leave out scenarios with TAG (repeatable)."
)
@click.option(
    "--limit", type=int, default=None, help="At most N scenarios (the first by key, after the rest)."
)
@click.option("--sample", type=int, default=None, help="N scenarios drawn at random (with --seed).")
@click.option("--seed", type=int, default=0, show_default=True, help="The seed of --sample.")
@run_option_flag("reuse")
@run_option_flag("cache_across_epochs")
@click.option(
    "--trace-content",
    is_flag=True,
    help="Keep each provider call's raw request and response (redacted) for the viewer's transcript "
    "(workers on other machines: EVALJOBS_STORE_TRANSCRIPTS=on).",
)
@run_option_flag("batch")
@run_option_flag("batch_judge")
@import_options
@db_option
@broker_option
@providers_option
@allow_code_option
def run(
    catalog,
    models,
    strategy,
    width,
    wait,
    gate,
    as_json,
    filters,
    tags,
    exclude_tags,
    limit,
    sample,
    seed,
    trace_content,
    catalog_format,
    include_production_only,
    lenient,
    grader,
    fields,
    db,
    broker,
    providers,
    **run_options,
) -> None:
    """Evaluate CATALOG against each -m MODEL."""
    from evaljobs.api import Selection, Session  # start-up time (see the module docstring)

    if not Path(catalog).exists():
        raise click.BadParameter(f"catalog file '{catalog}' does not exist", param_hint="CATALOG")
    # --trace-content: this process's workers keep the bodies; a Redis worker elsewhere reads its own setting
    if trace_content:
        from evaljobs import config

        config.configure(config.configured(), store_transcripts=True)
        if broker and broker != "memory" and strategy in ("fanout", "per-model"):
            click.echo("note: --trace-content applies to the workers of this process; workers started "
                       "elsewhere keep bodies with EVALJOBS_STORE_TRANSCRIPTS=on", err=True)
    selection = Selection(tuple(filters), tuple(tags), tuple(exclude_tags), limit, sample, seed)
    with Session(db=db, broker=broker, width=width, providers=providers) as session:
        with sigterm_interrupts():  # Ctrl-C or SIGTERM: the run is kept and marked interrupted (one line)
            info = session.run(
                catalog,
                list(models),
                strategy=strategy,
                wait=wait,
                progress=True,
                on_note=_stderr,
                format=catalog_format,
                lenient=lenient,
                include_production_only=include_production_only,
                grader=grader,
                fields=fields,
                selection=selection,
                **run_flags(run_options),  # --adapter, --time-limit, --epochs, --batch …: the table's flags
            )
    finish(info, gate, as_json=as_json)


@click.command()
@width_option
@db_option
@click.option("--html", "html_path", default=None,
              help="Where to write the HTML report (default .evaljobs/RUN.html).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
def demo(width, db, html_path, as_json) -> None:
    """Run the bundled support catalog against two simulated models and print the report."""
    from evaljobs.api import Session  # start-up time (see the module docstring)

    with Session(db=db, broker="memory", width=width) as session, sigterm_interrupts():
        done = session.demo(format="json" if as_json else "table", html=html_path, progress=True,
                            on_note=_stderr)
    echo(done.text, nl=not done.text.endswith("\n"))
    run_id = done.run.id
    click.echo(f"\nnext: evaljobs show {run_id}   |   evaljobs report {run_id} --format md", err=True)
    click.echo(f"HTML report: {done.html_path}", err=as_json)  # with --json, stdout is the JSON alone


def _stderr(line: str) -> None:
    echo(line, err=True)


__all__ = ["run", "demo", "STRATEGIES", "DEFAULT_STRATEGY"]
