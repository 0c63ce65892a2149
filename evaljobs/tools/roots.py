"""The folder a catalog's relative MCP paths mean: the catalog file's, not the process's working directory.

``mcp: {command: [python, ../mcp_tools/server.py, --stdio]}`` is written from the catalog's folder, as
promptfoo joins a config's relative ``file://`` paths to the folder holding the config
(``getResolvedRelativePath`` in its ``src/util/file.ts``) and our promptfoo importer does likewise.
The catalog's snapshot (and its digest) keeps the path as written: an absolute path there would make
the digest depend on where the file lies, and a worker elsewhere has no such folder anyway.
So the folder travels beside the catalog, not in it: ``Run.options["catalog_root"]`` (set at submit),
and a pair's MCP calls are made inside :func:`catalog_root` for it. A ``command`` server then starts
with its ``cwd`` (as written, relative to the folder) under that folder.

A worker on which the folder does not exist errors the pair in one line naming it (nothing is started
from some other directory by chance): run the worker from a checkout at the same path. A server named
wholly by absolute paths, or given an absolute ``cwd``, needs no folder and starts anywhere.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from evaljobs.tools._common import describe
from evaljobs.tools.allowance import ToolNotAllowed

_root: ContextVar[str | None] = ContextVar("evaljobs_catalog_root", default=None)


def folder_of(source: str) -> str | None:
    """The absolute folder of the catalog file ``source`` (None: the catalog was not read from a file)."""
    if not source or source.startswith("<") or not os.path.isfile(source):
        return None
    return os.path.dirname(os.path.abspath(source))


@contextmanager
def catalog_root(folder: str | None) -> Iterator[None]:
    """Resolve the relative paths of MCP ``command`` servers called inside this block against ``folder``."""
    token = _root.set(folder)
    try:
        yield
    finally:
        _root.reset(token)


def rooted(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its ``cwd`` under the current catalog folder (the spec itself: no folder, or a ``url``).

    Raises :class:`ToolNotAllowed` (one line; the pair's error) when the folder does not exist here.
    """
    folder = _root.get()
    if folder is None or not spec.get("command") or _absolute(spec):
        return spec
    if not os.path.isdir(folder):
        raise ToolNotAllowed(f"MCP server {describe(spec)}: the catalog's folder {folder} does not "
                             f"exist on this worker, and the catalog's relative paths mean that folder; "
                             f"run the worker from a checkout at the same path")
    out = dict(spec)
    out["cwd"] = os.path.join(folder, spec.get("cwd") or "")
    return out


def _absolute(spec: dict[str, Any]) -> bool:
    """Whether the server needs no folder: an absolute ``cwd``, or a command whose every word is an absolute
    path, an option (``--stdio``) or a program found on PATH (the first word, without a slash)."""
    cwd = spec.get("cwd")
    if cwd:
        return os.path.isabs(cwd)
    command = [str(word) for word in spec["command"]]
    return all(os.path.isabs(word) or word.startswith("-") or (i == 0 and os.sep not in word)
               for i, word in enumerate(command))


__all__ = ["catalog_root", "folder_of", "rooted"]
