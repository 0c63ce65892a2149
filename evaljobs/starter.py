"""``evaljobs init``: a starter project in one call (:func:`start_project`).

Writes a commented starter catalog (a plain scenario, one with a tool, one with an
LLM-judge rubric, scripted for the simulated provider so ``sim/smart`` passes and
``sim/fast`` fails where the comments say why), the catalog JSON Schema beside it (the
catalog's first line points editors at it), a ``providers.yaml`` with the built-in presets
and the governor's settings commented, and a GitHub Actions workflow that runs the catalog
with ``--fail-under`` and uploads the JUnit and HTML reports.

GitHub reads workflows only under the repository's root, so the workflow goes to
``ROOT/.github/workflows/`` of the git repository that holds the folder (or ``repo_root``),
and it installs evaljobs the way it is installed where ``init`` runs: CI cannot ``pip install
evaljobs`` from an index where evaljobs is not published.

It never overwrites a file unless asked (``force``): an existing file is reported
and left alone, so running ``init`` twice, or in a project that already has a
``catalog.yaml``, loses nothing.

The templates are package data (``evaljobs/data/init/``, read through :mod:`evaljobs.resources`);
this module is ``init``'s loader of them; ``evaljobs init`` reaches it through
:func:`evaljobs.api.start_project`.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from urllib.parse import unquote, urlsplit

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


@dataclass(frozen=True)
class StartedProject:
    """What :func:`start_project` did: each file considered, what the user must know, what to run next."""

    written: list[Written]
    notes: list[str]
    next_commands: list[str]


@dataclass(frozen=True)
class Requirement:
    """The pip requirement CI installs evaljobs with, and why (a comment in the workflow)."""

    line: str
    why: str
    #: Set when CI cannot reach the install ``line`` falls back from: what the user must change.
    warning: str = ""


def repository_root(directory: Path) -> Path | None:
    """The git repository holding ``directory`` (the nearest folder with ``.git``), or None."""
    for candidate in (directory, *directory.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def install_requirement(root: Path) -> Requirement:
    """How CI should install evaljobs: the way it is installed here (PEP 610 ``direct_url.json``).

    From an index: that exact version. From a VCS URL: that commit. From a source folder or a
    file inside the repository: its path from the repository's root. Anything else (a folder or
    wheel outside the repository) cannot be reached from CI: the exact version, with a warning.
    """
    try:
        dist = distribution("evaljobs")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return Requirement("evaljobs", "evaljobs is not installed where init ran",
                           "evaljobs is not installed here: set the install line of the workflow")
    version = dist.version
    try:
        info = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        info = None
    if not isinstance(info, dict) or not isinstance(info.get("url"), str):
        return Requirement(
            f"evaljobs=={version}",
            f"evaljobs {version} from the package index it was installed "
            f"from (add --index-url to pip for a private index)",
        )
    url = info["url"]
    vcs = info.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs") and vcs.get("commit_id"):
        return Requirement(f"evaljobs @ {vcs['vcs']}+{url}@{vcs['commit_id']}",
                           f"evaljobs {version} at the commit it was installed from")
    parts = urlsplit(url)
    if parts.scheme != "file":
        return Requirement(f"evaljobs @ {url}", f"evaljobs {version} from the archive it was installed from")
    path = Path(unquote(parts.path))
    try:
        inside = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        inside = None
    if inside is not None:
        where = "./" if inside == "." else f"./{inside}"
        return Requirement(where, f"evaljobs {version} from its source in this repository ({where})")
    remote = _git_remote(path)
    if remote:
        return Requirement(f"evaljobs @ git+{remote[0]}@{remote[1]}",
                           f"evaljobs {version} at the commit of the checkout it was installed from")
    return Requirement(f"evaljobs=={version}", f"evaljobs {version} (it was installed from {path})",
                       f"evaljobs was installed from {path}, outside the repository, which CI cannot reach: "
                       f"edit the install line of the workflow (a git URL, a wheel in the repository, "
                       f"your package index)")


def _git_remote(path: Path) -> tuple[str, str] | None:
    """(origin URL, HEAD commit) of the git checkout at ``path`` when CI could clone it (not a local path)."""
    import subprocess

    try:
        url = subprocess.run(
            ["git", "-C", str(path), "config", "--get", "remote.origin.url"],
            capture_output=True,
            check=False,
            text=True,
            timeout=10,
        ).stdout.strip()
        commit = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if not commit or not url.startswith(("https://", "ssh://", "git@")):
        return None
    return ("ssh://" + url[4:].replace(":", "/", 1) if url.startswith("git@") else url), commit


def _workflow_text(directory: Path, root: Path, requirement: Requirement) -> str:
    """The workflow, with ``working-directory`` set to ``directory`` relative to the repository."""
    workdir = directory.relative_to(root).as_posix() if directory != root else "."
    text = read_text("init/github-workflow.yml")
    # upload-artifact ignores working-directory
    artifacts = "reports/" if workdir == "." else f"{workdir}/reports/"
    return (text.replace("{workdir}", workdir).replace("{artifacts}", artifacts)
            .replace("{requirement}", requirement.line)
            .replace("{requirement_why}", requirement.why))


def _root_for(target: Path, repo_root: str | os.PathLike | None) -> Path:
    if repo_root is None:
        return repository_root(target) or target
    root = Path(repo_root).resolve()
    try:
        target.relative_to(root)
    except ValueError:
        raise UsageError(f"--repo-root {repo_root}: {target} is not inside it; give the folder of the "
                         f"repository that holds the starter files") from None
    return root


def starter_files(directory: Path, repo_root: Path | None = None) -> dict[Path, str]:
    """The starter files for ``directory`` (path -> text); the workflow under the repository's root."""
    root = repo_root or repository_root(directory) or directory
    return {directory / CATALOG: read_text("init/catalog.yaml"), directory / SCHEMA: catalog_schema_json(),
            directory / PROVIDERS: read_text("init/providers.yaml"),
            root / WORKFLOW: _workflow_text(directory, root, install_requirement(root))}


def init_project(directory: str | os.PathLike = ".", *, force: bool = False,
                 repo_root: str | os.PathLike | None = None) -> list[Written]:
    """Write the starter files into ``directory`` (created if missing); existing files are kept unless
    ``force``.

    The workflow goes under ``repo_root``, by default the root of the git repository that holds
    ``directory`` (``directory`` itself when there is none: make it the repository's root, or move
    ``.github/`` there).
    """
    target = Path(directory).resolve()
    if target.exists() and not target.is_dir():
        raise UsageError(f"{directory}: exists and is not a folder; give a folder for the starter files")
    root = _root_for(target, repo_root)
    out: list[Written] = []
    for path, text in starter_files(target, root).items():
        if path.exists() and not force:
            out.append(Written(path, "kept"))
            continue
        action = "overwrote" if path.exists() else "wrote"
        try:
            _write_regular(target if path.is_relative_to(target) else root, path, text)
        except OSError as exc:
            raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None
        out.append(Written(path, action))
    return out


def start_project(directory: str | os.PathLike = ".", *, force: bool = False,
                  repo_root: str | os.PathLike | None = None) -> StartedProject:
    """:func:`init_project`, with the :func:`notes` on where the workflow went and the
    :func:`next_commands` (paths as the user typed the folder): everything ``evaljobs init`` prints."""
    written = init_project(directory, force=force, repo_root=repo_root)
    return StartedProject(written=written, notes=notes(directory, repo_root),
                          next_commands=next_commands(directory))


def notes(directory: str | os.PathLike = ".", repo_root: str | os.PathLike | None = None) -> list[str]:
    """What the user must know about the workflow ``init`` wrote (where it went, how it installs)."""
    target = Path(directory).resolve()
    root = _root_for(target, repo_root)
    out = []
    if repo_root is None and repository_root(target) is None:
        out.append(f"no git repository holds {target}: the workflow went to {root / WORKFLOW}; GitHub reads "
                   f"it only at the repository's root (git init there, or init --repo-root DIR)")
    warning = install_requirement(root).warning
    if warning:
        out.append(warning)
    return out


def _write_regular(target: Path, path: Path, text: str) -> None:
    """Write ``path`` as a regular file inside ``target`` (the folder, or the repository root the workflow
    goes to): never through a symbolic link.

    Why: ``init`` runs in folders it did not make; a ``catalog.yaml`` (or ``.github``) that is a
    link — dangling or not — would carry the write outside the folder. ``O_NOFOLLOW`` refuses a
    link at the last step even if one appears after the check.
    """
    folder = target
    linked = path.is_symlink()
    for part in path.relative_to(target).parts[:-1]:  # each folder on the way, before any is made
        folder = folder / part
        linked = linked or folder.is_symlink()
    if linked:
        raise UsageError(
            f"{path}: is a symbolic link, or in a folder that links out of {target}; init writes "
            f"only regular files inside its folder: remove the link or choose another folder"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def next_commands(directory: str | os.PathLike = ".") -> list[str]:
    """The three commands to run next, with paths as the user typed the folder."""
    prefix = "" if Path(directory) == Path(".") else f"{Path(directory).as_posix().rstrip('/')}/"
    return [f"evaljobs catalog check {prefix}{CATALOG}",
            f"evaljobs run {prefix}{CATALOG} -m sim/fast -m sim/smart",
            (f"evaljobs run {prefix}{CATALOG} -m openai/gpt-4o-mini --judge-model openai/gpt-4.1 "
            f"--providers {prefix}{PROVIDERS} --fail-under 90%")]


__all__ = ["CATALOG", "PROVIDERS", "SCHEMA", "WORKFLOW", "Requirement", "StartedProject", "Written",
           "init_project", "start_project",
           "install_requirement", "next_commands", "notes", "repository_root", "starter_files"]
