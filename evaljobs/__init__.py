"""evaljobs: run LLM-agent evaluation catalogs (scenarios × models) as a Dramatiq fan-out.

The public surface::

    from evaljobs import Session, load_catalog, Replay, ToolCall, Result

Names are imported on first use so that ``import evaljobs`` stays cheap for
workers and command-line startup.
"""
from __future__ import annotations

import importlib

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

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evaljobs' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
