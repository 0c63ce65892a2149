"""evaljobs: run LLM-agent evaluation catalogs (scenarios × models) as a Dramatiq fan-out.

The public surface::

    from evaljobs import Session, load_catalog, Replay, ToolCall, Result

Names are imported on first use so that ``import evaljobs`` stays cheap for
workers and command-line startup.
"""
from __future__ import annotations

import importlib

# Not `from typing import TYPE_CHECKING`: importing typing is most of what `import evaljobs` would
# cost (2-5 ms here, the rest is 0.3 ms; BENCHMARKS.md); type checkers treat any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each name loads on first use (below)
    from typing import Any

    from evaljobs.api import Session
    from evaljobs.catalog import Catalog, CatalogError, Scenario, Tool, load_catalog
    from evaljobs.catalog.modelspec import ModelSpec, parse_model_spec
    from evaljobs.config import Settings
    from evaljobs.errors import EvaljobsError, UsageError
    from evaljobs.evaluation.adapters import Adapter
    from evaljobs.evaluation.replay import Replay
    from evaljobs.providers import ToolCall
    from evaljobs.evaluation.result import Result
    from evaljobs.simulated import SimulatedProvider

__version__ = "0.1.0"

_EXPORTS = {
    "Catalog": "catalog",
    "CatalogError": "catalog",
    "Scenario": "catalog",
    "Tool": "catalog",
    "load_catalog": "catalog",
    "Adapter": "evaluation.adapters",
    "Replay": "evaluation.replay",
    "ToolCall": "evaluation.replay",
    "Result": "evaluation.result",
    "Session": "api",
    "UsageError": "errors",
    "EvaljobsError": "errors",
    "Settings": "config",
    "ModelSpec": "catalog.modelspec",
    "parse_model_spec": "catalog.modelspec",
    "SimulatedProvider": "simulated",
}

__all__ = ["Adapter", "Catalog", "CatalogError", "EvaljobsError", "ModelSpec", "Replay", "Result", "Scenario",
           "Session", "Settings", "SimulatedProvider", "Tool", "ToolCall", "UsageError", "load_catalog",
           "parse_model_spec", "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evaljobs' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
