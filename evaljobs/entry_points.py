"""The entry points installed distributions register, read without ``importlib.metadata``.

Why: every run looks up host middleware and context providers by entry point. ``importlib.metadata``
costs a one-scenario ``evaljobs run`` twice: its import (with ``zipfile``, ``csv``, ``email.message``
and friends, ~110 M instructions) and its scan, which builds a ``Distribution`` per installed package
and parses each one's metadata (a third of the run's own time, issue 42). What a run needs is the
``entry_points.txt`` of each distribution found on ``sys.path``, so this module reads exactly those
files, the way ``importlib.metadata.entry_points()`` finds them:

* every ``sys.path`` entry in order (``""`` is the working directory), each directory's
  ``*.dist-info`` and ``*.egg-info`` children in listing order;
* one distribution per normalized name, the first found (``importlib.metadata``'s ``_unique``);
* ``entry_points.txt`` parsed as ``importlib.metadata`` does (``[group]`` sections, ``name = value``,
  ``#`` comments), each entry loaded as ``module:attr.attr`` with ``[extras]`` ignored.

Nothing is cached across calls: a package installed while the process runs (or before the next
command) is found on the next scan, as before. Where the environment is not plain directories — a
zip or egg on ``sys.path``, or an import hook that finds distributions of its own — the scan is
``importlib.metadata``'s, unchanged.
"""
# No ``from __future__ import annotations`` here: typing turns a NamedTuple's string annotations into
# ForwardRefs, each compiled from its text at import (start-up time, BENCHMARKS.md session 13).

import importlib
import os
import re
import sys
from functools import reduce
from typing import Any, Iterator, NamedTuple

_SUFFIXES = (".dist-info", ".egg-info")
#: ``importlib.metadata.EntryPoint.pattern``.
_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


class EntryPoint(NamedTuple):
    """One registered entry point: what ``importlib.metadata.EntryPoint`` offers that evaljobs uses."""

    name: str
    value: str
    group: str

    def load(self) -> Any:
        """The object the entry point names (its module imported), as ``importlib.metadata`` loads it."""
        match = _VALUE.match(self.value)
        if match is None:
            raise ValueError(f"entry point {self.name!r} has a malformed value {self.value!r}")
        module = importlib.import_module(match.group("module"))
        return reduce(getattr, filter(None, (match.group("attr") or "").split(".")), module)


def _normalized(stem: str) -> str:
    """A distribution's key from its folder's name (``importlib.metadata``'s ``Prepared.normalize``)."""
    return re.sub(r"[-_.]+", "-", stem.partition("-")[0]).lower().replace("-", "_")


def _plain(path: list[str]) -> bool:
    """Whether every distribution is a folder on ``path`` (else ``importlib.metadata`` scans)."""
    finders = [f for f in sys.meta_path if getattr(f, "find_distributions", None) is not None]
    if any(getattr(f, "__name__", None) != "PathFinder" for f in finders):
        return False
    return not any(entry.endswith(".egg") or os.path.isfile(entry or ".") for entry in path)


def _parse(text: str, group: str | None) -> Iterator[EntryPoint]:
    section = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section is not None and (group is None or section == group):
            name, _, value = line.partition("=")
            yield EntryPoint(name.strip(), value.strip(), section)


def installed(group: str | None = None) -> list[EntryPoint]:
    """The entry points of ``group`` (every group when None), in ``importlib.metadata``'s order."""
    path = list(sys.path)
    if not _plain(path):
        from importlib.metadata import entry_points  # noqa: PLC0415 - only for environments with zips/hooks

        found: Any = entry_points() if group is None else entry_points(group=group)
        if hasattr(found, "values"):  # Python < 3.12: every group, as a dict of groups
            found = [ep for eps in found.values() for ep in eps]
        return [EntryPoint(ep.name, ep.value, ep.group) for ep in found]
    seen: set[str] = set()
    result: list[EntryPoint] = []
    for entry in path:
        folder = entry or "."
        try:
            children = os.listdir(folder)
        except OSError:  # missing, unreadable, not a directory
            continue
        infos: dict[str, list[str]] = {}
        for child in children:
            low = child.lower()
            if low.endswith(_SUFFIXES):
                infos.setdefault(_normalized(low.rpartition(".")[0]), []).append(child)
        for key, names in infos.items():
            for child in names:
                if key in seen:
                    continue
                seen.add(key)
                try:
                    with open(os.path.join(folder, child, "entry_points.txt"), encoding="utf-8") as file:
                        text = file.read()
                except OSError:  # no entry points (or an egg-info file)
                    continue
                result.extend(_parse(text, group))
    return result
