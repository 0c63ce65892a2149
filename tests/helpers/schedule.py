"""The order test modules start in: the slowest first, so that two xdist workers finish together.

``scripts/test`` runs the suite on two pytest-xdist workers with ``--dist loadfile
--no-loadscope-reorder``: each module goes whole to one worker, in the order the items were collected.
Collected alphabetically, a three-minute module late in the alphabet starts when the other worker is
nearly done and runs alone at the end. :func:`slowest_first` moves the modules named in
:data:`SLOWEST` (slowest first) to the front; every other module keeps its place after them, and the
tests inside a module keep their order (module-scoped servers and browsers are still shared).

The list is keyed by module name, not path, so it holds wherever a module lives under ``tests/``.
Refresh it from ``scripts/test --durations=80`` when the ranking changes (a module missing from it
only starts later; nothing fails).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

#: Module names, slowest first (summed ``--durations`` of a full run, set-up included).
SLOWEST = [
    "test_faults",
    "test_network_faults",
    "test_inspect_parity",
    "test_init",
    "test_batch_crashes",
    "test_hostile_edges",
    "test_packaging",
    "test_promptfoo_parity",
    "test_bad_input",
    "test_broker_stack",
    "test_metrics",
    "test_idle_redis",
    "test_deadlines",
    "test_composition",
    "test_readme",
    "test_bench",
    "test_read_back",
    "test_rabbitmq",
    "test_secrets",
    "test_terminal_text",
    "test_epochs",
    "test_docs_paths",
    "test_redaction",
    "test_architecture",
    "test_docs",
]
_RANK = {name: rank for rank, name in enumerate(SLOWEST)}


def slowest_first(items: Sequence, path_of=lambda item: item.path) -> list:
    """``items`` with the modules of :data:`SLOWEST` first, in its order; a stable sort otherwise."""
    return sorted(items, key=lambda item: _RANK.get(Path(path_of(item)).stem, len(SLOWEST)))
