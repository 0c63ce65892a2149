"""Catalog importers: meet users where their evaluations already live.

Each importer turns a foreign evaluation file into NATIVE catalog data (the
same dict a native YAML catalog loads to), so there is one validator
(:func:`evaljobs.catalog.parse_catalog`) and ``evaljobs catalog convert`` is
just :func:`dump_native` of that dict. Importers never guess silently: what
evaljobs cannot grade is an error naming the file and the entry, or — with
``lenient`` — a warning saying what was skipped.

Formats: ``native``, ``activeagent-suite``, ``activeagent-catalog``,
``promptfoo``, ``openai-evals`` (an OpenAI evals registry YAML) and ``jsonl``
(OpenAI Evals / Inspect samples); see each module.

Domain code: no Dramatiq, peewee or httpx here.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import yaml

from evaljobs.catalog.importers.shared import (
    ImportResult,
    Problems,
    kind,
    load_structured,
    read_text,
    suggest_key,
    text_of,
)
from evaljobs.catalog.criteria import criteria, weighted_conflicts
from evaljobs.catalog.load import CatalogSource, reads_catalog
from evaljobs.catalog.model import SET_ENTRIES, CatalogError
from evaljobs.catalog.yaml12 import SafeDumper
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.catalog.importers import activeagent as activeagent
    from evaljobs.catalog.importers import jsonl as jsonl
    from evaljobs.catalog.importers import openai_evals as openai_evals
    from evaljobs.catalog.importers import promptfoo as promptfoo

#: The converters, each loaded when its format is read (:mod:`evaljobs.lazy`): a native catalog (every
#: `evaljobs run` of one) loads none of them (start-up time, tests/cli/test_import_budget.py).
_converter = submodules(__name__, ("activeagent", "jsonl", "openai_evals", "promptfoo"))
__getattr__ = _converter

FORMATS = ("native", "activeagent-suite", "activeagent-catalog", "promptfoo", "openai-evals", "jsonl")


def detect_format(data: Any, path: str) -> str:
    """The format of a loaded file: by extension (``.jsonl``), else by its top-level shape."""
    if str(path).lower().endswith(".jsonl"):
        return "jsonl"
    if isinstance(data, dict):
        if "suite" in data and "groups" in data:
            return "activeagent-suite"
        if "catalog" in data and "products" in data:
            return "activeagent-catalog"
        if "prompts" in data and ("tests" in data or "defaultTest" in data):
            return "promptfoo"
        if "name" in data and ("scenarios" in data or "groups" in data):
            return "native"
        if _converter("openai_evals").is_registry(data):
            return "openai-evals"
        shown = ", ".join(repr(k) for k in list(data)[:6]) or "none"
    elif isinstance(data, list) and data and all(isinstance(d, dict) and "input" in d for d in data):
        raise CatalogError(
            [
                (
                    f"{path}: a JSON array of samples (Inspect's json_dataset): write one sample per "
                    f"line in a .jsonl file and run that"
                )
            ]
        )
    else:
        shown = f"the top level is {kind(data)}"
    raise CatalogError([
        (f"{path}: cannot tell the catalog format (top-level keys: {shown}); expected a native catalog "
        f"('name' + 'scenarios'/'groups'), an ActiveAgent suite ('suite' + 'groups') or catalog "
        f"('catalog' + 'products'), a promptfoo config ('prompts' + 'tests'), an OpenAI evals registry file "
        f"(entries with 'class') or a .jsonl file; "
        f"pass --format {{{','.join(FORMATS)}}}")])


def load_any(path: str | os.PathLike, *, format: str | None = None, include_production_only: bool = False,
             lenient: bool = False, grader: str | None = None,
             fields: Sequence[str] | dict[str, str] | None = None) -> ImportResult:
    """Read a catalog file of any supported format as native catalog data.

    ``grader`` (how JSONL samples are compared with their answers: required for JSONL unless an OpenAI evals
    registry names it) and ``fields`` (``["input=question", "target=answer"]``: JSONL field mapping) apply to
    JSONL samples; an OpenAI evals registry file takes ``grader`` only when it is its class's own.

    Raises :class:`CatalogError` listing every problem (one line each). The
    result is not yet validated as a catalog: pass ``result.data`` to
    ``parse_catalog(data, source=path)``.
    """
    source = os.fspath(path)
    if format is not None and format not in FORMATS:
        raise CatalogError([(f"{source}: unknown format {format!r}{suggest_key(format, FORMATS)}; "
                            f"use one of {', '.join(FORMATS)}")])
    text = read_text(source)
    is_jsonl = format == "jsonl" or (format is None and source.lower().endswith(".jsonl"))
    if fields and not is_jsonl:
        raise CatalogError([f"{source}: --field applies to JSONL samples (OpenAI evals, Inspect) only"])
    if is_jsonl:
        chosen_by = None
        if grader is None:  # the samples do not say; an OpenAI evals registry they sit in may
            found = _converter("openai_evals").grader_from_registry(source)
            if found is not None:
                grader, chosen_by = found
        return _converter("jsonl").convert_jsonl(text, source, lenient=lenient, grader=grader, fields=fields,
                                                 chosen_by=chosen_by)
    if format is None and source.lower().endswith(".csv"):  # read as YAML it gives a puzzling syntax error
        raise CatalogError(
            [
                (
                    f"{source}: a CSV dataset is not a catalog format evaljobs reads on its own; write "
                    'its rows as JSONL (one {"input": ..., "target": ...} per line, in a .jsonl file) and '
                    "run that (a promptfoo config's tests: file://….csv is read through the config)"
                )
            ]
        )
    native = _read_native(text, source) if format in (None, "native") else None
    data, lines = (native.data, native.lines) if native is not None else load_structured(text, source)
    fmt = format or detect_format(data, source)
    if grader is not None and fmt != "openai-evals":
        raise CatalogError(
            [f"{source}: --grader applies to JSONL samples and OpenAI evals registry files only"]
        )
    if native is not None and fmt != "native":  # an import's messages may name any line: read them all
        lines = native.with_every_line().lines
    problems = Problems(source, lines, lenient)
    if fmt == "native":
        if not isinstance(data, dict):
            raise CatalogError([(f"{source}: a native catalog must be a mapping with 'name' and 'scenarios', "
                                f"not {kind(data)}")])
        return ImportResult(data=data, format=fmt, counts=_native_counts(data), native=native)
    if fmt == "activeagent-suite":
        out, excluded = _converter("activeagent").convert_suite(
            data, problems, include_production_only=include_production_only)
    elif fmt == "activeagent-catalog":
        out, excluded = _converter("activeagent").convert_catalog(
            data, problems, include_production_only=include_production_only)
    elif fmt == "promptfoo":
        out, excluded = _converter("promptfoo").convert_promptfoo(data, problems), 0
    elif fmt == "openai-evals":
        if not isinstance(data, dict):
            raise CatalogError([(f"{source}: an OpenAI evals registry file must be a mapping of eval names, "
                                 f"not {kind(data)}")])
        out, excluded = _converter("openai_evals").convert_registry(data, source, problems, grader), 0
    else:  # pragma: no cover - FORMATS is checked above
        raise CatalogError([f"{source}: unknown format {fmt!r}"])
    problems.raise_if_any()
    return ImportResult(data=out, format=fmt, excluded=excluded, warnings=problems.warnings,
                        counts=dict(problems.counts))


def _read_native(text: str, source: str) -> CatalogSource | None:
    """The file through the catalog's own reader (libyaml events, lines kept), or None for the generic one.

    Why: PyYAML's pure-Python composer took 8 minutes for 100,000 scenarios that this reader reads in
    seconds; and a native catalog read here need not be read again to be validated. Whatever this
    reader refuses (a tag, a syntax error, an empty file) is left to :func:`load_structured`, whose
    messages are unchanged.
    """
    if source.lower().endswith(".json"):
        return None
    try:
        return reads_catalog(text, source=source)
    except CatalogError:
        return None


def _native_counts(data: dict[str, Any]) -> dict[str, int]:
    """A native catalog's expectations, counted like an import's assertions (all native)."""
    total = external = refused = 0

    def entries(items: list) -> None:  # expect.assertions, a weighted list's sets included
        nonlocal total, external, refused
        for a in items:
            kind = a.get("kind") if isinstance(a, dict) else None
            if kind == "set":
                entries(a.get(SET_ENTRIES) if isinstance(a.get(SET_ENTRIES), list) else [])
            elif kind == "refused":
                refused += 1
            elif kind in ("judge", "latency") or (
                kind in ("builtin", "promptfoo") and not a.get("transforms")
            ):
                total += 1  # graded in Python by evaljobs itself
            elif kind is not None:
                external += 1

    # a weighted list's entries are walked; each other criterion's key counts its values (a list's items)
    walked = {k for c in criteria() if c.grades_weighted for k in c.enabled_by}
    counted = set(weighted_conflicts())
    raw_groups = data.get("groups")
    groups = raw_groups if isinstance(raw_groups, list) else []
    lists = [data.get("scenarios")] + [g.get("scenarios") for g in groups if isinstance(g, dict)]
    for scenarios in lists:
        for scenario in scenarios if isinstance(scenarios, list) else []:
            expect = scenario.get("expect") if isinstance(scenario, dict) else None
            if not isinstance(expect, dict):
                continue
            for key, value in expect.items():
                if key in walked and isinstance(value, list):
                    entries(value)
                elif key in counted and value is not None:
                    total += len(value) if isinstance(value, list) else 1
    return {
        "assertions": total + external + refused,
        "mapped": total,
        "external": external,
        "refused": refused,
    }


def dump_native(data: dict[str, Any]) -> str:
    """Native catalog data as YAML text (what ``evaljobs catalog convert`` writes).

    Key order is kept (name first, scenarios last), so a converted catalog
    reads like a hand-written one; re-importing it yields the same catalog.
    """
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100,
                     default_flow_style=False)


class _Dumper(SafeDumper):
    """Block style, and multi-line strings as ``|`` blocks for readable converted catalogs."""

    def ignore_aliases(self, data: Any) -> bool:  # no &anchors: every scenario reads on its own
        return True


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str_representer)


__all__ = ["FORMATS", "ImportResult", "detect_format", "dump_native", "load_any", "text_of"]
