"""``evaljobs bench``: run a catalog per (strategy, width) and say which shape and width to use.

A thin shell over :func:`evaljobs.bench.run_bench`; its errors (one line, exit
2) are mapped in :mod:`evaljobs.cli._options`. The engine is imported inside
the command: it loads the whole pipeline (start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import click

from evaljobs.bench.model import (DEFAULT_CELL_TIMEOUT, DEFAULT_REPEAT, DEFAULT_WIDTHS, STRATEGIES, BenchSpec,
                                  parse_strategies, parse_widths)
from evaljobs.cli._options import ping_redis
from evaljobs.config import REDIS_SCHEMES
from evaljobs.errors import UsageError


def _simulate(text: str | None) -> dict | None:
    if text is None:
        return None
    from evaljobs.simulated import parse_simulate_options  # start-up time (module docstring)

    try:
        options = parse_simulate_options(text)
    except ValueError as exc:
        raise UsageError(f"--simulate: {exc}") from None
    for key in ("host", "port"):
        options.pop(key, None)  # one provider on a free loopback port, whatever was asked
    return options


def _worker_env(pairs: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--worker-env {item!r} is not NAME=VALUE")
        env[key.strip()] = value
    return env


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
              help="Use the built-in simulated provider, e.g. latency=4.6,jitter=0.5,max_concurrent=8,rpm=600.")
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
    if not Path(catalog).exists():
        raise click.BadParameter(f"catalog file '{catalog}' does not exist", param_hint="CATALOG")
    from evaljobs.bench.engine import run_bench  # start-up time (see the module docstring)
    from evaljobs.bench.render import render_table, write_outputs

    if broker.startswith(REDIS_SCHEMES):
        ping_redis(broker)  # one line now, rather than a worker process failing to start
    spec = BenchSpec(catalog=catalog, models=list(models), strategies=parse_strategies(strategies),
                     widths=parse_widths(widths), repeat=repeat, broker=broker, db=db,
                     simulate=_simulate(simulate), providers=providers, processes=processes,
                     cell_timeout=cell_timeout, worker_env=_worker_env(worker_env), governor=governor,
                     out=out or str(Path(".evaljobs") / "bench" / datetime.now().strftime("%Y%m%d-%H%M%S")))
    result = run_bench(spec, echo=lambda line: click.echo(line, err=True))
    click.echo(render_table(result))
    paths = write_outputs(result, Path(spec.out))
    click.echo(f"\nwrote {paths['json']}, {paths['csv']} and {paths['md']}", err=True)
    if paths["png"] is not None:
        click.echo(f"wrote {paths['png']}", err=True)
    else:
        click.echo("no plot: matplotlib is not installed (pip install 'evaljobs[plot]')", err=True)

