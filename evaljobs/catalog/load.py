"""Reading catalog files: text to :class:`CatalogSource` (data + lines), then to a :class:`Catalog`.

Two steps with a gap between them on purpose: a catalog that imports tools
from an MCP server (``{mcp: {...}, only: [...]}``) needs that server listed
before it can be validated, and that is network or subprocess I/O, which
catalog code never does. So::

    source = read_catalog(path)                 # the file: YAML/JSON data, line numbers
    source = expand_source(source)              # evaljobs.tools: only if it imports MCP tools
    catalog = parse_source(source, providers=p)  # validation, digest: pure

:func:`load_catalog` / :func:`loads_catalog` are the first and last step
together; given an unexpanded MCP import they report it (one line) instead of
reaching for the server. ``Session.load`` and the CLI perform the middle step.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from evaljobs.catalog._yaml import LinesNeeded, load_yaml, yaml_error
from evaljobs.catalog.model import Catalog, CatalogError
from evaljobs.catalog.modelspec import ProvidersConfig
from evaljobs.catalog.text import escape_breaks
from evaljobs.catalog.toolspec import has_mcp_imports
from evaljobs.catalog.validate import parse_catalog
from evaljobs.collector import gc_paused


@dataclass(frozen=True)
class CatalogSource:
    """A catalog file read but not yet validated."""

    #: Names the file in messages (``.json`` selected the JSON reader).
    source: str
    #: The plain data (a mapping for any usable catalog).
    data: Any
    #: ``{path into data: 1-based line}``, e.g. ``("scenarios", 0, "max_turns") -> 9``; only the
    #: scenarios' own, e.g. ``("scenarios", 0) -> 7``, while :attr:`text` is set.
    lines: dict[tuple, int] = field(default_factory=dict, compare=False)
    #: Problems found while reading (duplicate keys), reported with validation's.
    problems: tuple[str, ...] = ()
    #: Set when ``lines`` holds only the scenarios' own lines: the text the others are read from again
    #: when a message needs them (:meth:`with_every_line`). Most catalogs are valid, and every line of a
    #: 100,000-scenario catalog took more memory than its scenarios.
    text: str | None = field(default=None, compare=False, repr=False)

    @property
    def has_mcp_imports(self) -> bool:
        """Whether it imports tools from an MCP server (then it needs expanding before parsing)."""
        return has_mcp_imports(self.data)

    def with_data(self, data: Any) -> CatalogSource:
        """The same source with ``data`` replaced (e.g. MCP imports expanded)."""
        return dataclasses.replace(self, data=data)

    def with_every_line(self) -> CatalogSource:
        """The same source with the line of every key and list item (read again from its text)."""
        if self.text is None:
            return self
        with gc_paused():
            _, lines = load_yaml(self.text, self.source, [])
        return dataclasses.replace(self, lines=lines, text=None)


def read_catalog(path: str | os.PathLike) -> CatalogSource:
    """Read a catalog file (YAML, or JSON by ``.json`` extension); no validation yet."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as handle:
            text = handle.read()
    except UnicodeDecodeError as exc:
        raise CatalogError([f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                            f"save the catalog as UTF-8"]) from None
    except OSError as exc:
        raise CatalogError([f"{source}: cannot read catalog: {exc.strerror or exc}"]) from None
    return reads_catalog(text, source=source)


def reads_catalog(text: str, *, source: str = "<catalog>") -> CatalogSource:
    """Read catalog text; ``source`` names it in messages (``.json`` selects JSON)."""
    if not text.strip():
        raise CatalogError([_empty(source)])
    problems: list[str] = []
    kept: str | None = text  # lines of the scenarios only, until a message needs the others
    with gc_paused():
        if source.lower().endswith(".json"):
            data = _load_json(text, source)
            try:  # JSON is YAML: read it again only for line numbers and duplicate keys
                _, lines, kept = _lines_read(text, source, problems)
            except (yaml.YAMLError, CatalogError, RecursionError):
                lines, kept = {}, None
        else:
            try:
                data, lines, kept = _lines_read(text, source, problems)
            except yaml.YAMLError as exc:
                raise CatalogError([yaml_error(source, exc)]) from None
            except RecursionError:
                raise CatalogError([f"{source}: YAML is nested too deeply"]) from None
            if data is None:
                raise CatalogError([_empty(source)])
    return CatalogSource(source=source, data=data, lines=lines, problems=tuple(problems), text=kept)


def _lines_read(text: str, source: str, problems: list[str]) -> tuple[Any, dict[tuple, int], str | None]:
    """``load_yaml`` keeping the scenarios' lines only (and the text, to read the others when needed);
    every line at once when the file has a duplicate key (its message names the first one's line)."""
    try:
        data, lines = load_yaml(text, source, problems, lines_of=_scenario_list)
        return data, lines, text
    except LinesNeeded:
        problems.clear()
        data, lines = load_yaml(text, source, problems)
        return data, lines, None


def _scenario_list(path: tuple) -> bool:
    """Whether ``path`` is a list of scenarios (their lines are :attr:`Scenario.line`)."""
    return path == ("scenarios",) or (len(path) == 3 and path[0] == "groups" and path[2] == "scenarios")


def parse_source(source: CatalogSource, *, providers: ProvidersConfig | None = None) -> Catalog:
    """Validate a read catalog: every problem, reading's and validation's, in one ``CatalogError``."""
    try:
        catalog = parse_catalog(source.data, source=source.source, lines=source.lines, providers=providers)
    except CatalogError as exc:
        if source.text is None:
            raise CatalogError(list(source.problems) + exc.problems) from None
        catalog = None
    if catalog is None:  # the messages name lines this source did not keep: again, with them (out of the
        # handler, so the first attempt's traceback and the scenarios it built are freed first)
        return parse_source(source.with_every_line(), providers=providers)
    if source.problems:
        raise CatalogError(list(source.problems))
    return catalog


def load_catalog(path: str | os.PathLike, *, providers: ProvidersConfig | None = None) -> Catalog:
    """Read, validate and resolve a catalog file (YAML, or JSON by ``.json`` extension)."""
    return parse_source(read_catalog(path), providers=providers)


def loads_catalog(text: str, *, source: str = "<catalog>",
                  providers: ProvidersConfig | None = None) -> Catalog:
    """Validate a catalog given as text; ``source`` names it in messages (``.json`` selects JSON)."""
    return parse_source(reads_catalog(text, source=source), providers=providers)


def _empty(source: str) -> str:
    return f"{source}: catalog is empty; it needs a 'name' and at least one scenario"


def _load_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError([escape_breaks(f"{source}:{exc.lineno}: invalid JSON: {exc.msg} "
                                          f"(column {exc.colno})")]) from None
    except RecursionError:
        raise CatalogError([f"{source}: JSON is nested too deeply"]) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise CatalogError([f"{source}: invalid JSON: {str(exc).split(';')[0]}"]) from None


__all__ = ["CatalogSource", "load_catalog", "loads_catalog", "parse_source", "read_catalog", "reads_catalog"]
