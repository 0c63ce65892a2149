"""``evaljobs run`` and ``evaljobs demo``: evaluate a catalog and print its report.

Thin shells over :class:`evaljobs.api.Session`. The API, the pipeline and the
report renderers are imported inside the commands: ``evaljobs --help`` (and a
mistyped flag) must not pay for loading them (start-up time).
"""
from __future__ import annotations

from pathlib import Path

import click

from evaljobs.cli._options import (broker_option, db_option, fail_under_option, finish,
                                   import_options, providers_option, sigterm_interrupts, width_option)
from evaljobs.cli._follow import follow_progress
from evaljobs.redact import redact

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
@click.option("--adapter", default=None, help="Host adapter module:callable or entry-point name.")
@click.option("--judge-model", default=None, help="Model for llm_judge criteria (default: the catalog's).")
@click.option("--judge-cap", type=click.IntRange(min=0), default=None, help="Most judge calls for this run.")
@click.option(
    "--allow-self-judge",
    is_flag=True,
    help="Let a model under test judge answers (its own included); refused otherwise. Reports say so.",
)
@click.option("--time-limit", type=click.FloatRange(min=0.1), default=None, help="Seconds per pair.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
@click.option(
    "--cache",
    is_flag=True,
    help="Answer repeated provider calls from the shared response cache (TTL: EVALJOBS_CACHE_TTL, 7d).",
)
@click.option(
    "--epochs",
    type=click.IntRange(min=1, max=1000),
    default=None,
    help="Evaluate each scenario × model pair N times (default: the catalog's defaults.epochs, else 1).",
)
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
@click.option(
    "--reuse",
    metavar="RUN",
    default=None,
    help="Copy the pairs unchanged since RUN (an id or 'latest') instead of evaluating them.",
)
@click.option(
    "--cache-across-epochs",
    is_flag=True,
    help="With --cache: let every epoch reuse one cached answer (default: each epoch is its own call).",
)
@click.option(
    "--trace-content",
    is_flag=True,
    help="Keep each provider call's raw request and response (redacted) for the viewer's transcript "
    "(workers on other machines: EVALJOBS_STORE_TRANSCRIPTS=on).",
)
@click.option(
    "--batch",
    is_flag=True,
    help="Send the calls through the providers' batch APIs (half price; answers within their window).",
)
@click.option("--batch-judge", is_flag=True, help="Send the LLM judge's calls through batch APIs too.")
@import_options
@db_option
@broker_option
@providers_option
def run(
    catalog,
    models,
    strategy,
    width,
    wait,
    gate,
    adapter,
    judge_model,
    judge_cap,
    allow_self_judge,
    time_limit,
    as_json,
    cache,
    epochs,
    filters,
    tags,
    exclude_tags,
    limit,
    sample,
    seed,
    reuse,
    cache_across_epochs,
    trace_content,
    batch,
    batch_judge,
    catalog_format,
    include_production_only,
    lenient,
    grader,
    fields,
    db,
    broker,
    providers,
) -> None:
    """Evaluate CATALOG against each -m MODEL."""
    from evaljobs.api import Session  # start-up time (see the module docstring)
    from evaljobs.catalog.subset import Selection, select, selection_note
    from evaljobs.pipeline.progress import Progress

    if not Path(catalog).exists():
        raise click.BadParameter(f"catalog file '{catalog}' does not exist", param_hint="CATALOG")
    if trace_content:  # this process's workers keep the bodies; a Redis worker elsewhere reads its own setting
        from evaljobs import config

        config.configure(config.configured(), store_transcripts=True)
        if broker and broker != "memory" and strategy in ("fanout", "per-model"):
            click.echo("note: --trace-content applies to the workers of this process; workers started "
                       "elsewhere keep bodies with EVALJOBS_STORE_TRANSCRIPTS=on", err=True)
    with Session(db=db, broker=broker, width=width, providers=providers) as session:
        catalog_obj = session.load(
            catalog,
            format=catalog_format,
            lenient=lenient,
            include_production_only=include_production_only,
            grader=grader,
            fields=fields,
        )
        for warning in session.import_warnings:
            click.echo(f"warning: {warning}", err=True)
        if session.excluded:
            click.echo(f"note: {session.excluded} production_only scenarios left out "
                       f"(--include-production-only keeps them)", err=True)
        whole = catalog_obj
        selection = Selection(tuple(filters), tuple(tags), tuple(exclude_tags), limit, sample, seed)
        catalog_obj, chosen = select(whole, selection)  # an empty selection stops here: no run is created
        if chosen:
            click.echo(f"selected {selection_note(chosen)}", err=True)
        n_epochs = epochs if epochs is not None else catalog_obj.epochs
        inline = strategy not in ("fanout", "per-model")
        expected = len(catalog_obj.scenarios) * len(models) * n_epochs
        progress = Progress(expected)
        checks: list = []  # what to ask when nothing moves: known once the run exists (a batch run's batches)

        def idle() -> str | None:
            return checks[0]() if checks and checks[0] is not None else None

        def submitted(info) -> None:
            if not inline and session.follows(strategy, wait):
                # on Redis with no worker taking the messages, the bar says so (not "ETA 0.0s")
                bar, check = follow_progress(info, session.binding().url, 5.0,
                                             local_workers=session.binding().is_memory)
                progress.catchup_note = bar.catchup_note
                checks.append(check)
            if session.reuse_note:
                click.echo(session.reuse_note, err=True)
            times = f" × {info.epochs} epochs" if info.epochs > 1 else ""
            broker_text = redact(session.binding().url) if not inline else "none"
            click.echo(f"run {info.id}: {len(catalog_obj.scenarios)} scenarios × {len(models)} models{times} "
                       f"= {info.expected} pairs ({strategy}, broker {broker_text})", err=True)

        with sigterm_interrupts():  # Ctrl-C or SIGTERM: the run is kept and marked interrupted (one line)
            info = session.run(
                whole,
                list(models),
                strategy=strategy,
                wait=wait,
                on_event=progress,
                idle=idle if not inline else None,
                on_submit=submitted,
                adapter=adapter,
                judge_model=judge_model,
                judge_cap=judge_cap,
                time_limit=time_limit,
                cache=cache,
                epochs=epochs,
                cache_across_epochs=cache_across_epochs,
                selection=selection,
                reuse=reuse,
                allow_self_judge=allow_self_judge,
                batch=batch,
                batch_judge=batch_judge,
            )
        if not session.follows(strategy, wait):
            click.echo(info.id)
            return
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
    from evaljobs.pipeline.progress import Progress

    from evaljobs.resources import demo_catalog

    catalog_path = demo_catalog()  # package data: works from a wheel with no source tree around
    models = ["sim/fast", "sim/smart"]
    with Session(db=db, broker="memory", width=width) as session:
        cat = session.load(catalog_path)
        progress = Progress(len(cat.scenarios) * len(models))
        def submitted(info) -> None:
            click.echo(f"run {info.id}: {len(cat.scenarios)} scenarios × {len(models)} simulated models, "
                       f"fan-out over {width} in-process workers", err=True)

        with sigterm_interrupts():
            info = session.run(cat, models, strategy="fanout", on_event=progress, on_submit=submitted)
        text = session.report(info.id, "json" if as_json else "table")
        click.echo(text, nl=not text.endswith("\n"))
        html_file = Path(html_path) if html_path else Path(".evaljobs") / f"{info.id}.html"
        html_file.parent.mkdir(parents=True, exist_ok=True)
        html_file.write_text(session.report(info.id, "html"), encoding="utf-8")
        click.echo(f"\nnext: evaljobs show {info.id}   |   evaljobs report {info.id} --format md", err=True)
        click.echo(f"HTML report: {html_file.resolve()}", err=as_json)  # with --json, stdout is the JSON alone


__all__ = ["run", "demo", "STRATEGIES", "DEFAULT_STRATEGY"]
