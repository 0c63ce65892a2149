"""The order test modules start in: the slowest first, so that the xdist workers finish together.

``scripts/test`` runs the suite on six pytest-xdist workers with ``--dist loadfile
--no-loadscope-reorder``: each module goes whole to one worker, in the order the items were collected.
Collected alphabetically, a three-minute module late in the alphabet starts when the other workers are
nearly done and runs alone at the end. :func:`slowest_first` moves the modules named in
:data:`SLOWEST` (slowest first) to the front; every other module keeps its place after them, and the
tests inside a module keep their order (module-scoped servers and browsers are still shared).

The list is keyed by module name, not path, so it holds wherever a module lives under ``tests/``.
Refresh it from ``scripts/test --durations=0`` when the ranking changes (a module missing from it
only starts later; nothing fails).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

#: Module names, slowest first (summed ``--durations=0`` of a full run on four workers, set-up included;
#: BENCHMARKS.md, "The suite's wall clock, session 13": the run after test_network_faults and test_faults were
#: split in two).
SLOWEST = [
    "test_slow_link",
    "test_promptfoo_parity",
    "test_hostile_edges",
    "test_init",
    "test_network_faults",
    "test_faults",
    "test_inspect_parity",
    "test_bench_guard",
    "test_packaging",
    "test_worker_kills",
    "test_deadlines",
    "test_fanout_redis",
    "test_batch_crashes",
    "test_store",
    "test_bench",
    "test_read_back",
    "test_rabbitmq",
    "test_bad_input",
    "test_metrics",
    "test_tool_secrets",
    "test_worker_secrets",
    "test_idle_redis",
    "test_view_browser",
    "test_readme",
    "test_architecture",
    "test_batch_runs",
    "test_context_e2e",
    "test_docs_paths",
    "test_hostile_bounds",
    "test_first_hour",
    "test_epochs",
    "test_docs",
    "test_view_responsive",
    "test_mcp_e2e",
    "test_view",
    "test_view_edges",
    "test_secrets",
    "test_partial_report",
    "test_provider_faults",
    "test_batch_bounds",
]
_RANK = {name: rank for rank, name in enumerate(SLOWEST)}


def slowest_first(items: Sequence, path_of=lambda item: item.path) -> list:
    """``items`` with the modules of :data:`SLOWEST` first, in its order; a stable sort otherwise."""
    return sorted(items, key=lambda item: _RANK.get(Path(path_of(item)).stem, len(SLOWEST)))
