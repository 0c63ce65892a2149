"""The pooling benchmark: which scheduling shape wins, where width stops paying, and why.

``evaljobs bench`` runs one catalog once per (strategy, width, repeat), each time
as a fresh run through the real code path (:class:`evaljobs.api.Session` submit →
evaluate → persist → barrier → report), and records per cell the wall clock,
throughput, the provider's error rate, retries, cost, and the CPU time and peak
memory of whatever did the work (this process for in-process strategies and the
memory broker; the ``evaljobs worker`` process group for fan-out over Redis).

Two strategies have a fixed concurrency, so they are not run at every width:
``sequential`` is one pair at a time by definition (run at width 1 only) and
``per-model`` runs one message per model (run at widths up to the number of
models; more threads have nothing to do). Both are drawn flat across the grid.

The parts: :mod:`~evaljobs.bench.model` (the values and shared rules),
:mod:`~evaljobs.bench.analysis` (pure: medians, knee, recommendation — tested
on synthetic numbers), :mod:`~evaljobs.bench.render` (table, Markdown, CSV,
plot), :mod:`~evaljobs.bench.meter` (CPU and memory from /proc) and
:mod:`~evaljobs.bench.engine` (runs the cells; it imports the whole pipeline,
so it is loaded on first use of :func:`run_bench` or :func:`measure_enqueue`).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see; at run time each name loads on first use
    from evaljobs.bench.analysis import find_knee, recommend, summarize
    from evaljobs.bench.engine import (WorkerGroup, environment, measure_enqueue, run_bench,
                                       synthetic_catalog_text)
    from evaljobs.bench.epochs import measure_epochs
    from evaljobs.bench.meter import ProcessMeter, group_pids, host_cpu
    from evaljobs.bench.options import BenchRun, benchmark, parse_simulate, parse_worker_env
    from evaljobs.bench.model import (DEFAULT_CELL_TIMEOUT, DEFAULT_REPEAT, DEFAULT_WIDTHS, QUEUED,
                                      STRATEGIES, BenchError, BenchResult, BenchSpec, Cell, Knee, Measurement,
                                      Recommendation, SessionFactory, effective_width, ideal_wall,
                                      parse_strategies, parse_widths, strategy_widths)
    from evaljobs.bench.render import (load_result, plot, render_csv, render_markdown, render_table,
                                       write_outputs)

#: Where each public name lives. Imported on first use: this package backs the options of
#: `evaljobs bench`, and `evaljobs --help` must not pay for the engine (the whole pipeline) or the
#: analysis (statistics) — the same reason `evaljobs/__init__.py` imports lazily.
_EXPORTS = {
    **dict.fromkeys(
        (
            "BenchSpec",
            "Measurement",
            "Cell",
            "Knee",
            "Recommendation",
            "BenchResult",
            "BenchError",
            "parse_strategies",
            "parse_widths",
            "strategy_widths",
            "effective_width",
            "ideal_wall",
            "STRATEGIES",
            "QUEUED",
            "DEFAULT_WIDTHS",
            "DEFAULT_REPEAT",
            "DEFAULT_CELL_TIMEOUT",
            "SessionFactory",
        ),
        "model",
    ),
    **dict.fromkeys(("summarize", "find_knee", "recommend"), "analysis"),
    **dict.fromkeys(
        ("render_table", "render_csv", "render_markdown", "plot", "write_outputs", "load_result"), "render"
    ),
    **dict.fromkeys(("ProcessMeter", "host_cpu", "group_pids"), "meter"),
    **dict.fromkeys(
        ("run_bench", "measure_enqueue", "synthetic_catalog_text", "WorkerGroup", "environment"), "engine"
    ),
    "measure_epochs": "epochs",
    **dict.fromkeys(("BenchRun", "benchmark", "parse_simulate", "parse_worker_env"), "options"),
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evaljobs.bench' has no attribute {name!r}")
    return getattr(importlib.import_module(f"evaljobs.bench.{module}"), name)


__all__ = ["environment", "BenchSpec", "Measurement", "Cell", "Knee", "Recommendation", "BenchResult",
           "BenchError", "parse_strategies", "parse_widths", "strategy_widths", "effective_width",
           "ideal_wall", "summarize", "find_knee", "recommend", "render_table", "render_csv",
           "render_markdown", "plot", "write_outputs", "load_result", "run_bench", "measure_enqueue",
           "measure_epochs", "synthetic_catalog_text", "WorkerGroup", "ProcessMeter", "host_cpu",
           "group_pids", "STRATEGIES", "QUEUED", "DEFAULT_WIDTHS", "DEFAULT_REPEAT", "DEFAULT_CELL_TIMEOUT",
           "SessionFactory", "BenchRun", "benchmark", "parse_simulate", "parse_worker_env"]
