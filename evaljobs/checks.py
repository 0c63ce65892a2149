"""Checks that need no session: a catalog checked or converted without running it, its JSON Schema,
the providers listed or each called once (``evaljobs catalog …``, ``evaljobs providers …``).

Re-exported by :mod:`evaljobs.api`, loaded on first use (``evaljobs run`` needs none of it).
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

from evaljobs.catalog import CatalogSource, parse_catalog, parse_source, read_catalog
from evaljobs.catalog.importers import dump_native, load_any
from evaljobs.catalog.modelspec import ModelSpecError, parse_model_spec
from evaljobs.catalog.schema import catalog_schema_json
from evaljobs.collector import gc_paused
from evaljobs.errors import OptionError, UsageError
from evaljobs.evaluation.assertions import code_refused
from evaljobs.extras import require_for_catalog
from evaljobs.pipeline import runtime
from evaljobs.providers import close_clients, describe, probe, probe_models
from evaljobs.reports.gate import Verdict
from evaljobs.tools import catalog_refusal, expand_source


def check_catalog(path: str | Path, *, providers: str | None = None, format: str | None = None,
                  include_production_only: bool = False, lenient: bool = False,
                  grader: str | None = None,
                  fields: Sequence[str] | dict[str, str] | None = None) -> "CatalogCheck":
    """Validate a catalog (native or imported) without running it: what ``evaljobs catalog check`` prints.

    A static method: checking a catalog opens no database and binds no broker. Live MCP
    tools are listed from their servers, as a run would (an explicit step: parsing does no
    I/O); a catalog with MCP tools and no ``mcp`` extra is one line before any server is asked.
    """
    if not Path(path).exists():
        raise OptionError(f"catalog file '{path}' does not exist", "PATH")
    with gc_paused():  # the collector's passes over a dataset-sized catalog's data find nothing to free
        return _check_catalog(path, providers, format, include_production_only, lenient, grader, fields)


def _check_catalog(path: str | Path, providers: str | None, format: str | None, include_production_only: bool,
                   lenient: bool, grader: str | None,
                   fields: Sequence[str] | dict[str, str] | None) -> "CatalogCheck":
    imported = load_any(str(path), format=format, include_production_only=include_production_only,
                        lenient=lenient, grader=grader, fields=fields)
    require_for_catalog(imported.data, source=str(path))
    refused = catalog_refusal(imported.data)  # a live tool this operator does not allow, as a worker checks
    if refused:
        raise UsageError(f"{path}: {refused}")
    source = ((imported.native or read_catalog(path)) if imported.format == "native"
              else CatalogSource(source=str(path), data=imported.data))
    cat = parse_source(expand_source(source), providers=runtime.providers(providers))
    problem = code_refused([a for s in cat.scenarios for a in s.expect.assertions])
    if problem:  # checked as a run would be: a catalog's code runs only where the operator opted in
        raise UsageError(f"{path}: {problem}")
    return CatalogCheck(path=str(path), format=imported.format, name=cat.name,
                        scenarios=len(cat.scenarios),
                        excluded=imported.excluded, digest=cat.digest, counts=dict(imported.counts or {}),
                        warnings=list(imported.warnings))


def check_providers_live(models: Sequence[str] = (), *, providers: str | None = None,
                         timeout: float = 30.0,
                         on_probe: Callable[[Any], None] | None = None) -> "ProviderCheck":
    """One minimal real call per model (``evaljobs providers check``): its latency, or the exact error.

    Without ``models``, the first priced model of each provider that is ready (its key set).
    ``on_probe(probe)`` is told each outcome as it comes (a slow provider shows the rest first).
    An unknown provider in ``models`` is a ``UsageError``; the returned check's ``verdict()``
    fails when a call failed or no provider was ready to call.
    """
    config_ = runtime.providers(providers)
    notes: list[str] = []
    if models:
        try:
            specs = [parse_model_spec(text, config_).spec for text in models]
        except ModelSpecError as exc:
            raise UsageError(str(exc)) from None
    else:
        specs, notes = probe_models(config_)
    probes = []
    try:
        for spec in specs:
            probes.append(probe(config_, spec, timeout=timeout))
            if on_probe is not None:
                on_probe(probes[-1])
    finally:
        close_clients()
    return ProviderCheck(probes=probes, notes=notes)


def list_providers(providers: str | None = None) -> "ProviderList":
    """Every provider, preset or from ``providers`` (``evaljobs providers list``): configuration
    only, never a key (only whether its variable is set)."""
    config_ = runtime.providers(providers)
    return ProviderList(rows=describe(config_), source=str(config_.source))


def catalog_schema() -> str:
    """The catalog JSON Schema (``evaljobs catalog schema``), for editors."""
    return catalog_schema_json()


def convert_catalog(path: str | Path, *, providers: str | None = None, format: str | None = None,
                    include_production_only: bool = False, lenient: bool = False,
                    grader: str | None = None, fields: Sequence[str] | dict[str, str] | None = None,
                    on_warning: Callable[[str], None] | None = None,
                    stage: "Callable[[str, int], ContextManager[Any]] | None" = None,
                    ) -> "ConvertedCatalog":
    """An imported catalog as native YAML (``evaljobs catalog convert``), checked first: a catalog
    that would not load is never written.

    ``on_warning`` is told what the import left out as soon as it is read; ``stage(label,
    scenarios)`` wraps the check and the writing (a 20,000-sample file takes about a minute).
    """
    if not Path(path).exists():
        raise OptionError(f"catalog file '{path}' does not exist", "PATH")
    imported = load_any(str(path), format=format, include_production_only=include_production_only,
                        lenient=lenient, grader=grader, fields=fields)
    for warning in imported.warnings:
        if on_warning is not None:
            on_warning(warning)
    config_ = runtime.providers(providers)
    count = len(imported.data.get("scenarios") or []) + sum(len(g.get("scenarios") or [])
                                                            for g in imported.data.get("groups") or [])

    def step(label: str) -> "ContextManager[Any]":
        return stage(label, count) if stage is not None else nullcontext()

    with step(f"convert: checking {count} scenarios from {imported.format}"):
        parse_catalog(imported.data, source=str(path), providers=config_)
    with step(f"convert: writing {count} scenarios as YAML"):
        text = dump_native(imported.data)
    return ConvertedCatalog(text=text, scenarios=count, format=imported.format,
                            excluded=imported.excluded)


@dataclass
class CatalogCheck:
    """What :func:`check_catalog` found: the catalog's name, size, digest and how it was imported."""

    path: str
    format: str
    name: str
    scenarios: int
    excluded: int
    digest: str
    counts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``catalog check --json`` prints (warnings go to stderr, not here)."""
        return {"path": self.path, "format": self.format, "name": self.name, "scenarios": self.scenarios,
                "excluded": self.excluded, "digest": self.digest, "counts": self.counts}


@dataclass
class ProviderCheck:
    """What :func:`check_providers_live` found: one probe per model, and notes on the choice."""

    probes: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Any]:
        return [p for p in self.probes if p.error is not None]

    def verdict(self) -> Verdict:
        if not self.probes:
            return Verdict.failed("no provider is ready to call (see `evaljobs providers list`); "
                                  "pass -m provider/model")
        if self.failed:
            n = len(self.probes)
            return Verdict.failed(f"{len(self.failed)} of {n} model{'s' if n != 1 else ''} failed")
        return Verdict(True)


@dataclass
class ProviderList:
    """What :func:`list_providers` found: one row per provider, and the file they came from."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""


@dataclass
class ConvertedCatalog:
    """What :func:`convert_catalog` made: the native YAML, and what it was converted from."""

    text: str
    scenarios: int
    format: str
    excluded: int = 0


__all__ = ["check_catalog", "check_providers_live", "list_providers", "catalog_schema",
           "convert_catalog", "CatalogCheck", "ProviderCheck", "ProviderList", "ConvertedCatalog"]
