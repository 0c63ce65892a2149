"""Catalog importers: meet users where their evaluations already live.

Each importer turns a foreign evaluation file into NATIVE catalog data (the
same dict a native YAML catalog loads to), so there is one validator
(:func:`evaljobs.catalog.parse_catalog`) and ``evaljobs catalog convert`` is
just :func:`dump_native` of that dict. Importers never guess silently: what
evaljobs cannot grade is an error naming the file and the entry, or — with
``lenient`` — a warning saying what was skipped.

Formats: ``native``, ``activeagent-suite``, ``activeagent-catalog``,
``promptfoo`` and ``jsonl`` (OpenAI Evals / Inspect samples); see each module.

Domain code: no Dramatiq, peewee or httpx here.
"""
from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from evaljobs.catalog import CatalogError

FORMATS = ("native", "activeagent-suite", "activeagent-catalog", "promptfoo", "jsonl")


@dataclass
class ImportResult:
    """A foreign (or native) file read as native catalog data."""

    #: Native catalog data: give it to ``parse_catalog`` (or dump it with :func:`dump_native`).
    data: dict[str, Any]
    format: str
    #: Scenarios left out because they are ``production_only`` (the report says how many).
    excluded: int = 0
    #: What was skipped or assumed (one line each, naming file and entry).
    warnings: list[str] = field(default_factory=list)
    #: Source assertions: how many were imported, mapped to native checks, run externally, refused.
    counts: dict[str, int] = field(default_factory=dict)


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
        shown = ", ".join(repr(k) for k in list(data)[:6]) or "none"
    else:
        shown = f"the top level is {_kind(data)}"
    raise CatalogError([
        f"{path}: cannot tell the catalog format (top-level keys: {shown}); expected a native catalog "
        f"('name' + 'scenarios'/'groups'), an ActiveAgent suite ('suite' + 'groups') or catalog "
        f"('catalog' + 'products'), a promptfoo config ('prompts' + 'tests') or a .jsonl file; "
        f"pass --format {{{','.join(FORMATS)}}}"])


def load_any(path: str | os.PathLike, *, format: str | None = None, include_production_only: bool = False,
             lenient: bool = False, grader: str | None = None) -> ImportResult:
    """Read a catalog file of any supported format as native catalog data.

    Raises :class:`CatalogError` listing every problem (one line each). The
    result is not yet validated as a catalog: pass ``result.data`` to
    ``parse_catalog(data, source=path)``.
    """
    source = os.fspath(path)
    if format is not None and format not in FORMATS:
        raise CatalogError([f"{source}: unknown format {format!r}{_suggest(format, FORMATS)}; "
                            f"use one of {', '.join(FORMATS)}"])
    text = read_text(source)
    is_jsonl = format == "jsonl" or (format is None and source.lower().endswith(".jsonl"))
    if grader is not None and not is_jsonl:
        raise CatalogError([f"{source}: --grader applies to JSONL samples (OpenAI evals, Inspect) only"])
    if is_jsonl:
        from evaljobs.catalog.importers.jsonl import convert_jsonl

        return convert_jsonl(text, source, lenient=lenient, grader=grader)
    data, lines = load_structured(text, source)
    fmt = format or detect_format(data, source)
    problems = Problems(source, lines, lenient)
    if fmt == "native":
        if not isinstance(data, dict):
            raise CatalogError([f"{source}: a native catalog must be a mapping with 'name' and 'scenarios', "
                                f"not {_kind(data)}"])
        return ImportResult(data=data, format=fmt, counts=_native_counts(data))
    if fmt == "activeagent-suite":
        from evaljobs.catalog.importers.activeagent import convert_suite

        out, excluded = convert_suite(data, problems, include_production_only=include_production_only)
    elif fmt == "activeagent-catalog":
        from evaljobs.catalog.importers.activeagent import convert_catalog

        out, excluded = convert_catalog(data, problems, include_production_only=include_production_only)
    elif fmt == "promptfoo":
        from evaljobs.catalog.importers.promptfoo import convert_promptfoo

        out, excluded = convert_promptfoo(data, problems), 0
    else:  # an explicit --format jsonl on a file without the extension
        from evaljobs.catalog.importers.jsonl import convert_jsonl

        return convert_jsonl(text, source, lenient=lenient)
    problems.raise_if_any()
    return ImportResult(data=out, format=fmt, excluded=excluded, warnings=problems.warnings,
                        counts=dict(problems.counts))


def _native_counts(data: dict[str, Any]) -> dict[str, int]:
    """A native catalog's expectations, counted like an import's assertions (all native)."""
    total = external = 0
    groups = data.get("groups") if isinstance(data.get("groups"), list) else []
    lists = [data.get("scenarios")] + [g.get("scenarios") for g in groups if isinstance(g, dict)]
    for scenarios in lists:
        for scenario in scenarios if isinstance(scenarios, list) else []:
            expect = scenario.get("expect") if isinstance(scenario, dict) else None
            if not isinstance(expect, dict):
                continue
            for key, value in expect.items():
                if key in ("assertions",) and isinstance(value, list):
                    external += sum(1 for a in value if isinstance(a, dict) and a.get("kind") != "refused")
                elif key in ("contains", "not_contains", "regex", "tools", "patterns", "forbidden_patterns",
                             "ideal"):
                    total += len(value) if isinstance(value, list) else 1
                elif key in ("judge", "max_latency_ms", "token_budget") and value is not None:
                    total += 1
    return {"assertions": total + external, "mapped": total, "external": external, "refused": 0}


def dump_native(data: dict[str, Any]) -> str:
    """Native catalog data as YAML text (what ``evaljobs catalog convert`` writes).

    Key order is kept (name first, scenarios last), so a converted catalog
    reads like a hand-written one; re-importing it yields the same catalog.
    """
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100,
                     default_flow_style=False)


# --------------------------------------------------------------------------- shared helpers


class Problems:
    """Collects errors and warnings while converting one file, one line each."""

    def __init__(self, source: str, lines: dict[tuple, int] | None = None, lenient: bool = False):
        self.source = source
        self.lines = lines or {}
        self.lenient = lenient
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self._seen: set[str] = set()
        #: Source assertions (expectations): imported, mapped to native checks, run externally, refused.
        self.counts: dict[str, int] = {"assertions": 0, "mapped": 0, "external": 0, "refused": 0}

    def count(self, what: str) -> None:
        self.counts["assertions"] += 1
        self.counts[what] += 1

    def _line(self, path: tuple) -> str:
        for end in range(len(path), -1, -1):  # the entry itself, else its nearest parent with a line
            line = self.lines.get(path[:end])
            if line:
                return f"{self.source}:{line}"
        return self.source

    def _format(self, path: tuple, where: str, what: str) -> str:
        text = f"{self._line(path)}: {where}: {what}" if where else f"{self._line(path)}: {what}"
        return " ".join(text.split("\n"))

    def error(self, path: tuple, where: str, what: str) -> None:
        line = self._format(path, where, what)
        if line not in self._seen:  # shared parts (defaultTest) are checked once per test
            self._seen.add(line)
            self.errors.append(line)

    def warn(self, path: tuple, where: str, what: str) -> None:
        line = self._format(path, where, what)
        if line not in self._seen:
            self._seen.add(line)
            self.warnings.append(line)

    def unsupported(self, path: tuple, where: str, what: str, fix: str) -> None:
        """Something evaljobs cannot grade: an error, or with ``lenient`` a skip warning."""
        if self.lenient:
            self.warn(path, where, f"{what}; skipped (--lenient)")
        else:
            self.error(path, where, f"{what}; {fix} or pass --lenient to skip it")

    def raise_if_any(self) -> None:
        if self.errors:
            raise CatalogError(self.errors)


def read_text(source: str) -> str:
    try:
        with open(source, encoding="utf-8-sig") as handle:
            return handle.read()
    except UnicodeDecodeError as exc:
        raise CatalogError([f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                            f"save it as UTF-8"]) from None
    except OSError as exc:
        raise CatalogError([f"{source}: cannot read: {exc.strerror or exc}"]) from None


def load_structured(text: str, source: str) -> tuple[Any, dict[tuple, int]]:
    """YAML (or JSON, which is YAML) data plus a map of paths to 1-based line numbers."""
    if not text.strip():
        raise CatalogError([f"{source}: the file is empty"])
    if source.lower().endswith(".json"):
        try:
            return json.loads(text), {}
        except json.JSONDecodeError as exc:
            raise CatalogError([f"{source}:{exc.lineno}: invalid JSON: {exc.msg} "
                                f"(column {exc.colno})"]) from None
    from evaljobs.catalog.yaml12 import SafeLoader  # YAML 1.2, as promptfoo (js-yaml) reads it: Yes/No stay strings

    loader = SafeLoader(text)
    try:
        node = loader.get_single_node()
        lines: dict[tuple, int] = {}
        if node is not None:
            _walk(node, (), lines, set())
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CatalogError([f"{where}: YAML syntax error: {problem}"]) from None
    finally:
        loader.dispose()
    if data is None:
        raise CatalogError([f"{source}: the file is empty"])
    return data, lines


def _walk(node: Any, path: tuple, lines: dict[tuple, int], seen: set[int]) -> None:
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                child = path + (key_node.value,)
                lines.setdefault(child, key_node.start_mark.line + 1)
                _walk(value_node, child, lines, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.setdefault(path + (i,), item.start_mark.line + 1)
            _walk(item, path + (i,), lines, seen)


_KEY_BAD = re.compile(r"[^A-Za-z0-9_.:/-]+")
_SLUG_BAD = re.compile(r"[^a-z0-9]+")


def key_part(value: Any) -> str:
    """A foreign identifier as part of a native scenario key (invalid characters become '-')."""
    text = _KEY_BAD.sub("-", str(value).strip()).strip("-")
    return text


def slug(text: str, limit: int = 60) -> str:
    """A readable, stable key part from free text ('Refund question?' -> 'refund-question')."""
    out = _SLUG_BAD.sub("-", text.lower()).strip("-")
    return out[:limit].rstrip("-")


_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def render(template: str, values: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """Substitute ``{{name}}`` placeholders; returns (text, missing names, unsupported expressions).

    Only plain names are supported (no filters or expressions): an evaluation
    must not depend on a template engine evaljobs does not run.
    """
    missing: list[str] = []
    unsupported: list[str] = []

    def sub(match: re.Match) -> str:
        name = match.group(1)
        if not _IDENT.fullmatch(name):
            unsupported.append(match.group(0))
            return match.group(0)
        if name not in values:
            missing.append(name)
            return match.group(0)
        return text_of(values[name])

    return _PLACEHOLDER.sub(sub, template), missing, unsupported


def text_of(value: Any) -> str:
    """A template value as text (JSON for lists and mappings, 'true'/'false' for booleans)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def strings(value: Any) -> list[str] | None:
    """A string or a list of strings/numbers as a list of strings; ``None`` if it is neither."""
    items = [value] if isinstance(value, (str, int, float)) and not isinstance(value, bool) else value
    if not isinstance(items, list):
        return None
    if not all(isinstance(i, (str, int, float)) and not isinstance(i, bool) for i in items):
        return None
    return [str(i) for i in items]


def check_keys(problems: Problems, path: tuple, where: str, raw: dict, valid: tuple[str, ...],
               *, what: str = "key") -> None:
    """Unknown keys are unsupported: an error (with a suggestion), or skipped under lenient."""
    for key in raw:
        if key not in valid:
            problems.unsupported(path + (key,), where,
                                 f"unknown {what} {key!r}{_suggest(str(key), valid)}",
                                 "remove or rename it")


def _suggest(key: str, valid: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(valid)})"


def _kind(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


from evaljobs.catalog.yaml12 import SafeDumper as _Yaml12Dumper  # noqa: E402


class _Dumper(_Yaml12Dumper):
    """Block style, and multi-line strings as ``|`` blocks for readable converted catalogs."""

    def ignore_aliases(self, data: Any) -> bool:  # no &anchors: every scenario reads on its own
        return True


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str_representer)


__all__ = ["FORMATS", "ImportResult", "detect_format", "dump_native", "load_any"]
