"""A benchmark as ``evaljobs bench`` asks for it: options given as text, checked, run, written out.

:func:`benchmark` turns the command's options (``--strategies fanout,threads``, ``--widths 1,8``,
``--simulate latency=4.6``, ``--worker-env NAME=VALUE``) into a :class:`~evaljobs.bench.BenchSpec`,
each bad one a one-line :class:`~evaljobs.errors.UsageError` before anything runs, then runs every
cell and writes bench.json, .csv, .md and .png.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from evaljobs.bench.engine import run_bench
from evaljobs.bench.model import BenchResult, BenchSpec, SessionFactory, parse_strategies, parse_widths
from evaljobs.bench.render import render_table, write_outputs
from evaljobs import workers
from evaljobs.config import REDIS_SCHEMES
from evaljobs.simulated import parse_simulate_options
from evaljobs.errors import OptionError, UsageError


@dataclass
class BenchRun:
    """What :func:`benchmark` measured: the result, its table, and the files written (``png`` None: no
    plot)."""

    result: BenchResult
    table: str
    paths: dict[str, Path | None] = field(default_factory=dict)


def parse_simulate(text: str | None) -> dict[str, Any] | None:
    """``--simulate latency=4.6,jitter=0.5`` as the simulated provider's options (host and port dropped:
    the benchmark starts one provider on a free loopback port, whatever was asked)."""
    if text is None:
        return None
    try:
        options = parse_simulate_options(text)
    except ValueError as exc:
        raise UsageError(f"--simulate: {exc}") from None
    for key in ("host", "port"):
        options.pop(key, None)
    return options


def parse_worker_env(pairs: Sequence[str]) -> dict[str, str]:
    """``--worker-env NAME=VALUE`` pairs as a mapping (a pair without ``=`` or a name is one line)."""
    env = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--worker-env {item!r} is not NAME=VALUE")
        env[key.strip()] = value
    return env


def benchmark(catalog: str, models: Sequence[str], *, sessions: SessionFactory, strategies: str,
              widths: str, repeat: int, broker: str = "memory", db: str | None = None,
              simulate: str | None = None, out: str | None = None, processes: int = 1,
              cell_timeout: float, worker_env: Sequence[str] = (), governor: bool | None = None,
              providers: str | None = None, echo: Callable[[str], None] = lambda line: None) -> BenchRun:
    """Run ``catalog`` once per (strategy, width) cell and say which shape and width to use
    (``evaljobs bench``): options as the command takes them (``strategies="fanout,threads"``,
    ``widths="1,8"``, ``simulate="latency=4.6"``, ``worker_env=["NAME=VALUE"]``), each bad one a
    one-line ``UsageError`` before anything runs. Each cell is a fresh run of a ``sessions`` session
    (``evaljobs.api.benchmark`` passes the Session class); ``echo`` is told each cell's progress.
    Returns the result, its table and the files written to ``out`` (default ``.evaljobs/bench/<time>``:
    bench.json, .csv, .md and, with matplotlib, .png)."""
    if not Path(catalog).exists():
        raise OptionError(f"catalog file '{catalog}' does not exist", "CATALOG")
    if broker.startswith(REDIS_SCHEMES):
        workers.launch.ping_redis(broker)  # one line now, rather than a worker process failing to start
    spec = BenchSpec(catalog=catalog, models=list(models), strategies=parse_strategies(strategies),
                     widths=parse_widths(widths), repeat=repeat, broker=broker, db=db,
                     simulate=parse_simulate(simulate), providers=providers, processes=processes,
                     cell_timeout=cell_timeout, worker_env=parse_worker_env(worker_env), governor=governor,
                     out=out or str(Path(".evaljobs") / "bench" / datetime.now().strftime("%Y%m%d-%H%M%S")))
    result = run_bench(spec, sessions=sessions, echo=echo)
    table = render_table(result)
    return BenchRun(result=result, table=table, paths=write_outputs(result, Path(spec.out)))


__all__ = ["BenchRun", "benchmark", "parse_simulate", "parse_worker_env"]
