"""``evaljobs init``: a starter project in one command.

Writes a commented starter catalog (a plain scenario, one with a tool, one with an
LLM-judge rubric), the catalog JSON Schema beside it (the catalog's first line points
editors at it), a ``providers.yaml`` with the built-in presets and the governor's
settings commented, and a GitHub Actions workflow that runs the catalog with
``--fail-under`` and uploads the JUnit and HTML reports.

It never overwrites a file unless asked (``force``): an existing file is reported
and left alone, so running ``init`` twice, or in a project that already has a
``catalog.yaml``, loses nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from evaljobs.catalog.schema import catalog_schema_json
from evaljobs.errors import UsageError
from evaljobs.resources import read_text

CATALOG = "catalog.yaml"
SCHEMA = "catalog.schema.json"
PROVIDERS = "providers.yaml"
WORKFLOW = ".github/workflows/evals.yml"


@dataclass(frozen=True)
class Written:
    """One file ``init`` considered: its path and what happened (written, overwritten, kept)."""

    path: Path
    action: str


def _repository_root(directory: Path) -> Path | None:
    for candidate in (directory, *directory.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def _workflow_text(directory: Path) -> str:
    """The workflow, with ``working-directory`` set to ``directory`` relative to the repository."""
    root = _repository_root(directory)
    workdir = directory.relative_to(root).as_posix() if root else "."
    text = read_text("init/github-workflow.yml")
    return text.replace("{workdir}", workdir or ".").replace("{version}", version("evaljobs"))


def starter_files(directory: Path) -> dict[str, str]:
    """The starter files for ``directory`` (relative path -> text)."""
    return {CATALOG: read_text("init/catalog.yaml"), SCHEMA: catalog_schema_json(),
            PROVIDERS: read_text("init/providers.yaml"), WORKFLOW: _workflow_text(directory)}


def init_project(directory: str | os.PathLike = ".", *, force: bool = False) -> list[Written]:
    """Write the starter files into ``directory`` (created if missing); existing files are kept unless ``force``."""
    target = Path(directory).resolve()
    if target.exists() and not target.is_dir():
        raise UsageError(f"{directory}: exists and is not a folder; give a folder for the starter files")
    out: list[Written] = []
    for name, text in starter_files(target).items():
        path = target / name
        if path.exists() and not force:
            out.append(Written(path, "kept"))
            continue
        action = "overwrote" if path.exists() else "wrote"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None
        out.append(Written(path, action))
    return out


def next_commands(directory: str | os.PathLike = ".") -> list[str]:
    """The three commands to run next, with paths as the user typed the folder."""
    prefix = "" if Path(directory) == Path(".") else f"{Path(directory).as_posix().rstrip('/')}/"
    return [f"evaljobs catalog check {prefix}{CATALOG}",
            f"evaljobs run {prefix}{CATALOG} -m sim/fast -m sim/smart",
            f"evaljobs run {prefix}{CATALOG} -m openai/gpt-4o-mini --judge-model openai/gpt-4o-mini "
            f"--providers {prefix}{PROVIDERS} --fail-under 90%"]


__all__ = ["CATALOG", "PROVIDERS", "SCHEMA", "WORKFLOW", "Written", "init_project", "next_commands",
           "starter_files"]
