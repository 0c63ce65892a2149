"""Catalogs: what to evaluate. Reading, validation, canonical digest — domain code, no I/O but the file.

The package is split by concern; this module re-exports the public API:

* :mod:`~evaljobs.catalog.model` — the frozen dataclasses (``Catalog``, ``Scenario``, ``Tool`` …);
* :mod:`~evaljobs.catalog.criteria` — the grading criteria: one module each, one table;
* :mod:`~evaljobs.catalog.load` — files to :class:`CatalogSource` to ``Catalog``;
* :mod:`~evaljobs.catalog._yaml` — the YAML reader that keeps line numbers (:mod:`~evaljobs.catalog.yaml12`:
  YAML 1.2 scalars);
* :mod:`~evaljobs.catalog.validate` — every problem at once, one line each, with file and line;
* :mod:`~evaljobs.catalog.digest` — the canonical body and its sha256;
* :mod:`~evaljobs.catalog.toolspec` — pure checks of live (``http``/``mcp``) tool specs;
* :mod:`~evaljobs.catalog.text` — values as text in messages and templates;
* :mod:`~evaljobs.catalog.modelspec`, :mod:`~evaljobs.catalog.importers` — model specs, foreign formats.

Catalog code never touches the network: MCP tool imports are expanded by an
explicit step (:func:`evaljobs.tools.expand_source`) between
:func:`read_catalog` and :func:`parse_source`.
"""
from __future__ import annotations

from evaljobs.catalog.criteria import criterion_names, gateable_names
from evaljobs.catalog.digest import digest_of
from evaljobs.catalog.load import (CatalogSource, load_catalog, loads_catalog, parse_source, read_catalog,
                                   reads_catalog)
from evaljobs.catalog.model import (
    ASSERTION_KINDS,
    DEFAULT_MAX_TURNS,
    DEFAULT_PASS_THRESHOLD,
    IDEAL_GRADERS,
    ROLES,
    Catalog,
    CatalogError,
    Expect,
    ExpectedTool,
    Scenario,
    Tool,
)
from evaljobs.catalog.validate import catalog_from_body, parse_catalog

__all__ = [
    "ASSERTION_KINDS",
    "IDEAL_GRADERS",
    "Catalog",
    "CatalogError",
    "CatalogSource",
    "DEFAULT_MAX_TURNS",
    "DEFAULT_PASS_THRESHOLD",
    "Expect",
    "ExpectedTool",
    "ROLES",
    "Scenario",
    "Tool",
    "catalog_from_body",
    "criterion_names",
    "digest_of",
    "gateable_names",
    "load_catalog",
    "loads_catalog",
    "parse_catalog",
    "parse_source",
    "read_catalog",
    "reads_catalog",
]
