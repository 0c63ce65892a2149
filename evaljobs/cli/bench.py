"""``evaljobs bench``: run a catalog per (strategy, width) and say which shape and width to use.

A thin shell over :func:`evaljobs.api.benchmark`; its errors (one line, exit 2) are mapped in
:mod:`evaljobs.cli._options`. The defaults shown in ``--help`` are the benchmark package's constants
(its face loads lazily: they cost nothing); the API and the engine load inside the command
(start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import click

from evaljobs.bench import DEFAULT_CELL_TIMEOUT, DEFAULT_REPEAT, DEFAULT_WIDTHS, STRATEGIES


@click.command("bench")
@click.argument("catalog", type=click.Path(dir_okay=False))
@click.option("-m", "--model", "models", multiple=True, required=True,
              help="Model spec provider/model; repeat for several models.")
@click.option("--strategies", default=",".join(STRATEGIES), show_default=True,
              help="Comma-separated strategies to compare.")
@click.option("--widths", default=",".join(map(str, DEFAULT_WIDTHS)), show_default=True,
              help="Comma-separated widths (worker threads / pool size).")
@click.option("--repeat", type=click.IntRange(min=1), default=DEFAULT_REPEAT, show_default=True,
              help="Runs per cell; the table shows medians.")
@click.option("--broker", envvar="EVALJOBS_BROKER_URL", default="memory", show_default=True,
              help="'memory' (in-process worker threads) or redis://host:port/db (worker processes).")
@click.option("--db", default=None,
              help="Database URL for the benchmark runs (default: a fresh SQLite file in --out).")
@click.option("--simulate", default=None, metavar="OPTIONS",
              help="Use the built-in simulated provider, "
                   "e.g. latency=4.6,jitter=0.5,max_concurrent=8,rpm=600.")
@click.option("--out", "out", type=click.Path(file_okay=False), default=None,
              help="Folder for bench.json, .csv, .md and .png (default .evaljobs/bench/<time>).")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Redis only: worker processes, each with WIDTH threads.")
@click.option("--cell-timeout", type=click.FloatRange(min=1), default=DEFAULT_CELL_TIMEOUT, show_default=True,
              help="Seconds one run may take before the cell is recorded as timed out.")
@click.option("--worker-env", multiple=True, metavar="NAME=VALUE",
              help="Extra environment for the worker processes (Redis), e.g. dramatiq_worker_timeout=100.")
@click.option("--governor/--no-governor", default=None,
              help="Force the provider governor on or off for every cell (default: as configured).")
@click.option("--providers", envvar="EVALJOBS_PROVIDERS", default=None, type=click.Path(dir_okay=False),
              help="Providers config (YAML): base URLs, API-key env vars, prices.")
def bench(catalog, models, strategies, widths, repeat, broker, db, simulate, out, processes, cell_timeout,
          worker_env, governor, providers) -> None:
    """Benchmark CATALOG per (strategy, width): wall clock, throughput, errors, cost, CPU, memory.

    Prints a table, writes bench.json / bench.csv / bench.md / bench.png to --out, and names the
    recommended default width and the knee where adding width stops helping.
    Without --simulate the runs go to the models' real provider (and cost money).
    """
    from evaljobs import api  # start-up time (see the module docstring)

    done = api.benchmark(
        catalog,
        models,
        strategies=strategies,
        widths=widths,
        repeat=repeat,
        broker=broker,
        db=db,
        simulate=simulate,
        out=out,
        processes=processes,
        cell_timeout=cell_timeout,
        worker_env=worker_env,
        governor=governor,
        providers=providers,
        echo=lambda line: click.echo(line, err=True),
    )
    click.echo(done.table)
    paths = done.paths
    click.echo(f"\nwrote {paths['json']}, {paths['csv']} and {paths['md']}", err=True)
    if paths["png"] is not None:
        click.echo(f"wrote {paths['png']}", err=True)
    else:
        click.echo("no plot: matplotlib is not installed (pip install 'evaljobs[plot]')", err=True)


__all__ = ["bench"]
