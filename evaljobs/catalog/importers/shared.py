"""What every importer uses: the problem collector, reading files with line numbers, keys and templates.

Kept apart from the package's ``__init__`` (which picks an importer by format)
so the importers import these helpers without importing the package that
imports them.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from evaljobs.catalog.model import CatalogError
from evaljobs.catalog.text import text_of
from evaljobs.catalog.yaml12 import FastLoader, SafeLoader
from evaljobs.catalog.yaml_bounds import check_expansion
from evaljobs.errors import suggest


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
    #: A native YAML catalog as :func:`evaljobs.catalog.reads_catalog` read it (data, lines, duplicate
    #: keys): callers validate this instead of reading the file a second time (100,000 scenarios).
    native: Any = None


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
        #: Where something was dropped under ``lenient`` (each also counted as refused): an importer marks
        #: the tests that lost a part as not gradable, never grades them on what is left.
        self.dropped: list[tuple] = []
        #: Count each dropped part as refused in :meth:`unsupported` (the promptfoo importer, where any key,
        #: column or template can be dropped); the other importers count what they refuse themselves.
        self.count_refusals = False

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
            self.dropped.append(tuple(path))
            line = self._format(path, where, f"{what}; skipped (--lenient)")
            if self.count_refusals and line not in self._seen:
                self.counts["refused"] += 1  # once per dropped part, however many tests share it
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
        raise CatalogError([(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                            f"save it as UTF-8")]) from None
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
            raise CatalogError([(f"{source}:{exc.lineno}: invalid JSON: {exc.msg} "
                                f"(column {exc.colno})")]) from None
        except RecursionError:
            raise CatalogError(
                [f"{source}: JSON is nested too deeply (more levels than Python can read); flatten it"]
            ) from None
        except ValueError as exc:  # e.g. an integer of more digits than Python converts
            raise CatalogError([f"{source}: invalid JSON: {str(exc).split(';')[0]}"]) from None
    loader = SafeLoader(text)  # YAML 1.2, as promptfoo (js-yaml) reads it: Yes/No stay strings
    try:
        check_expansion(text, source, FastLoader)  # an alias bomb is refused before anything expands
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
    if "/" in text or text in (".", ".."):  # never a part a browser resolves (see catalog.validate)
        text = "/".join(part for part in text.split("/") if part not in ("", ".", "..")) or "-"
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
                                 f"unknown {what} {key!r}{suggest_key(str(key), valid)}",
                                 "remove or rename it")


def suggest_key(key: str, valid: tuple[str, ...] | list[str]) -> str:
    """`` (did you mean 'x'?)``, else `` (known: a, b, c)``."""
    return suggest(key, valid) or f" (known: {', '.join(valid)})"


def kind(value: Any) -> str:
    """What a value is, for messages about foreign files (shorter than the catalog's)."""
    if value is None:
        return "empty"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


__all__ = [
    "ImportResult",
    "Problems",
    "check_keys",
    "key_part",
    "kind",
    "load_structured",
    "read_text",
    "render",
    "slug",
    "strings",
    "suggest_key",
    "text_of",
]
