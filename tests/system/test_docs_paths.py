"""What the documentation and the docstrings cite exists: every repository path and every module name.

A file moved by a refactor (the governor, the simulated provider and the live tools out of
``providers/``; the flat modules into subpackages) leaves its old name behind in the prose that
explains it, and a reader who follows ``evaljobs/providers/governor.py`` or
``evaljobs.recovery.PeriodicRecovery`` finds nothing. Read from the text (nothing is imported):

* paths: ``evaljobs/…``, ``middleware/…``, ``tests/…``, ``scripts/…``, ``docs/…``, ``examples/…``
  (a glob such as ``tests/store/test_store*.py`` must match a file), a path written from inside the package
  (``store/results.py``, ``pipeline/``) under ``evaljobs/`` or the repository, and the top-level
  ``NAME.md`` documents (``DESIGN.md`` is not in the repository);
* module names: ``evaljobs.x.y`` and ``evaljobs_middleware.x`` name a module file, and the name after
  the module (``evaljobs.pipeline.recovery.PeriodicRecovery``) is defined at its top level;

* invariants: "invariant 13", "invariants 1, 2 and 4" name invariants docs/internals.md lists;

in docs/*.md, README.md, RELIABILITY.md, BENCHMARKS.md, CHANGELOG.md, and in the docstrings and
comments of evaljobs/, middleware/, tests/, scripts/ and examples/ (not their code: a logger named
``evaljobs.actors`` or a span attribute ``evaljobs.model`` is a name, not a reference). This module's
own docstrings cite missing files on purpose, as examples, and are not checked.
"""
from __future__ import annotations

import ast
import collections
import functools
import glob
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The documents whose citations are checked (docs/*.md include some of these by a marker only).
DOCUMENTS = ("README.md", "RELIABILITY.md", "BENCHMARKS.md", "CHANGELOG.md", "docs/*.md")
#: The source folders whose docstrings and comments are checked (Python files, and scripts/' programs).
SOURCE_FOLDERS = ("evaljobs", "middleware", "tests", "scripts", "examples")
#: Not checked: this module (its examples of stale citations), other tools' files kept as test data.
NOT_CHECKED = ("tests/system/test_docs_paths.py", "tests/data/")
#: Folders of the repository a path may start with.
TOP_FOLDERS = ("evaljobs", "middleware", "tests", "scripts", "docs", "examples")
#: Names that look like modules but are not: entry-point groups hosts register under.
NOT_MODULES = {
    "evaljobs.adapters": "entry-point group (evaluation/adapters.py, ADAPTER_GROUP)",
    "evaljobs.context_providers": "entry-point group (pipeline/broker.py)",
    "evaljobs.middleware": "entry-point group (pipeline/host_middleware.py)",
}
#: Cited paths that do not exist on purpose, with the reason.
NOT_FILES = {
    "docs/bench/epochs/": "the folder `scripts/bench epochs` writes its figures to",
}

_PACKAGES = tuple(p.name for p in (ROOT / "evaljobs").iterdir() if (p / "__init__.py").is_file())
_PATH = re.compile(
    r"(?<![\w./~$:@-])"  # not the middle of a longer path, a URL, a home folder or a variable
    rf"((?:{'|'.join(TOP_FOLDERS + _PACKAGES)})/[\w.*/-]*[\w*/])"
)
_TOP_DOCUMENT = re.compile(r"(?<![\w./-])([A-Z][A-Z_]+\.md)\b")
_MODULE = re.compile(r"(?<![\w./-])((?:evaljobs|evaljobs_middleware)(?:\.[A-Za-z_]\w*)+)")
_INVARIANTS = re.compile(r"\binvariants? (\d+(?:(?:, | and |, and | ?[-–] ?)\d+)*)")
_SUFFIXES = {"py", "md", "yaml", "yml", "json", "toml", "txt", "log", "db", "cfg", "html"}


def cited_paths(text: str) -> list[str]:
    """The repository paths ``text`` cites (a sentence's full stop is not part of one)."""
    return [m.group(1).rstrip(".") for m in _PATH.finditer(text)] + _TOP_DOCUMENT.findall(text)


def cited_modules(text: str) -> list[str]:
    """The ``evaljobs.…`` / ``evaljobs_middleware.…`` names ``text`` cites (not file names)."""
    found = [m.group(1).rstrip(".") for m in _MODULE.finditer(text)]
    return [name for name in found if name.rsplit(".", 1)[-1] not in _SUFFIXES]


def path_exists(root: Path, path: str) -> bool:
    """Whether ``path`` names a file or folder (a glob: matches one), from the root or inside evaljobs/.

    A path that starts with a subpackage's name is a source path only when it names a module or a
    folder (``store/results.py``, ``pipeline/``): ``reports/junit.xml`` is where a command writes.
    """
    if "/" not in path:  # a top-level document
        return (root / path).is_file()
    if path.split("/")[0] not in TOP_FOLDERS and not path.endswith((".py", "/")):
        return True
    for base in (root, root / "evaljobs"):
        if "*" in path:
            if glob.glob(str(base / path)):
                return True
        elif (base / path).exists():
            return True
    return False


def module_problem(root: Path, name: str) -> str | None:
    """Why ``name`` names no module or no top-level name of one; None when it does."""
    if name in NOT_MODULES:
        return None
    parts = name.split(".")
    folder = ["middleware"] if parts[0] == "evaljobs_middleware" else ["evaljobs"]
    for i in range(len(parts), 0, -1):
        base = root.joinpath(*folder, *parts[1:i])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                if i == len(parts) or parts[i] in _top_level_names(candidate):
                    return None
                return f"{'.'.join(parts[:i])} defines no {parts[i]!r}"
    return f"no module {name}"


def _top_level_names(path: Path) -> frozenset[str]:
    """The names a module binds at its top level (in ``if``/``try`` blocks too) and its lazy exports."""
    stat = path.stat()
    return _names_bound(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _names_bound(path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    """:func:`_top_level_names`, read once per version of a file: a module is cited hundreds of times (the
    tests' CPU, issue 42 item 6); a file rewritten since is read again."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        for inner in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else (node,):
            if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(inner.name)
            elif isinstance(inner, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in inner.names)
            elif isinstance(inner, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    # names loaded lazily (evaljobs/__init__.py's _EXPORTS table: name → module)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
            names.update(k.value for k in node.keys
                         if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return frozenset(names)


def cited_invariants(text: str) -> list[int]:
    """The invariant numbers ``text`` cites ("invariant 3", "invariants 1, 2 and 4", "invariants 1-3")."""
    numbers: list[int] = []
    for match in _INVARIANTS.finditer(text):
        found = [int(n) for n in re.findall(r"\d+", match.group(1))]
        ranged = re.search(r"\d+ ?[-–] ?\d+$", match.group(1))
        numbers += list(range(found[0], found[-1] + 1)) if ranged and len(found) == 2 else found
    return numbers


def listed_invariants(root: Path) -> int:
    """How many invariants docs/internals.md lists (its "Invariants" section, numbered 1. 2. …)."""
    text = (root / "docs" / "internals.md").read_text(encoding="utf-8")
    section = text.split("## Invariants", 1)[1].split("\n## ", 1)[0]
    return len(re.findall(r"^\d+\. ", section, re.M))


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of a Python file's docstrings and comments, the comments of a shell script, or every
    line of any other file."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py" and not text.startswith("#!/usr/bin/env python"):
        if text.startswith("#!"):
            return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith("#")]
        return list(enumerate(text.splitlines(), 1))
    found: list[tuple[int, str]] = []
    for node in _statements(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                found += [(first.lineno + i, line) for i, line in enumerate(first.value.value.splitlines())]
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def _statements(tree: ast.AST):
    """Every node of ``tree`` but expressions and what is inside them: a docstring's owner (module, class,
    function) is a statement or the module, never inside an expression, so this finds what ``ast.walk``
    finds for about a third of the work (the tests' CPU, issue 42 item 6)."""
    todo = collections.deque([tree])
    while todo:
        node = todo.popleft()
        yield node
        todo.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.expr))


def dangling(root: Path, files: list[Path]) -> list[str]:
    """``file:line: cited`` for every path or module name cited in ``files`` that does not exist."""
    problems = []
    invariants = listed_invariants(root)
    for path in files:
        where = path.relative_to(root)
        for number, line in prose(path):
            for invariant in cited_invariants(line):
                if not 1 <= invariant <= invariants:
                    problems.append(f"{where}:{number}: invariant {invariant} is not in docs/internals.md "
                                    f"(it lists {invariants})")
            for cited in cited_paths(line):
                if cited not in NOT_FILES and not path_exists(root, cited):
                    problems.append(f"{where}:{number}: {cited} does not exist")
            for name in cited_modules(line):
                why = module_problem(root, name)
                if why:
                    problems.append(f"{where}:{number}: {name}: {why}")
    return problems


def checked_files(root: Path) -> list[Path]:
    files = [p for pattern in DOCUMENTS for p in sorted(root.glob(pattern))]
    files += [p for folder in SOURCE_FOLDERS for p in sorted((root / folder).rglob("*.py"))]
    scripts = root / "scripts"
    if scripts.is_dir():
        files += [p for p in sorted(scripts.iterdir()) if p.is_file() and p.suffix == ""]
    return [p for p in files if not p.relative_to(root).as_posix().startswith(NOT_CHECKED)]


def test_every_cited_path_and_module_exists() -> None:
    files = checked_files(ROOT)
    assert len(files) > 100 and any(p.name == "internals.md" for p in files)
    problems = dangling(ROOT, files)
    assert not problems, "cited but not in the repository:\n" + "\n".join(problems)


def test_the_checker_finds_a_missing_path_and_a_stale_module(tmp_path: Path) -> None:
    """A tree of its own: what exists passes, each kind of dangling citation is named with its line.

    Its test paths name no real test module, so moving the real ones (issue 41) leaves them alone."""
    (tmp_path / "evaljobs" / "store").mkdir(parents=True)
    (tmp_path / "evaljobs" / "__init__.py").write_text("")
    (tmp_path / "evaljobs" / "store" / "__init__.py").write_text("from .runs import get_run\n")
    (tmp_path / "evaljobs" / "store" / "runs.py").write_text(
        '"""Runs: see ``evaljobs/store/runs.py`` and store/runs.py."""\n'
        "# evaljobs.store.runs.get_run and evaljobs.store.get_run (invariants 1 and 2; invariant 3)\n"
        "def get_run():\n"
        '    """Gone: evaljobs/providers/governor.py, evaljobs.store.runs.lost, tests/test_gone*.py."""\n'
        "logger = 'evaljobs.actors'  # the string is code, not prose: not checked\n"
    )
    (tmp_path / "scripts").mkdir()
    # a shell script: its comments are checked, its commands are not
    bench = "#!/usr/bin/env bash\n# tests/test_planted_bench.py\necho docs/x.md\n"
    (tmp_path / "scripts" / "bench").write_text(bench)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_planted_store.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "internals.md").write_text(
        "The store: `evaljobs/store/` and `tests/test_planted*.py`, from https://example.com/evaljobs/x.py.\n"
        "The design is in DESIGN.md; the governor in `evaljobs/governor/limits.py`.\n"
        "## Invariants\n\n1. **One**\n2. **Two**\n\n## Next\n"
        "Hosts register under `evaljobs.adapters`; recovery is `evaljobs.recovery.PeriodicRecovery`.\n"
    )
    problems = dangling(tmp_path, checked_files(tmp_path))
    assert sorted(problems) == sorted([
        "docs/internals.md:2: DESIGN.md does not exist",
        "docs/internals.md:2: evaljobs/governor/limits.py does not exist",
        "evaljobs/store/runs.py:2: invariant 3 is not in docs/internals.md (it lists 2)",
        "scripts/bench:2: tests/test_planted_bench.py does not exist",
        "docs/internals.md:9: evaljobs.recovery.PeriodicRecovery: evaljobs defines no 'recovery'",
        "evaljobs/store/runs.py:4: evaljobs/providers/governor.py does not exist",
        "evaljobs/store/runs.py:4: tests/test_gone*.py does not exist",
        "evaljobs/store/runs.py:4: evaljobs.store.runs.lost: evaljobs.store.runs defines no 'lost'",
    ]), problems
    (tmp_path / "docs" / "internals.md").write_text("`evaljobs/store/runs.py`.\n## Invariants\n1. x\n")
    (tmp_path / "scripts" / "bench").write_text("#!/usr/bin/env bash\n# docs/internals.md (invariant 1)\n")
    (tmp_path / "evaljobs" / "store" / "runs.py").write_text('"""Runs: ``evaljobs.store.get_run``."""\n')
    assert dangling(tmp_path, checked_files(tmp_path)) == []
