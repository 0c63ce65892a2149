"""The architecture, checked from the source with ``ast`` (nothing is imported or run).

docs/internals.md ("Packages and who may import whom") states the rules; this module
enforces them, so a change that breaks one fails here with the file and line
to fix rather than surfacing months later as an import cycle at start-up or a
setting nobody can find:

* lower layers never import higher ones (``LAYERS``, bottom first: config,
  errors, clock, redact, printable, collector and telemetry · catalog and middleware · network (the
  deadline wall, provider errors) · the governor · providers, the simulated provider and live tools ·
  evaluation · reports and store
  · pipeline · api, workers, the viewer, the starter and bench · cli · the package
  root), and every module has a place in that order;
* no import cycle between modules (any import counts: module top, function
  body or ``if TYPE_CHECKING`` — a cycle dodged by a late import is still a
  cycle in the design);
* ``middleware/`` (shipped as ``evaljobs_middleware``) imports nothing from
  ``evaljobs``: it is generic Dramatiq middleware;
* catalog, grading and report code import none of dramatiq, redis, peewee,
  httpx or mcp: parsing a catalog, grading an answer and rendering a report are
  pure functions of their inputs;
* no module other than ``evaljobs/config.py`` reads ``os.environ`` (or
  ``os.getenv``), and none at all writes it;
* setup.cfg's ``packages`` list is exactly the packages on disk (a package
  missing from the list is silently left out of the wheel);
* no module is over ``MAX_LINES`` lines unless its docstring says why it must
  stay whole (the words "stays whole" or "kept whole" and a reason);
* no test module imports another test module (or conftest): what tests share
  lives in ``tests/helpers/`` and ``tests/conftest.py``;
* a CLI command decides no exit code (``sys.exit``, ``SystemExit``, ``ctx.exit``):
  the library returns a verdict and ``cli/_options.py`` maps it;
* a CLI module imports from ``evaljobs`` only the public API (``CLI_PUBLIC_API``: ``evaljobs.api``,
  the error family, the settings and the CLI's own modules): a command is options → one
  ``Session`` call → printing. From a package below the API a command may take constants only
  (``CLI_CONSTANTS_FROM``: the benchmark's defaults its ``--help`` shows), from its face, never its
  modules, and never a function or class to call. The modules not yet
  converted are listed by name (``CLI_NOT_YET_ON_THE_API``); the list only shrinks (a listed module that keeps
  to the public API fails until it is taken off);
* one place decides retries: in ``pipeline/`` and ``evaluation/``, nothing but
  the pair runner (``evaljobs/pipeline/pairs.py``) and the in-process strategy's
  outcome mapping (``strategies.settle``) sleeps or loops retrying on a provider
  error (``RETRY_DECIDERS``; a loop that only re-raises is not a retry);
* a module that loads names lazily (an ``_EXPORTS`` table: ``import evaljobs``
  stays cheap) imports each of them under ``if TYPE_CHECKING:`` too and lists
  them in a literal ``__all__``, so editors, type checkers and linters see them;
* no module imports a ``_private`` name (or a ``_private`` module) of another
  package: what other packages use is public (``FACES``);
* a package with a public face (``FACES``: the store, the governor, the provider
  client) is imported by the other layers only through its ``__init__`` and the
  names in its ``__all__``, never through its modules (its own layer's
  packages, built with it, may reach in);
* an import of our own modules inside a function is allowed in ``cli/`` (the
  commands' start-up time) and elsewhere only with its reason in a comment on
  that line or above its block of imports (start-up time, an optional extra, a plugin
  loaded before the package): a late import that hides a design problem has
  to say so.
* a criterion is declared in two modules named for it, its catalog half
  (``evaljobs/catalog/criteria/``) and its grading half (``evaljobs/evaluation/graders/``);
  a criterion the registry handles whole is named nowhere else (``CRITERION_NAMED_ELSEWHERE``
  lists the exceptions, with why; it only shrinks), and no criterion's name is compared, matched,
  looked up or listed outside its two modules and the two tables (``CRITERION_HOMONYMS``: a foreign
  format's words spelled alike, with why; it only shrinks);
* a run option is declared once (``RUN_OPTIONS`` in ``evaljobs/run_options.py``): no other module
  builds a ``RunOption``, and none keeps a tuple, list, set or mapping of the per-pair ones, or passes
  them one keyword each;
* the tests mirror the packages: no test module at the root of ``tests/`` (only ``conftest.py``), each
  folder of ``tests/`` names a package of evaljobs (or ``middleware``, ``system``, ``helpers``, ``data``),
  and one ``sim`` fixture and one click ``CliRunner`` serve them all (tests/conftest.py,
  tests/helpers/cli.py); mypy's ``files`` covers every source tree.

Each checker is a plain function of a source tree, so every rule is also shown
to fail on a violation planted in ``tmp_path`` — a rule that cannot fail proves
nothing.
"""
from __future__ import annotations

import ast
import configparser
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: import name → folder on disk (setup.cfg's package_dir maps evaljobs_middleware to middleware/).
SOURCES = {"evaljobs": ROOT / "evaljobs", "evaljobs_middleware": ROOT / "middleware"}
CONFIG_MODULE = "evaljobs.config"
#: Where the per-run options are declared (``RUN_OPTIONS``).
RUN_OPTIONS_MODULE = "evaljobs.run_options"
#: Libraries that do I/O (broker, database, network); pure domain code never imports them.
IO_LIBRARIES = ("dramatiq", "redis", "peewee", "httpx", "mcp")
#: The pure parts: a module is one of them if its name is, or starts with, one of these.
PURE_MODULES = ("evaljobs.catalog", "evaljobs.evaluation.grading", "evaljobs.reports")
#: The layers, bottom first (docs/internals.md: cli → api / workers / bench → pipeline → reports / store →
#: evaluation → providers → catalog, middleware beside catalog). A module may import its own
#: layer and the ones below it; the longest matching prefix places a module, except that the
#: package root (``evaljobs/__init__.py``, ``__main__``) places only itself.
LAYERS = (
    ("evaljobs.errors", "evaljobs.config", "evaljobs.run_options", "evaljobs.lazy", "evaljobs.clock",
     "evaljobs.extras", "evaljobs.resources", "evaljobs.isolation", "evaljobs.redact", "evaljobs.printable",
     "evaljobs.collector", "evaljobs.telemetry", "evaljobs.capacity",
     "evaljobs.entry_points"),
    ("evaljobs.catalog", "evaljobs_middleware"),
    # the deadline wall and the provider errors, below both the governor and the provider client
    ("evaljobs.network",),
    # the provider client asks the governor for permits; the governor never imports the client
    ("evaljobs.governor",),
    ("evaljobs.providers", "evaljobs.simulated", "evaljobs.tools"),
    ("evaljobs.evaluation",),
    ("evaljobs.reports", "evaljobs.store"),
    ("evaljobs.pipeline",),
    # the benchmark drives sessions (``api.benchmark`` hands it the class) and starts workers; the operations
    # that need no session (fleet, checks, labels, a stored run's report) sit beside the Session that
    # re-exports them, and the demo is handed the session it runs on
    ("evaljobs.api", "evaljobs.fleet", "evaljobs.checks", "evaljobs.labels", "evaljobs.outcomes",
     "evaljobs.reporting", "evaljobs.demo", "evaljobs.workers", "evaljobs.view", "evaljobs.starter",
     "evaljobs.bench"),
    ("evaljobs.cli", "evaljobs.testing"),
    ("evaljobs", "evaljobs.__main__"),
)
_PLACES_ONLY_ITSELF = {"evaljobs", "evaljobs.__main__"}
MAX_LINES = 600
#: Packages whose ``__init__`` is their one public face (docs/internals.md, "Packages and who may import
#: whom").
FACES = ("evaljobs.store", "evaljobs.governor", "evaljobs.providers")
#: Where an in-function import of our own modules needs no comment: the commands load what they run.
LATE_IMPORTS_FREE = ("evaljobs.cli",)
#: How many in-function imports of our own modules there may be outside ``LATE_IMPORTS_FREE``: start-up
#: laziness is one mechanism (``evaljobs/lazy.py``: a face's PEP 562 ``__getattr__``), not a late import
#: at each place of use. A ratchet (issue 41: 118 before the faces, 20 the target): it only goes down.
MAX_LATE_IMPORTS = 7
KEPT_WHOLE = re.compile(r"\b(stays?|kept|keep) whole\b", re.IGNORECASE)
_ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
_ENV_WRITERS = {"putenv", "unsetenv"}
_MAPPING_WRITERS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
#: Where a pair's retries are decided and waited: the one decision function and the in-process strategy's
#: mapping of its outcomes to sleeps. A module name covers the whole module; "module:function" one function.
RETRY_DECIDERS = ("evaljobs.pipeline.pairs", "evaljobs.pipeline.strategies:settle")
#: Packages a pair's retry could be re-decided in (the layers that evaluate and schedule pairs).
RETRY_SCOPE = ("evaljobs.pipeline", "evaljobs.evaluation")
#: Loops that catch a provider error and go round again, each with why it is not a pair's retry.
RETRY_LOOPS_ALLOWED = {
    # Re-asks the judge model, at once, for a verdict it can parse (a garbled or failed answer is
    # not the pair's fault); a rate limit or a busy governor is re-raised to the pair's decision.
    "evaljobs.evaluation.judge:ProviderJudge.__call__",
}
#: What a provider error is called where it is caught.
PROVIDER_ERRORS = {"ProviderError", "RateLimited", "TransientError", "PermanentError", "Busy", "RETRYABLE"}


# -- reading the source ---------------------------------------------------------------------------

@dataclass
class Module:
    name: str
    path: Path
    shown: str    # the path as messages show it: relative to the folder holding the source folders
    is_package: bool
    source: str
    tree: ast.Module = field(repr=False)
    nodes: list[ast.AST] = field(default_factory=list, repr=False)  # every node, walked once

    def __post_init__(self) -> None:
        if not self.nodes:
            self.nodes = list(ast.walk(self.tree))

    @property
    def package(self) -> str:
        """The package relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


def load_modules(sources: dict[str, Path]) -> dict[str, Module]:
    """Every ``.py`` file under each source folder, by its dotted import name."""
    modules: dict[str, Module] = {}
    for top, folder in sources.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join([top, *parts])
            source = path.read_text(encoding="utf-8")
            modules[name] = Module(name, path, path.relative_to(folder.parent).as_posix(), is_package,
                                   source, ast.parse(source, filename=str(path)))
    return modules


@dataclass(frozen=True)
class Import:
    target: str   # the dotted name imported (a module of ours when it resolves to one)
    line: int


def imports_of(module: Module, known: dict[str, Module]) -> list[Import]:
    """Every import in ``module`` (anywhere in it), with relative imports resolved.

    ``from pkg import name`` targets ``pkg.name`` when that is a module, else
    ``pkg`` itself (the name is an attribute of its ``__init__``).
    """
    found: list[Import] = []
    for node in module.nodes:
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                candidate = f"{origin}.{alias.name}"
                found.append(Import(candidate if candidate in known else origin, node.lineno))
    return list(dict.fromkeys(found))  # `from x import a, b` is one import of x on that line


# -- the rules ------------------------------------------------------------------------------------

def layer_of(name: str, layers=LAYERS) -> tuple[int, str] | None:
    """(layer number, the prefix that placed it), or None for a module with no place."""
    best: tuple[int, str] | None = None
    for number, prefixes in enumerate(layers):
        for prefix in prefixes:
            covers = name == prefix or (name.startswith(prefix + ".") and prefix not in _PLACES_ONLY_ITSELF)
            if covers and (best is None or len(prefix) > len(best[1])):
                best = (number, prefix)
    return best


def upward_imports(modules: dict[str, Module], layers=LAYERS) -> list[str]:
    lines = []
    for name, module in sorted(modules.items()):
        own = layer_of(name, layers)
        if own is None:
            lines.append(f"{module.shown}: {name} has no layer: add its package to LAYERS in "
                         "tests/system/test_architecture.py (and to docs/internals.md's picture)")
            continue
        for imp in imports_of(module, modules):
            target = layer_of(imp.target, layers) if imp.target in modules else None
            if target is not None and target[0] > own[0]:
                lines.append(f"{module.shown}:{imp.line}: {name} imports {imp.target}, a higher layer "
                             f"({own[1]} sits below {target[1]}): move the code down, or hand it in")
    return lines


def import_cycles(modules: dict[str, Module]) -> list[str]:
    """One line per cycle (strongly connected component), naming each import on one cycle through it."""
    edges: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, module in modules.items():
        for imp in imports_of(module, modules):
            if imp.target in modules:
                edges[name].setdefault(imp.target, imp.line)

    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(start: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges[node]:
                        components.append(sorted(component))

    for name in sorted(modules):
        if name not in index:
            strongconnect(name)

    lines = []
    for component in sorted(components):
        members = set(component)
        path = _cycle_through(component[0], edges, members)
        steps = " → ".join(f"{node} ({modules[node].shown}:{edges[node][nxt]})"
                           for node, nxt in zip(path, path[1:]))
        lines.append(f"import cycle among {', '.join(component)}: {steps} → {path[-1]}")
    return lines


def _cycle_through(start: str, edges: dict[str, dict[str, int]], members: set[str]) -> list[str]:
    """The shortest path start → … → start inside one strongly connected component."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node]):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is on no cycle")  # unreachable for a member of a component


def middleware_imports_of_evaljobs(modules: dict[str, Module]) -> list[str]:
    lines = []
    for name, module in sorted(modules.items()):
        if name.split(".")[0] != "evaljobs_middleware":
            continue
        for imp in imports_of(module, modules):
            if imp.target.split(".")[0] == "evaljobs":
                lines.append(
                    f"{module.shown}:{imp.line}: middleware imports {imp.target} "
                    "(middleware/ is generic Dramatiq middleware: take a callback or a setting instead)"
                )
    return lines


def io_imports_in_pure_code(modules: dict[str, Module]) -> list[str]:
    lines = []
    for name, module in sorted(modules.items()):
        if not any(name == pure or name.startswith(pure + ".") for pure in PURE_MODULES):
            continue
        for imp in imports_of(module, modules):
            library = imp.target.split(".")[0]
            if library in IO_LIBRARIES:
                lines.append(f"{module.shown}:{imp.line}: {name} imports {imp.target} "
                             "(catalog, grading and report code stay pure: let a caller hand the result in)")
    return lines


def environ_access(modules: dict[str, Module]) -> list[str]:
    """Reads of the environment outside the configuration module, and writes anywhere."""
    lines = []
    for name, module in sorted(modules.items()):
        os_names: set[str] = set()      # names bound to the os module
        env_names: dict[str, str] = {}  # local name → os attribute (from os import environ as env)
        for node in module.nodes:
            if isinstance(node, ast.Import):
                os_names.update(alias.asname or "os" for alias in node.names
                                if alias.name == "os" or (alias.name.startswith("os.") and not alias.asname))
            elif isinstance(node, ast.ImportFrom) and node.module == "os" and not node.level:
                env_names.update({alias.asname or alias.name: alias.name
                                  for alias in node.names if alias.name in _ENV_NAMES})

        def env_attribute(node: ast.AST) -> str | None:
            """'environ', 'getenv', … when ``node`` is os.<that> (or a name imported from os)."""
            if isinstance(node, ast.Attribute) and node.attr in _ENV_NAMES and \
                    isinstance(node.value, ast.Name) and node.value.id in os_names:
                return node.attr
            if isinstance(node, ast.Name) and node.id in env_names:
                return env_names[node.id]
            return None

        writes: set[int] = set()
        for node in module.nodes:
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) and \
                    env_attribute(node.value) in ("environ", "environb"):
                writes.add(node.lineno)
            elif isinstance(node, ast.Call):
                func = node.func
                if env_attribute(func) in _ENV_WRITERS:
                    writes.add(node.lineno)
                elif isinstance(func, ast.Attribute) and func.attr in _MAPPING_WRITERS and \
                        env_attribute(func.value) in ("environ", "environb"):
                    writes.add(node.lineno)
        reads = {node.lineno for node in module.nodes
                 if env_attribute(node) is not None and not isinstance(node, ast.Name)} | \
                {node.lineno for node in module.nodes
                 if isinstance(node, ast.Name) and node.id in env_names and isinstance(node.ctx, ast.Load)}
        for line in sorted(writes):
            lines.append(f"{module.shown}:{line}: {name} writes the process environment "
                         "(pass Settings down, or build a child's environment with config.child_environment)")
        if name != CONFIG_MODULE:
            for line in sorted(reads - writes):
                lines.append(f"{module.shown}:{line}: {name} reads the process environment "
                             f"(read it in {CONFIG_MODULE}: a Settings field, or config.secret for a key)")
    return lines


def retry_loops(modules: dict[str, Module]) -> list[str]:
    """Sleeps and provider-error retry loops in ``RETRY_SCOPE`` outside ``RETRY_DECIDERS``.

    A sleep is any use of ``time.sleep`` (called, or passed on as a default), or of a ``sleep``
    imported from ``time``. A retry loop is a ``for``/``while`` whose body catches a provider
    error (``PROVIDER_ERRORS``) with a handler that does not end by raising or returning.
    """
    lines = []
    for name, module in sorted(modules.items()):
        if not name.startswith(RETRY_SCOPE) or name in RETRY_DECIDERS:
            continue
        time_names = {alias.asname or "time" for node in module.nodes if isinstance(node, ast.Import)
                      for alias in node.names if alias.name == "time"}
        sleep_names = {alias.asname or alias.name for node in module.nodes
                       if isinstance(node, ast.ImportFrom) and node.module == "time"
                       for alias in node.names if alias.name == "sleep"}
        for where, node in _scoped_nodes(module.tree):
            if f"{name}:{where}" in RETRY_DECIDERS:
                continue
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "sleep"
                and isinstance(node.value, ast.Name)
                and node.value.id in time_names
            ) or (isinstance(node, ast.Name) and node.id in sleep_names):
                lines.append(f"{module.shown}:{node.lineno}: {name} sleeps in {where or 'the module'} "
                             "(a wait for a pair is decided by evaljobs.pipeline.pairs.attempt: return its "
                             "outcome and let the strategy map it)")
            elif (
                isinstance(node, (ast.For, ast.While, ast.AsyncFor))
                and f"{name}:{where}" not in RETRY_LOOPS_ALLOWED
            ):
                caught = _retried_provider_errors(node)
                if caught:
                    lines.append(
                        f"{module.shown}:{node.lineno}: {name} loops retrying on {', '.join(caught)} in "
                        f"{where or 'the module'} (one place decides retries: "
                        "evaljobs.pipeline.pairs.attempt)"
                    )
    return lines


def _scoped_nodes(tree: ast.AST, where: str = ""):
    """Every node with the dotted name of the function (or class) it is in ("" at module level)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield from _scoped_nodes(child, f"{where}.{child.name}" if where else child.name)
        else:
            yield where, child
            yield from _scoped_nodes_inside(child, where)


def _scoped_nodes_inside(node: ast.AST, where: str):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield from _scoped_nodes(child, f"{where}.{child.name}" if where else child.name)
        else:
            yield where, child
            yield from _scoped_nodes_inside(child, where)


def _retried_provider_errors(loop: ast.AST) -> list[str]:
    """The provider errors a loop's body catches and goes round again on (not inside nested functions)."""
    found: list[str] = []
    stack = list(ast.iter_child_nodes(loop))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            names = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node.type)
                     if isinstance(n, (ast.Name, ast.Attribute))} & PROVIDER_ERRORS
            if names and not (node.body and isinstance(node.body[-1], (ast.Raise, ast.Return))):
                found.extend(sorted(names - set(found)))
        stack.extend(ast.iter_child_nodes(node))
    return found


def oversized_modules(modules: dict[str, Module], limit: int = MAX_LINES) -> list[str]:
    lines = []
    for name, module in sorted(modules.items()):
        count = len(module.source.splitlines())
        if count > limit and not KEPT_WHOLE.search(ast.get_docstring(module.tree) or ""):
            lines.append(f"{module.shown}: {count} lines (over {limit}): split {name} along its "
                         "concepts, or say in its module docstring why it stays whole")
    return lines


def packages_on_disk(sources: dict[str, Path]) -> set[str]:
    """Every folder holding Python source, as a dotted package name (a folder without
    ``__init__.py`` still counts: it would be a namespace package setuptools leaves out)."""
    found = set()
    for top, folder in sources.items():
        for path in folder.rglob("*.py"):
            parts = path.parent.relative_to(folder).parts
            if "__pycache__" not in parts:
                found.add(".".join([top, *parts]))
    return found


def listed_packages(setup_cfg: Path) -> set[str]:
    config = configparser.ConfigParser()
    config.read(setup_cfg, encoding="utf-8")
    return {
        line.strip() for line in config.get("options", "packages", fallback="").splitlines() if line.strip()
    }


def package_list_mismatch(setup_cfg: Path, sources: dict[str, Path]) -> list[str]:
    on_disk, listed = packages_on_disk(sources), listed_packages(setup_cfg)
    return ([f"{setup_cfg.name}: package {name} is on disk but not in [options] packages (add it)"
             for name in sorted(on_disk - listed)] +
            [f"{setup_cfg.name}: package {name} is in [options] packages but not on disk (remove it)"
             for name in sorted(listed - on_disk)])


#: The test modules' syntax trees, read once while this module runs (three rules read every test module;
#: parsing them is most of their CPU, issue 42 item 6); keyed by the file's version, emptied after the module.
_TEST_TREES: dict[tuple[Path, int, int], tuple[ast.Module, list[ast.AST]]] = {}


def parsed_test_module(path: Path) -> tuple[ast.Module, list[ast.AST]]:
    """``path``'s syntax tree and its every node (``ast.walk``'s order), parsed and walked once per version
    of the file (a rewritten file is read again)."""
    stat = path.stat()
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _TEST_TREES:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        _TEST_TREES[key] = tree, list(ast.walk(tree))
    return _TEST_TREES[key]


@pytest.fixture(scope="module", autouse=True)
def _forget_the_test_trees() -> Iterator[None]:
    yield
    _TEST_TREES.clear()


def imports_of_test_modules(tests: Path) -> list[str]:
    lines = []
    for path in sorted(tests.rglob("*.py")):
        module = Module(path.stem, path, path.relative_to(tests.parent).as_posix(), False, "",
                        *parsed_test_module(path))
        for imp in imports_of(module, {}):
            top = imp.target.split(".")[0]
            if top.startswith("test_") or top == "conftest":
                lines.append(f"{module.shown}:{imp.line}: imports the test module {top} "
                             "(move what it shares to tests/helpers/, or a fixture to tests/conftest.py)")
    return lines


def unit_of(name: str) -> str:
    """The package a module belongs to for the privacy rule: ``evaljobs.<first part>`` (or the middleware)."""
    return ".".join(name.split(".")[:2])


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _origin(module: Module, node: ast.ImportFrom) -> str:
    if node.level:
        base = module.package.split(".")
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""


def private_imports(modules: dict[str, Module]) -> list[str]:
    """Imports of another package's ``_private`` names or modules, and ``alias._name`` uses of its modules."""
    lines = []
    for name, module in sorted(modules.items()):
        own = unit_of(name)
        aliases: dict[str, str] = {}  # local name → our module it is bound to
        for node in module.nodes:
            dotted: list[str] = []
            if isinstance(node, ast.ImportFrom):
                origin = _origin(module, node)
                if origin.split(".")[0] not in SOURCES:
                    continue
                for alias in node.names:
                    full = f"{origin}.{alias.name}"
                    if full in modules:
                        aliases[alias.asname or alias.name] = full
                    dotted.append(full)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in SOURCES:
                        aliases[alias.asname or alias.name.split(".")[0]] = alias.asname and alias.name or \
                            alias.name.split(".")[0]
                        dotted.append(alias.name)
            for full in dotted:
                if unit_of(full) != own and any(_is_private(part) for part in full.split(".")):
                    lines.append(f"{module.shown}:{node.lineno}: {name} imports {full}, private to "
                                 f"{unit_of(full)} (make it public in its package's face, or move the code)")
        for node in module.nodes:
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in aliases and _is_private(node.attr) and \
                    unit_of(aliases[node.value.id]) != own:
                owner = aliases[node.value.id]
                lines.append(f"{module.shown}:{node.lineno}: {name} uses {owner}.{node.attr}, "
                             f"private to {unit_of(owner)} (make it public, or move the code)")
    return lines


def declared_all(module: Module) -> set[str] | None:
    """The names of a module's ``__all__`` when it is a literal list/tuple (or a sum of them), else None."""
    for node in module.tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            names: set[str] = set()
            parts = [node.value]
            while parts:
                part = parts.pop()
                if isinstance(part, ast.BinOp) and isinstance(part.op, ast.Add):
                    parts += [part.left, part.right]
                elif isinstance(part, (ast.List, ast.Tuple)) and \
                        all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in part.elts):
                    names.update(e.value for e in part.elts)
                else:
                    return None
            return names
    return None


def imports_behind_faces(modules: dict[str, Module], faces=FACES, layers=LAYERS) -> list[str]:
    """Imports of a faced package's modules (or of names not in its ``__all__``) from another layer."""
    lines = []
    for face in faces:
        if face not in modules:
            continue
        public = declared_all(modules[face])
        if public is None:
            lines.append(f"{modules[face].shown}: {face} has no literal __all__ (its public face): "
                         "declare one")
            continue
        face_layer = layer_of(face, layers)
        for name, module in sorted(modules.items()):
            if name == face or name.startswith(face + "."):
                continue
            own = layer_of(name, layers)
            if own is not None and face_layer is not None and own[0] == face_layer[0]:
                continue  # the face's own layer is built with it
            for node in module.nodes:
                if isinstance(node, ast.ImportFrom):
                    origin = _origin(module, node)
                    if origin == face:
                        hidden = [a.name for a in node.names if a.name not in public]
                    elif origin.startswith(face + "."):
                        hidden = [f"{origin[len(face) + 1:]}.{a.name}" for a in node.names]
                    else:
                        continue
                elif isinstance(node, ast.Import):
                    hidden = [a.name[len(face) + 1:] for a in node.names if a.name.startswith(face + ".")]
                else:
                    continue
                for what in hidden:
                    lines.append(f"{module.shown}:{node.lineno}: {name} reaches behind {face}'s face "
                                 f"for {what} "
                                 f"(import it from {face}; add it to its __all__ if other packages need it)")
    return lines


def late_imports(modules: dict[str, Module], free=LATE_IMPORTS_FREE) -> list[str]:
    """Each in-function import of our own modules outside ``free``, as ``file:line``."""
    lines = []
    for name, module in sorted(modules.items()):
        if any(name == prefix or name.startswith(prefix + ".") for prefix in free):
            continue
        for function in module.nodes:
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    if isinstance(node, ast.Import):
                        ours = any(a.name.split(".")[0] in SOURCES for a in node.names)
                    else:
                        ours = (isinstance(node, ast.ImportFrom)
                                and _origin(module, node).split(".")[0] in SOURCES)
                    if ours:
                        lines.append(f"{module.shown}:{node.lineno}")
    return list(dict.fromkeys(lines))  # a nested function's import is walked once per enclosing function


def late_imports_without_reason(modules: dict[str, Module], free=LATE_IMPORTS_FREE) -> list[str]:
    """In-function imports of our own modules, outside ``free``, with no comment on them or above them."""
    lines = []
    for name, module in sorted(modules.items()):
        if any(name == prefix or name.startswith(prefix + ".") for prefix in free):
            continue
        text = module.source.splitlines()
        for function in module.nodes:
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    ours = [a.name for a in node.names if a.name.split(".")[0] in SOURCES]
                elif isinstance(node, ast.ImportFrom):
                    origin = _origin(module, node)
                    ours = [origin] if origin.split(".")[0] in SOURCES else []
                else:
                    continue
                if not ours:
                    continue
                here, line = "\n".join(text[node.lineno - 1:node.end_lineno or node.lineno]), node.lineno - 2
                while line >= 0 and text[line].strip().startswith(("from ", "import ")):
                    line -= 1  # one comment above a block of imports covers the block
                above = text[line].strip() if line >= 0 else ""
                if "#" not in here and not above.startswith("#"):
                    lines.append(f"{module.shown}:{node.lineno}: {name} imports {ours[0]} inside a function "
                                 "with "
                                 "no reason: import it at the top, or say why in a comment (start-up time, "
                                 "an optional extra, …)")
    return list(dict.fromkeys(lines))  # a nested function's import is walked once per enclosing function


def lazy_names_hidden_from_type_checkers(modules: dict[str, Module]) -> list[str]:
    """Modules loading names lazily (an ``_EXPORTS`` table) without a ``TYPE_CHECKING`` import of each."""
    lines = []
    for name, module in sorted(modules.items()):
        table = next((node.value for node in module.tree.body if isinstance(node, ast.Assign) and
                      any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets) and
                      isinstance(node.value, ast.Dict)), None)
        if table is None:
            continue
        lazy = {key.value for key in table.keys if isinstance(key, ast.Constant)}
        for key, value in zip(table.keys, table.values):  # **dict.fromkeys(("a", "b"), "module")
            if key is None and isinstance(value, ast.Call) and value.args and \
                    isinstance(value.args[0], ast.Tuple):
                lazy.update(e.value for e in value.args[0].elts if isinstance(e, ast.Constant))
        declared: set[str] = set()
        for node in module.tree.body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        declared.update(alias.asname or alias.name.split(".")[-1] for alias in inner.names)
        for missing in sorted(lazy - declared):
            lines.append(f"{module.shown}: {name} loads {missing!r} lazily but does not import it under "
                         "`if TYPE_CHECKING:` (editors and type checkers cannot see it)")
        public = declared_all(module)
        for missing in sorted(lazy - (public or set())):
            lines.append(f"{module.shown}: {name} loads {missing!r} lazily but its literal __all__ does not "
                         "list it (linters and `import *` cannot see it)")
    return lines


#: The one place of the CLI that turns a result or an error into an exit code.
EXIT_MAPPING = "evaljobs.cli._options"


def exits_decided_by_commands(modules: dict[str, Module]) -> list[str]:
    """``sys.exit``, ``raise SystemExit`` or ``ctx.exit`` in a command module: the library decides the
    exit (``RunInfo.gate``, a ``verdict()``, an error's ``exit_code``), ``cli/_options.py`` maps it."""
    lines = []
    for name, module in sorted(modules.items()):
        if not name.startswith("evaljobs.cli") or name == EXIT_MAPPING:
            continue
        for node in module.nodes:
            call = node.exc if isinstance(node, ast.Raise) else node
            target = call.func if isinstance(call, ast.Call) else call
            text = ast.unparse(target) if isinstance(target, (ast.Attribute, ast.Name)) else ""
            if text in ("sys.exit", "SystemExit", "exit") or text.endswith("ctx.exit"):
                lines.append(f"{module.shown}:{node.lineno}: {name} decides an exit code ({text}): "
                             "return the "
                             "library's verdict and let cli/_options.py conclude() map it")
    return list(dict.fromkeys(lines))


#: What a CLI module may import from evaljobs: the library the commands call, the error family, the
#: settings, and the CLI's own modules. Everything else a command needs comes through ``Session`` and
#: the typed results it returns (docs/api.md).
CLI_PUBLIC_API = ("evaljobs.api", "evaljobs.errors", "evaljobs.config", "evaljobs.printable", "evaljobs.cli")
#: CLI modules that still reach into the library (issue 28, converted one by one): this set only
#: shrinks. A module on it that already keeps to the public API fails the rule until it is taken off.
CLI_NOT_YET_ON_THE_API: frozenset[str] = frozenset()
#: Packages whose face a command may take constants from (UPPER_CASE names, ``from PACKAGE import
#: NAME``): the benchmark's defaults, shown in ``evaljobs bench --help``. What it runs is
#: ``evaljobs.api.benchmark``.
CLI_CONSTANTS_FROM = ("evaljobs.bench",)
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")


def cli_imports_beyond_the_api(modules: dict[str, Module], public=CLI_PUBLIC_API,
                               pending: frozenset[str] = CLI_NOT_YET_ON_THE_API,
                               faces=CLI_CONSTANTS_FROM) -> list[str]:
    """Imports of evaljobs modules other than ``public`` (and of constants from the packages ``faces``)
    from a CLI module (anywhere in it: top, function body, ``if TYPE_CHECKING``); and modules on
    ``pending`` that no longer make one."""
    lines = []
    for name, module in sorted(modules.items()):
        if not (name == "evaljobs.cli" or name.startswith("evaljobs.cli.")):
            continue
        reached: list[tuple[int, str]] = []
        for node in module.nodes:
            if isinstance(node, ast.ImportFrom):
                origin = _origin(module, node)
                if origin.split(".")[0] != "evaljobs":
                    continue
                if origin in faces and all(_CONSTANT.match(a.name) for a in node.names):
                    continue  # a default shown in --help
                # `from evaljobs import config` imports the module evaljobs.config
                targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "evaljobs"]
            else:
                continue
            reached += [(node.lineno, target) for target in targets
                        if not any(target == p or target.startswith(p + ".") for p in public)]
        if name in pending:
            if not reached:
                lines.append(f"{module.shown}: {name} imports only the public API now: take it off "
                             "CLI_NOT_YET_ON_THE_API")
            continue
        for lineno, target in dict.fromkeys(reached):
            lines.append(f"{module.shown}:{lineno}: {name} imports {target}: a command calls the public "
                         f"API ({', '.join(public[:3])}); add what it needs to Session")
    return lines


# -- the rules, on the real source ----------------------------------------------------------------

@pytest.fixture(scope="module")
def source() -> dict[str, Module]:
    return load_modules(SOURCES)


def test_the_source_is_found(source):
    # The checks below pass vacuously on an empty tree: make sure they see the real one.
    assert {"evaljobs", CONFIG_MODULE, "evaljobs.catalog", "evaljobs.reports", "evaljobs_middleware"} <= set(
        source
    )
    assert any(name.startswith("evaljobs_middleware.") for name in source)


def test_lower_layers_never_import_higher_ones(source):
    assert not (found := upward_imports(source)), "\n".join(found)


def test_no_import_cycles(source):
    assert not (found := import_cycles(source)), "\n".join(found)


def test_middleware_imports_nothing_from_evaljobs(source):
    assert not (found := middleware_imports_of_evaljobs(source)), "\n".join(found)


def test_catalog_grading_and_reports_import_no_io_library(source):
    assert not (found := io_imports_in_pure_code(source)), "\n".join(found)


def test_only_the_configuration_module_reads_the_environment(source):
    assert not (found := environ_access(source)), "\n".join(found)


def test_setup_cfg_lists_exactly_the_packages_on_disk():
    assert not (found := package_list_mismatch(ROOT / "setup.cfg", SOURCES)), "\n".join(found)


def test_no_module_is_oversized_without_saying_why(source):
    assert not (found := oversized_modules(source)), "\n".join(found)


def test_no_test_imports_another_test_module():
    assert not (found := imports_of_test_modules(ROOT / "tests")), "\n".join(found)


def test_one_place_decides_retries(source):
    assert {"evaljobs.pipeline.pairs", "evaljobs.pipeline.strategies"} <= set(source)
    assert not (found := retry_loops(source)), "\n".join(found)


def test_no_module_imports_another_packages_private_names(source):
    assert not (found := private_imports(source)), "\n".join(found)


def test_other_layers_use_the_store_governor_and_provider_client_through_their_faces(source):
    assert not (found := imports_behind_faces(source)), "\n".join(found)


def test_late_imports_of_our_modules_say_why(source):
    assert not (found := late_imports_without_reason(source)), "\n".join(found)


def test_late_imports_of_our_modules_stay_under_their_cap(source):
    found = late_imports(source)
    assert len(found) <= MAX_LATE_IMPORTS, (f"{len(found)} in-function imports of our modules outside cli/ "
                                            f"(at most {MAX_LATE_IMPORTS}): load lazily through a face "
                                            "(evaljobs/lazy.py) instead\n" + "\n".join(found))


def test_lazily_loaded_names_are_declared_for_type_checkers(source):
    assert not (found := lazy_names_hidden_from_type_checkers(source)), "\n".join(found)


def test_commands_only_map_the_librarys_exit(source):
    assert not (found := exits_decided_by_commands(source)), "\n".join(found)


def test_commands_import_only_the_public_api(source):
    assert not (found := cli_imports_beyond_the_api(source)), "\n".join(found)
    assert CLI_NOT_YET_ON_THE_API <= set(source), sorted(CLI_NOT_YET_ON_THE_API - set(source))


# -- each rule fails on a planted violation -------------------------------------------------------

def plant(root: Path, files: dict[str, str]) -> dict[str, Path]:
    """Write ``files`` (path → source) under ``root``; return SOURCES-like roots for it."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return {"evaljobs": root / "evaljobs", "evaljobs_middleware": root / "middleware"}


BASE = {
    "evaljobs/__init__.py": '"""The package."""\n',
    "evaljobs/config.py": "import os\n\nURL = os.environ.get('EVALJOBS_X')\n",
    "evaljobs/catalog/__init__.py": "from evaljobs.catalog.model import Scenario\n",
    "evaljobs/catalog/model.py": (
        "import dataclasses\nimport yaml\n\nScenario = dataclasses.dataclass(type('S', (), {}))\n"
    ),
    "evaljobs/store/__init__.py": (
        "import peewee\nfrom evaljobs.catalog import Scenario\nfrom . import runs\n"
    ),
    "evaljobs/store/runs.py": "from ..catalog import model\nfrom evaljobs import config\n",
    "evaljobs/reports/__init__.py": "from evaljobs.store import runs\n",
    "middleware/__init__.py": "import dramatiq\n",
    "middleware/context.py": "import threading\n",
}


def planted_tree(tmp_path: Path, changes: dict[str, str]) -> dict[str, Module]:
    return load_modules(plant(tmp_path, {**BASE, **changes}))


def test_the_planted_baseline_breaks_no_rule(tmp_path):
    modules = planted_tree(tmp_path, {})
    assert upward_imports(modules) == []
    assert import_cycles(modules) == []
    assert middleware_imports_of_evaljobs(modules) == []
    assert io_imports_in_pure_code(modules) == []
    assert environ_access(modules) == []
    assert oversized_modules(modules) == []
    assert retry_loops(modules) == []


@pytest.mark.parametrize("path, text, expected", [
    ("evaljobs/catalog/model.py", "from evaljobs.store import runs\n",
     "evaljobs/catalog/model.py:1: evaljobs.catalog.model imports evaljobs.store.runs, a higher layer "
     "(evaljobs.catalog sits below evaljobs.store)"),
    ("evaljobs/config.py", "def f():\n    from .catalog import model\n",
     "evaljobs/config.py:2: evaljobs.config imports evaljobs.catalog.model, a higher layer "
     "(evaljobs.config sits below evaljobs.catalog)"),
    ("middleware/db.py", "from evaljobs.reports import junit\n",
     "middleware/db.py:1: evaljobs_middleware.db imports evaljobs.reports, a higher layer "
     "(evaljobs_middleware sits below evaljobs.reports)"),
    ("evaljobs/gadgets/__init__.py", "X = 1\n",
     "evaljobs/gadgets/__init__.py: evaljobs.gadgets has no layer: add its package to LAYERS"),
])
def test_an_upward_import_or_an_unplaced_module_is_found(tmp_path, path, text, expected):
    found = upward_imports(planted_tree(tmp_path, {path: text}))
    assert len(found) == 1 and found[0].startswith(expected), found


#: The provider client, the governor and what both stand on (the deadline wall, the provider errors).
PROVIDERS_AND_GOVERNOR = {
    "evaljobs/network/__init__.py": "",
    "evaljobs/network/deadline.py": "import time\n",
    "evaljobs/governor/__init__.py": "from evaljobs.network import deadline\n",
    "evaljobs/providers/__init__.py": "",
    "evaljobs/providers/calls.py": "from evaljobs.governor import Governor\n",
}


@pytest.mark.parametrize("path, text, expected", [
    # the governor waits by the pair's deadline, which lives below it, never in the provider client
    ("evaljobs/governor/facade.py", "from evaljobs.providers import deadline\n",
     "evaljobs/governor/facade.py:1: evaljobs.governor.facade imports evaljobs.providers, a higher layer "
     "(evaljobs.governor sits below evaljobs.providers)"),
    ("evaljobs/network/errors.py", "from evaljobs.governor import Governor\n",
     "evaljobs/network/errors.py:1: evaljobs.network.errors imports evaljobs.governor, a higher layer "
     "(evaljobs.network sits below evaljobs.governor)"),
    # the deadline wall stands below the provider client too (no late import dodges it: any import counts)
    ("evaljobs/network/deadline.py", "def f():\n    from evaljobs.providers import calls\n",
     "evaljobs/network/deadline.py:2: evaljobs.network.deadline imports evaljobs.providers.calls, a higher "
     "layer (evaljobs.network sits below evaljobs.providers)"),
])
def test_an_upward_import_between_the_provider_client_and_the_governor_is_found(tmp_path, path, text,
                                                                                 expected):
    assert upward_imports(planted_tree(tmp_path, PROVIDERS_AND_GOVERNOR)) == []
    found = upward_imports(planted_tree(tmp_path / "planted", {**PROVIDERS_AND_GOVERNOR, path: text}))
    assert len(found) == 1 and found[0].startswith(expected), found


def test_a_module_may_import_its_own_layer_and_below(tmp_path):
    # reports → store is sideways (one layer); store → catalog and config is downward (baseline)
    assert (
        upward_imports(planted_tree(tmp_path, {"evaljobs/store/runs.py": "from evaljobs.reports import x\n"}))
        == []
    )


@pytest.mark.parametrize("change, expected", [
    # an absolute import back up: catalog.model → store → catalog.model
    ({"evaljobs/catalog/model.py": "from evaljobs.store import runs\n"},
     "evaljobs.catalog.model (evaljobs/catalog/model.py:1) → evaljobs.store.runs (evaljobs/store/runs.py:1)"),
    # a late import in a function body is still a cycle
    ({"evaljobs/config.py": "def f():\n    from evaljobs.store import runs\n"}, "evaljobs/config.py:2"),
    # a relative import (two levels up)
    ({"evaljobs/catalog/model.py": "from ..reports import x\n"}, "import cycle among"),
    # a package importing itself through `from . import`
    ({"evaljobs/catalog/model.py": "from . import Scenario\n"},
     "evaljobs.catalog (evaljobs/catalog/__init__.py:1) → "
     "evaljobs.catalog.model (evaljobs/catalog/model.py:1)"),
    # an import only for type checking
    ({"evaljobs/catalog/model.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    import evaljobs.store.runs\n"}, "evaljobs/catalog/model.py:3"),
])
def test_an_import_cycle_is_found(tmp_path, change, expected):
    found = import_cycles(planted_tree(tmp_path, change))
    assert len(found) == 1 and expected in found[0], found


def test_a_module_importing_itself_is_a_cycle(tmp_path):
    found = import_cycles(planted_tree(tmp_path, {"evaljobs/store/runs.py": "import evaljobs.store.runs\n"}))
    assert found == ["import cycle among evaljobs.store.runs: "
                     "evaljobs.store.runs (evaljobs/store/runs.py:1) → evaljobs.store.runs"]


@pytest.mark.parametrize("text, line", [
    ("import evaljobs\n", 1),
    ("from evaljobs.config import settings\n", 1),
    ("def late():\n    import evaljobs.store\n", 2),
])
def test_middleware_importing_evaljobs_is_found(tmp_path, text, line):
    found = middleware_imports_of_evaljobs(planted_tree(tmp_path, {"middleware/db.py": text}))
    assert len(found) == 1 and found[0].startswith(f"middleware/db.py:{line}: middleware imports evaljobs"), (
        found
    )


@pytest.mark.parametrize("path, text, library", [
    ("evaljobs/catalog/model.py", "import httpx\n", "httpx"),
    ("evaljobs/catalog/importers/promptfoo.py", "def load():\n    from mcp.client import session\n", "mcp"),
    ("evaljobs/evaluation/grading.py", "import redis.asyncio as r\n", "redis"),
    ("evaljobs/reports/html.py", "from peewee import fn\n", "peewee"),
    ("evaljobs/reports/junit.py", "import dramatiq\n", "dramatiq"),
])
def test_an_io_library_in_pure_code_is_found(tmp_path, path, text, library):
    found = io_imports_in_pure_code(planted_tree(tmp_path, {path: text}))
    assert len(found) == 1 and found[0].startswith(path) and f"imports {library}" in found[0], found


def test_io_libraries_outside_pure_code_are_allowed(tmp_path):
    # store/ imports peewee and middleware/ dramatiq in the baseline; evaluation outside grading may call out.
    assert (
        io_imports_in_pure_code(planted_tree(tmp_path, {"evaljobs/evaluation/evaluate.py": "import httpx\n"}))
        == []
    )


@pytest.mark.parametrize("text, line, verb", [
    ("import os\nX = os.environ['EVALJOBS_X']\n", 2, "reads"),
    ("import os\nX = os.environ.get('EVALJOBS_X')\n", 2, "reads"),
    ("import os\ndef f():\n    return os.getenv('EVALJOBS_X')\n", 3, "reads"),
    ("import os as o\nX = dict(o.environ)\n", 2, "reads"),
    ("from os import environ\nX = 'EVALJOBS_X' in environ\n", 2, "reads"),
    ("from os import getenv as g\nX = g('EVALJOBS_X')\n", 2, "reads"),
    ("import os\nos.environ['EVALJOBS_X'] = '1'\n", 2, "writes"),
    ("import os\ndel os.environ['EVALJOBS_X']\n", 2, "writes"),
    ("import os\nos.environ.update(EVALJOBS_X='1')\n", 2, "writes"),
    ("import os\nos.environ.setdefault('EVALJOBS_X', '1')\n", 2, "writes"),
    ("import os\nos.putenv('EVALJOBS_X', '1')\n", 2, "writes"),
    ("from os import environ\nenviron.pop('EVALJOBS_X')\n", 2, "writes"),
])
def test_environment_access_outside_the_configuration_module_is_found(tmp_path, text, line, verb):
    found = environ_access(planted_tree(tmp_path, {"evaljobs/store/runs.py": text}))
    assert found and found[0].startswith(f"evaljobs/store/runs.py:{line}: evaljobs.store.runs {verb} "), found
    assert len(found) == 1, found


def test_the_configuration_module_may_read_but_not_write_the_environment(tmp_path):
    reads = "import os\nA = os.environ.get('A')\nB = os.getenv('B')\nC = dict(os.environ)\nC.update(D='1')\n"
    assert environ_access(planted_tree(tmp_path, {"evaljobs/config.py": reads})) == []
    found = environ_access(planted_tree(tmp_path, {"evaljobs/config.py": reads + "os.environ['E'] = '1'\n"}))
    assert found == ["evaljobs/config.py:6: evaljobs.config writes the process environment "
                     "(pass Settings down, or build a child's environment with config.child_environment)"]


def test_an_attribute_merely_named_environ_is_not_the_environment(tmp_path):
    text = "import subprocess\nX = subprocess.environ if hasattr(subprocess, 'environ') else None\n"
    assert environ_access(planted_tree(tmp_path, {"evaljobs/store/runs.py": text})) == []


def test_an_oversized_module_is_found_unless_its_docstring_says_why(tmp_path):
    body = "".join(f"X{i} = {i}\n" for i in range(MAX_LINES))
    found = oversized_modules(planted_tree(tmp_path, {"evaljobs/store/runs.py": '"""Runs."""\n' + body}))
    assert found == [
        f"evaljobs/store/runs.py: {MAX_LINES + 1} lines (over {MAX_LINES}): split evaljobs.store.runs "
        "along its concepts, or say in its module docstring why it stays whole"
    ]
    reason = '"""Runs.\n\nKept whole: the state machine reads top to bottom."""\n'
    assert oversized_modules(planted_tree(tmp_path, {"evaljobs/store/runs.py": reason + body})) == []
    # exactly at the limit is fine
    assert oversized_modules(planted_tree(tmp_path, {"evaljobs/store/runs.py": body})) == []


def test_a_package_missing_from_setup_cfg_or_gone_from_disk_is_found(tmp_path):
    sources = plant(tmp_path, BASE)
    setup_cfg = tmp_path / "setup.cfg"
    listed = ["evaljobs", "evaljobs.catalog", "evaljobs.store", "evaljobs.reports", "evaljobs_middleware"]
    setup_cfg.write_text("[options]\npackages =\n" + "".join(f"    {p}\n" for p in listed))
    assert package_list_mismatch(setup_cfg, sources) == []
    (tmp_path / "evaljobs/bench").mkdir()
    (tmp_path / "evaljobs/bench/engine.py").write_text("X = 1\n")  # no __init__.py: still a package to ship
    setup_cfg.write_text(
        "[options]\npackages =\n" + "".join(f"    {p}\n" for p in listed + ["evaljobs.view"])
    )
    assert package_list_mismatch(setup_cfg, sources) == [
        "setup.cfg: package evaljobs.bench is on disk but not in [options] packages (add it)",
        "setup.cfg: package evaljobs.view is in [options] packages but not on disk (remove it)",
    ]


def test_a_test_importing_another_test_module_is_found(tmp_path):
    tests = tmp_path / "tests"
    plant(tmp_path, {"tests/helpers/__init__.py": "from helpers.fleet import Fleet\n",
                     "tests/test_a.py": "import pytest\nfrom helpers import Fleet\n"})
    assert imports_of_test_modules(tests) == []
    plant(tmp_path, {"tests/test_b.py": "import os\nfrom test_a import numbered, Fleet\n",
                     "tests/helpers/fleet.py": "def f():\n    import conftest\n"})
    assert imports_of_test_modules(tests) == [
        "tests/helpers/fleet.py:2: imports the test module conftest "
        "(move what it shares to tests/helpers/, or a fixture to tests/conftest.py)",
        "tests/test_b.py:2: imports the test module test_a "
        "(move what it shares to tests/helpers/, or a fixture to tests/conftest.py)",
    ]


# -- one place decides retries ---------------------------------------------------------------------

RUNNER_FILES = (
    "evaljobs/pipeline/pairs.py",
    "evaljobs/pipeline/strategies.py",
    "evaljobs/pipeline/actors.py",
    "evaljobs/evaluation/evaluate.py",
    "evaljobs/evaluation/judge.py",
)
SECOND_LOOP = """

def evaluate_again(pair, evaluate):
    while True:
        try:
            return evaluate(pair)
        except TransientError:
            time.sleep(1.0)
"""


def copy_of_the_runner(tmp_path: Path, **changes: str) -> dict[str, Module]:
    """The real pair runner's modules, copied into ``tmp_path`` with ``changes`` (path → appended source)."""
    files = {relative: (ROOT / relative).read_text(encoding="utf-8") + changes.get(relative, "")
             for relative in RUNNER_FILES}
    return load_modules(plant(tmp_path, files))


def test_a_second_sleeping_retry_loop_planted_in_a_strategy_is_found(tmp_path):
    assert retry_loops(copy_of_the_runner(tmp_path)) == []  # the copy as it is passes
    found = retry_loops(
        copy_of_the_runner(tmp_path, **{"evaljobs/pipeline/actors.py": "import time\n" + SECOND_LOOP})
    )
    line = len((ROOT / "evaljobs/pipeline/actors.py").read_text(encoding="utf-8").splitlines())
    assert found == [
        (
            f"evaljobs/pipeline/actors.py:{line + 5}: evaljobs.pipeline.actors loops retrying on "
            "TransientError in evaluate_again (one place decides retries: evaljobs.pipeline.pairs.attempt)"
        ),
        (
            f"evaljobs/pipeline/actors.py:{line + 9}: evaljobs.pipeline.actors sleeps in evaluate_again (a "
            "wait for a pair is decided by evaljobs.pipeline.pairs.attempt: return its outcome and let the "
            "strategy map it)"
        ),
    ], found


@pytest.mark.parametrize("path, text, expected", [
    # a loop that retries without sleeping is still a second decision
    ("evaljobs/evaluation/evaluate.py", ("\n\ndef again(f):\n    for _ in range(3):\n        try:\n"
                                         "            return f()\n"
                                         "        except (RateLimited, Busy):\n            pass\n"),
     "loops retrying on Busy, RateLimited in again"),
    # a sleep passed on as a default, from `from time import sleep`
    ("evaljobs/pipeline/strategies.py",
     "\nfrom time import sleep as nap\n\ndef later(wait=nap):\n    wait(1)\n",
     "sleeps in later"),
    # the in-process mapping may sleep; another function of its module may not
    ("evaljobs/pipeline/strategies.py", "\n\ndef other():\n    time.sleep(0.1)\n", "sleeps in other"),
])
def test_other_retry_loops_and_sleeps_are_found(tmp_path, path, text, expected):
    found = retry_loops(copy_of_the_runner(tmp_path, **{path: text}))
    assert len(found) == 1 and expected in found[0], found


def test_a_loop_that_only_reraises_a_provider_error_is_not_a_retry(tmp_path):
    text = ("\n\ndef turns(calls):\n    for call in calls:\n        try:\n            call()\n"
            "        except TransientError:\n            raise\n")
    assert retry_loops(copy_of_the_runner(tmp_path, **{"evaljobs/pipeline/actors.py": text})) == []


@pytest.mark.parametrize("path, text, expected", [
    ("evaljobs/reports/__init__.py", "from evaljobs.store.runs import _hidden\n",
     "evaljobs/reports/__init__.py:1: evaljobs.reports imports evaljobs.store.runs._hidden, "
     "private to evaljobs.store"),
    ("evaljobs/reports/__init__.py", "from evaljobs.store import _runs\n",
     "evaljobs/reports/__init__.py:1: evaljobs.reports imports evaljobs.store._runs, "
     "private to evaljobs.store"),
    ("evaljobs/reports/__init__.py", "def f():\n    from ..store import runs\n    return runs._hidden()\n",
     "evaljobs/reports/__init__.py:3: evaljobs.reports uses evaljobs.store.runs._hidden, "
     "private to evaljobs.store"),
    ("evaljobs/config.py", "import evaljobs.store.runs as r\nX = r._cache\n",
     "evaljobs/config.py:2: evaljobs.config uses evaljobs.store.runs._cache, private to evaljobs.store"),
])
def test_a_private_import_across_packages_is_found(tmp_path, path, text, expected):
    found = private_imports(planted_tree(tmp_path, {path: text}))
    assert len(found) == 1 and found[0].startswith(expected), found


def test_a_package_may_use_its_own_private_names(tmp_path):
    text = "from evaljobs.store.runs import _hidden\nfrom . import runs\nX = runs._cache\n"
    assert private_imports(planted_tree(tmp_path, {"evaljobs/store/__init__.py": text})) == []


FACED = {"evaljobs/store/__init__.py":
         "from evaljobs.store.runs import get_run\n__all__ = ['get_run', 'runs']\n"}


@pytest.mark.parametrize("text, expected", [
    ("from evaljobs.store.runs import get_run\n", "reaches behind evaljobs.store's face for runs.get_run"),
    ("from evaljobs.store import hidden\n", "reaches behind evaljobs.store's face for hidden"),
    ("import evaljobs.store.runs\n", "reaches behind evaljobs.store's face for runs"),
])
def test_an_import_behind_a_face_is_found(tmp_path, text, expected):
    found = imports_behind_faces(planted_tree(tmp_path, {**FACED, "evaljobs/reports/x.py": "import os\n",
                                                         "evaljobs/cli/__init__.py": text}),
                                 faces=("evaljobs.store",))
    assert len(found) == 1 and expected in found[0], found
    assert found[0].startswith("evaljobs/cli/__init__.py:1:"), found


def test_the_face_and_its_own_layer_may_be_used_freely(tmp_path):
    cli = {"evaljobs/cli/__init__.py": "from evaljobs.store import get_run, runs\n"}
    tree = planted_tree(tmp_path, {**FACED, **cli})
    # reports shares the store's layer (the baseline's evaljobs/reports/__init__.py imports store.runs)
    assert imports_behind_faces(tree, faces=("evaljobs.store",)) == []
    no_all = planted_tree(tmp_path, {"evaljobs/store/__init__.py": "__all__ = sorted(['a'])\n"})
    assert imports_behind_faces(no_all, faces=("evaljobs.store",)) == [
        "evaljobs/store/__init__.py: evaljobs.store has no literal __all__ (its public face): declare one"]


def test_a_late_import_without_a_reason_is_found(tmp_path):
    text = ("def a():\n    from evaljobs.catalog import model  # start-up time\n"
            "def b():\n    # the optional extra\n    import evaljobs.catalog\n"
            "def c():\n    import json\n"
            "def d():\n    from .catalog import model\n")
    assert late_imports_without_reason(planted_tree(tmp_path, {"evaljobs/config.py": text})) == [
        "evaljobs/config.py:9: evaljobs.config imports evaljobs.catalog inside a function with no reason: "
        "import it at the top, or say why in a comment (start-up time, an optional extra, …)"]
    cli = {"evaljobs/cli/__init__.py": "def main():\n    from evaljobs.store import runs\n"}
    assert late_imports_without_reason(planted_tree(tmp_path, cli)) == []


def test_late_imports_are_counted_outside_the_cli(tmp_path):
    text = ("def a():\n    from evaljobs.catalog import model  # start-up time\n"
            "def b():\n    import json\n    import evaljobs.catalog  # an extra\n")
    files = {"evaljobs/config.py": text,
             "evaljobs/cli/__init__.py": "def main():\n    from evaljobs import api\n"}
    assert late_imports(planted_tree(tmp_path, files)) == ["evaljobs/config.py:2", "evaljobs/config.py:5"]


def test_a_lazy_name_without_its_type_checking_import_is_found(tmp_path):
    text = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from evaljobs.catalog.model import Scenario\n"
            "_EXPORTS = {'Scenario': 'catalog.model', 'load': 'catalog'}\n__all__ = ['Scenario', 'load']\n")
    assert lazy_names_hidden_from_type_checkers(planted_tree(tmp_path, {"evaljobs/__init__.py": text})) == [
        "evaljobs/__init__.py: evaljobs loads 'load' lazily but does not import it under `if TYPE_CHECKING:` "
        "(editors and type checkers cannot see it)"]


@pytest.mark.parametrize("text", ["import sys\ndef run():\n    sys.exit(1)\n",
                                  "def run():\n    raise SystemExit(2)\n",
                                  "def run(ctx):\n    ctx.exit(1)\n"])
def test_a_command_deciding_its_exit_is_found(tmp_path, text):
    found = exits_decided_by_commands(planted_tree(tmp_path, {"evaljobs/cli/run.py": text}))
    assert len(found) == 1 and found[0].startswith("evaljobs/cli/run.py:"), found
    mapping = planted_tree(tmp_path / "mapping", {"evaljobs/cli/_options.py": text})  # the one mapping may
    assert exits_decided_by_commands(mapping) == []


def test_a_lazy_name_missing_from_a_literal_all_is_found(tmp_path):
    text = ("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from evaljobs.catalog.model import Scenario\n"
            "_EXPORTS = {'Scenario': 'catalog.model'}\n__all__ = sorted(_EXPORTS)\n")
    assert lazy_names_hidden_from_type_checkers(planted_tree(tmp_path, {"evaljobs/__init__.py": text})) == [
        "evaljobs/__init__.py: evaljobs loads 'Scenario' lazily but its literal __all__ does not list it "
        "(linters and `import *` cannot see it)"]


@pytest.mark.parametrize("text, target", [
    ("from evaljobs.store import get_run\n", "evaljobs.store"),
    ("def show():\n    from evaljobs.pipeline.progress import Progress\n", "evaljobs.pipeline.progress"),
    ("import evaljobs.reports.render\n", "evaljobs.reports.render"),
    ("from evaljobs import store\n", "evaljobs.store"),
    ("from evaljobs import Session\n", "evaljobs"),
    ("from ..store import runs\n", "evaljobs.store.runs"),
])
def test_a_command_reaching_past_the_public_api_is_found(tmp_path, text, target):
    found = cli_imports_beyond_the_api(planted_tree(tmp_path, {"evaljobs/cli/__init__.py": "",
                                                               "evaljobs/cli/show.py": text}),
                                       pending=frozenset())
    assert len(found) == 1 and found[0].startswith("evaljobs/cli/show.py:"), found
    assert f"imports {target}:" in found[0], found


def test_the_public_api_and_the_clis_own_modules_may_be_imported(tmp_path):
    text = ("from evaljobs.api import Session\nfrom evaljobs.errors import UsageError\n"
            "from evaljobs import config\nfrom evaljobs.cli._options import db_option\n"
            "from . import _options\nimport click\nfrom evaljobs_middleware import context\n")
    files = {"evaljobs/api.py": "", "evaljobs/errors.py": "", "evaljobs/cli/__init__.py": "",
             "evaljobs/cli/_options.py": "", "evaljobs/cli/show.py": text}
    assert cli_imports_beyond_the_api(planted_tree(tmp_path, files), pending=frozenset()) == []


def test_a_command_may_take_constants_from_a_listed_face_but_call_nothing_there(tmp_path):
    files = {"evaljobs/cli/__init__.py": "", "evaljobs/bench/__init__.py": "", "evaljobs/bench/engine.py": "",
             "evaljobs/cli/bench.py": "from evaljobs.bench import DEFAULT_WIDTHS, STRATEGIES\n",
             "evaljobs/cli/call.py": "def bench():\n    from evaljobs.bench import benchmark\n",
             "evaljobs/cli/mixed.py": "from evaljobs.bench import DEFAULT_WIDTHS, run_bench\n",
             "evaljobs/cli/whole.py": "import evaljobs.bench\n",
             "evaljobs/cli/sweep.py": "from evaljobs.bench.engine import DEFAULT\n"}
    found = cli_imports_beyond_the_api(planted_tree(tmp_path, files), pending=frozenset(),
                                       faces=("evaljobs.bench",))
    assert [line.split(": a command")[0] for line in found] == [
        "evaljobs/cli/call.py:2: evaljobs.cli.call imports evaljobs.bench",
        "evaljobs/cli/mixed.py:1: evaljobs.cli.mixed imports evaljobs.bench",
        "evaljobs/cli/sweep.py:1: evaljobs.cli.sweep imports evaljobs.bench.engine",
        "evaljobs/cli/whole.py:1: evaljobs.cli.whole imports evaljobs.bench"], found


def test_a_listed_module_that_keeps_to_the_public_api_must_be_taken_off(tmp_path):
    files = {"evaljobs/cli/__init__.py": "", "evaljobs/cli/show.py": "from evaljobs.api import Session\n",
             "evaljobs/cli/old.py": "from evaljobs.store import runs\n"}
    pending = frozenset({"evaljobs.cli.show", "evaljobs.cli.old"})
    assert cli_imports_beyond_the_api(planted_tree(tmp_path, files), pending=pending) == [
        "evaljobs/cli/show.py: evaljobs.cli.show imports only the public API now: take it off "
        "CLI_NOT_YET_ON_THE_API"]


# -- the store persists, reports/ builds the report -------------------------------------------------

#: What the store may take from reports/: the row type finalize fills (``reports.rows``) and the gate a
#: stored run is held to (``reports.gate``). The report itself is built by the function the pipeline
#: hands to ``store.finalize`` (``reports.build.build_report``), never by the store.
STORE_MAY_USE_FROM_REPORTS = ("evaljobs.reports.rows", "evaljobs.reports.gate")


def store_imports_of_report_building(modules: dict[str, Module],
                                     allowed=STORE_MAY_USE_FROM_REPORTS) -> list[str]:
    lines = []
    for name, module in sorted(modules.items()):
        if not (name == "evaljobs.store" or name.startswith("evaljobs.store.")):
            continue
        for found in imports_of(module, modules):
            target = found.target
            in_reports = target == "evaljobs.reports" or target.startswith("evaljobs.reports.")
            if in_reports and target not in allowed:
                lines.append(f"{module.shown}:{found.line}: {name} imports {target}: the store persists what "
                             f"reports/ builds; take the report as an argument (as store.finalize does)")
    return lines


def test_the_store_builds_no_report(source):
    assert store_imports_of_report_building(source) == []


def test_a_store_module_importing_report_building_is_found(tmp_path):
    files = {"evaljobs/reports/build.py": "", "evaljobs/reports/rows.py": "",
             "evaljobs/store/results.py": "from evaljobs.reports.rows import ReportRow\n"
                                          "from evaljobs.reports.build import build_report\n"}
    assert store_imports_of_report_building(planted_tree(tmp_path, files)) == [
        "evaljobs/store/results.py:2: evaljobs.store.results imports evaljobs.reports.build: the store "
        "persists what reports/ builds; take the report as an argument (as store.finalize does)"]


# -- a criterion is declared once: its two modules ----------------------------------------------------

#: Where a criterion is declared: its catalog half (name, keys, schema, validation, label) and its grading
#: half (grade function, fault), one module each, named for the criterion (evaljobs/catalog/criteria/).
CRITERION_PACKAGES = ("evaljobs.catalog.criteria", "evaljobs.evaluation.graders")
#: Modules of those packages that are not a criterion (the table, the declaration types).
CRITERION_PACKAGE_PARTS = ("base",)
#: Modules that still name a criterion the registry handles whole, each with why: only shrinks.
CRITERION_NAMED_ELSEWHERE = {
    # the promptfoo importer writes the key its `latency` assertion maps to (a foreign format's mapping)
    "max_latency_ms": frozenset({"evaljobs.catalog.importers.promptfoo_assertions"}),
}


def _criterion_modules(modules: dict[str, Module], package: str) -> dict[str, Module]:
    return {name.rpartition(".")[2]: module for name, module in modules.items()
            if name.startswith(package + ".") and name.rpartition(".")[2] not in CRITERION_PACKAGE_PARTS}


def criteria_declared_by_halves(modules: dict[str, Module]) -> list[str]:
    """A criterion module without its grader module, or a grader module without its criterion."""
    halves = [_criterion_modules(modules, package) for package in CRITERION_PACKAGES]
    lines = []
    for mine, other, package in ((halves[0], halves[1], CRITERION_PACKAGES[1]),
                                 (halves[1], halves[0], CRITERION_PACKAGES[0])):
        for name in sorted(set(mine) - set(other)):
            lines.append(f"{mine[name].shown}: criterion {name!r} has no module in {package}: a criterion "
                         f"is declared in both halves (evaljobs/catalog/criteria/__init__.py says how)")
    return lines


def _named(node: ast.AST) -> object:
    """The name a node spells: a string constant's text or an attribute's name (else None)."""
    if isinstance(node, ast.Constant):
        return node.value
    return node.attr if isinstance(node, ast.Attribute) else None


def criteria_named_elsewhere(modules: dict[str, Module], allowed=CRITERION_NAMED_ELSEWHERE) -> list[str]:
    """The name of a criterion the registry handles whole (declared with ``value_criterion``) as a string
    or an attribute outside its two modules: code that lists or branches on it instead of reading the
    registry (``Expect.value(name)``, ``value_keys()``)."""
    whole = {name for name, module in _criterion_modules(modules, CRITERION_PACKAGES[0]).items()
             if "value_criterion(" in module.source}
    own = {f"{package}.{name}" for package in CRITERION_PACKAGES for name in whole}
    lines = []
    for name, module in sorted(modules.items()):
        if name in own:
            continue
        for node in module.nodes:
            text = _named(node)
            if text in whole and name not in allowed.get(text, ()):
                lines.append(f"{module.shown}:{node.lineno}: {name} names the criterion {text!r}: read the "
                             f"criteria's table (evaljobs.catalog.criteria) instead")
    for criterion, names in sorted(allowed.items()):
        for name in sorted(names):
            module = modules.get(name)
            if module is not None and not any(_named(n) == criterion for n in module.nodes):
                lines.append(f"{module.shown}: {name} no longer names {criterion!r}: take it off "
                             f"CRITERION_NAMED_ELSEWHERE")
    return lines


def test_every_criterion_has_both_halves(source):
    assert criteria_declared_by_halves(source) == []


def test_a_criterion_handled_whole_is_named_only_by_its_modules(source):
    assert criteria_named_elsewhere(source) == []


def test_a_criterion_missing_a_half_is_found(tmp_path):
    files = {"evaljobs/catalog/criteria/__init__.py": "", "evaljobs/catalog/criteria/base.py": "",
             "evaljobs/catalog/criteria/word_limit.py": "", "evaljobs/evaluation/graders/__init__.py": "",
             "evaljobs/evaluation/graders/shouting.py": ""}
    assert criteria_declared_by_halves(planted_tree(tmp_path, files)) == [
        "evaljobs/catalog/criteria/word_limit.py: criterion 'word_limit' has no module in "
        "evaljobs.evaluation.graders: a criterion is declared in both halves "
        "(evaljobs/catalog/criteria/__init__.py says how)",
        "evaljobs/evaluation/graders/shouting.py: criterion 'shouting' has no module in "
        "evaljobs.catalog.criteria: a criterion is declared in both halves "
        "(evaljobs/catalog/criteria/__init__.py says how)"]


def test_a_criterion_named_outside_its_modules_is_found(tmp_path):
    files = {"evaljobs/catalog/criteria/word_limit.py": "CRITERION = value_criterion('word_limit')\n",
             "evaljobs/evaluation/graders/word_limit.py": "NAME = 'word_limit'\n",
             "evaljobs/store/runs.py": "LIMITS = ('word_limit',)\n",
             "evaljobs/reports/__init__.py": "def f(expect):\n    return expect.word_limit\n"}
    found = criteria_named_elsewhere(planted_tree(tmp_path, files), allowed={
        "word_limit": frozenset({"evaljobs.store.runs"}), "other": frozenset({"evaljobs.store.runs"})})
    assert found == [
        "evaljobs/reports/__init__.py:2: evaljobs.reports names the criterion 'word_limit': read the "
        "criteria's table (evaljobs.catalog.criteria) instead",
        "evaljobs/store/runs.py: evaljobs.store.runs no longer names 'other': take it off "
        "CRITERION_NAMED_ELSEWHERE"]


#: Modules whose own words are spelled like a criterion (a foreign format's, a form's), each with the names
#: it may compare, look up or list and why: only shrinks. What branches on a criterion asks the tables.
CRITERION_HOMONYMS = {
    # ActiveAgent's own expectation keys (contains, not_contains, regex) and criterion type (llm_judge),
    # read from its files and mapped onto ours
    "evaljobs.catalog.importers.activeagent": frozenset({"contains", "not_contains", "regex", "llm_judge"}),
    # OpenAI evals' sample field `ideal`; the import counts' `assertions` (source assertions imported)
    "evaljobs.catalog.importers.jsonl": frozenset({"ideal", "assertions"}),
    # promptfoo's assertion types (contains, regex) and assert-set list (assertions), mapped onto ours; the
    # key its latency assertion maps to; the import counts
    "evaljobs.catalog.importers.promptfoo_assertions": frozenset({"contains", "regex", "assertions",
                                                                  "max_latency_ms"}),
    "evaljobs.catalog.importers.promptfoo_tests": frozenset({"contains", "regex"}),
    # the import counts' `assertions`, also a JSON key of `catalog check --json`
    "evaljobs.catalog.importers.shared": frozenset({"assertions"}),
    "evaljobs.catalog.importers.openai_evals": frozenset({"assertions"}),
    "evaljobs.catalog.importers.promptfoo": frozenset({"assertions"}),
    "evaljobs.cli.catalog": frozenset({"assertions"}),
    # the search form's `regex` switch (?regex=1)
    "evaljobs.view.routes": frozenset({"regex"}),
}


def _spelled(node: ast.AST | None, names: set[str]) -> list[str]:
    """The criterion names a node spells: a string constant, or the constants of a tuple, list or set."""
    if isinstance(node, ast.Constant) and node.value in names:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
    return []


def _constant(node: ast.AST) -> ast.AST | None:
    """The node when it is a constant (a key looked up, an attribute asked by name), else None."""
    return node if isinstance(node, ast.Constant) else None


def criteria_branched_on(modules: dict[str, Module], allowed=CRITERION_HOMONYMS) -> list[str]:
    """A criterion's name, as a string, in a comparison (``name == "llm_judge"``, ``in ("contains", …)``), a
    ``case``, a key looked up (``scores["llm_judge"]``, ``.get("ideal")``, ``.pop``, ``.setdefault``), an
    attribute asked by name (``getattr(x, "regex")``) or a list of two or more of them, outside the
    criterion's two modules and the two tables: code that decides by a criterion's name instead of asking
    the criterion (``Criterion.judged``, ``enabled_by``, ``fields``; ``Grader.explain``, ``text_check`` …)."""
    names = set(_criterion_modules(modules, CRITERION_PACKAGES[0]))
    lines = []
    for name, module in sorted(modules.items()):
        if name in CRITERION_PACKAGES:
            continue
        own = {n for n in names for package in CRITERION_PACKAGES if name == f"{package}.{n}"}
        compared = {id(side) for node in module.nodes if isinstance(node, ast.Compare)
                    for side in (node.left, *node.comparators)}
        for node in module.nodes:
            if isinstance(node, ast.Compare):
                found, what = [n for side in (node.left, *node.comparators) for n in _spelled(side, names)], \
                    "compares with"
            elif isinstance(node, ast.MatchValue):
                found, what = _spelled(node.value, names), "matches"
            elif isinstance(node, ast.Subscript):
                found, what = _spelled(_constant(node.slice), names), "looks up"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("get", "pop", "setdefault") and node.args:
                found, what = _spelled(_constant(node.args[0]), names), "looks up"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) > 1:
                found, what = _spelled(_constant(node.args[1]), names), "asks the attribute"
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in compared:
                found, what = _spelled(node, names), "lists"
                found = found if len(found) >= 2 else []
            else:
                continue
            found = [n for n in found if n not in own and n not in allowed.get(name, ())]
            if found:
                lines.append(f"{module.shown}:{node.lineno}: {name} {what} the criterion name "
                             f"{', '.join(repr(n) for n in found)}: ask the criteria's tables "
                             f"(evaljobs.catalog.criteria, evaljobs.evaluation.graders) instead")
    for name, spelled in sorted(allowed.items()):
        module = modules.get(name)
        if module is not None:
            gone = sorted(spelled - {n for n in spelled if any(_named(node) == n for node in module.nodes)})
            if gone:
                lines.append(f"{module.shown}: {name} no longer spells {', '.join(gone)}: take it off "
                             f"CRITERION_HOMONYMS")
    return lines


def test_no_module_decides_by_a_criterions_name(source):
    assert {"llm_judge", "contains", "ideal", "assertions"} <= set(
        _criterion_modules(source, CRITERION_PACKAGES[0]))
    assert not (found := criteria_branched_on(source)), "\n".join(found)


@pytest.mark.parametrize("text, what", [
    ("if name == 'word_limit':\n    pass\n", "compares with the criterion name 'word_limit'"),
    ("ok = key in ('word_limit', 'other')\n", "compares with the criterion name 'word_limit'"),
    ("match name:\n    case 'word_limit':\n        pass\n", "matches the criterion name 'word_limit'"),
    ("x = scores['word_limit']\n", "looks up the criterion name 'word_limit'"),
    ("x = expect.get('word_limit')\n", "looks up the criterion name 'word_limit'"),
    ("x = getattr(expect, 'word_limit')\n", "asks the attribute the criterion name 'word_limit'"),
    ("GATES = ['word_limit', 'shouting']\n", "lists the criterion name 'word_limit', 'shouting'"),
])
def test_a_branch_on_a_criterions_name_is_found(tmp_path, text, what):
    files = {"evaljobs/catalog/criteria/__init__.py": "TABLE = ('word_limit', 'shouting')\n",
             "evaljobs/catalog/criteria/base.py": "", "evaljobs/evaluation/graders/base.py": "",
             "evaljobs/evaluation/graders/__init__.py": "if name == 'shouting':\n    pass\n",
             **{f"evaljobs/{half}/{n}.py": f"if name == {n!r}:\n    x = details[{n!r}]\n"
                for half in ("catalog/criteria", "evaluation/graders") for n in ("word_limit", "shouting")},
             # spelling a name is not deciding by it: a score written under it, a message naming it
             "evaljobs/reports/render.py": "SCORES = {'word_limit': 1.0}\nTEXT = 'word_limit failed'\n",
             "evaljobs/view/routes.py": "REGEX = query.get('shouting') == '1'\n"}
    homonyms = {"evaljobs.view.routes": frozenset({"shouting"})}
    assert criteria_branched_on(planted_tree(tmp_path, files), allowed=homonyms) == []
    planted = planted_tree(tmp_path / "planted", {**files, "evaljobs/reports/render.py": text})
    found = criteria_branched_on(planted, allowed=homonyms)
    assert len(found) == 1 and found[0].startswith("evaljobs/reports/render.py:") and what in found[0], found


def test_a_homonym_no_longer_spelled_must_be_taken_off(tmp_path):
    files = {"evaljobs/catalog/criteria/word_limit.py": "", "evaljobs/evaluation/graders/word_limit.py": "",
             "evaljobs/view/routes.py": "X = 1\n"}
    assert criteria_branched_on(planted_tree(tmp_path, files),
                                allowed={"evaljobs.view.routes": frozenset({"word_limit"})}) == [
        "evaljobs/view/routes.py: evaljobs.view.routes no longer spells word_limit: take it off "
        "CRITERION_HOMONYMS"]


# -- a run option is declared once: evaljobs.run_options.RUN_OPTIONS ---------------------------------

def run_option_names(modules: dict[str, Module], table: str = RUN_OPTIONS_MODULE) -> set[str]:
    """The names the per-pair limits of the table declare (``RunOption(..., limit=True)``).

    The table's other options (``adapter``, ``cache``, ``batch``, ``providers`` …) are words the code uses for
    other things too (a providers-file key, a function's parameter); that they are declared once is
    ``tests/pipeline/test_run_options.py``'s (``RunSettings``, ``Settings``, the flags and ``SubmitOptions``
    checked against the table)."""
    module = modules.get(table)
    return {node.args[0].value for node in (module.nodes if module else ())
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "RunOption"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            and any(k.arg == "limit" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in node.keywords)}


def run_options_listed_by_hand(modules: dict[str, Module], table: str = RUN_OPTIONS_MODULE) -> list[str]:
    """A tuple, list, set or mapping of two or more run options, or a call passing two or more of them by
    keyword, outside the table: a list kept in step by hand (``_STORED_LIMITS``, a ``limits_of`` dict, a
    policy built field by field) instead of one derived from ``RUN_OPTIONS``."""
    names = run_option_names(modules, table)
    lines = []
    for name, module in sorted(modules.items()):
        if name == table:
            continue
        for node in module.nodes:
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                listed = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
            elif isinstance(node, ast.Dict):
                listed = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in names]
            elif isinstance(node, ast.Call):
                listed = [k.arg for k in node.keywords if k.arg in names]
            else:
                continue
            if len(listed) >= 2:
                lines.append(f"{module.shown}:{node.lineno}: {name} lists the run options "
                             f"{', '.join(listed)} by hand: derive them from "
                             "evaljobs.run_options.RUN_OPTIONS")
    return lines


def run_options_declared_elsewhere(modules: dict[str, Module], table: str = RUN_OPTIONS_MODULE) -> list[str]:
    """A ``RunOption(…)`` built outside the table: a second declaration of a run option (its default, flag
    or variable kept somewhere else)."""
    return [f"{module.shown}:{node.lineno}: {name} declares a run option: add it to "
            f"evaljobs.run_options.RUN_OPTIONS instead"
            for name, module in sorted(modules.items()) if name != table for node in module.nodes
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "RunOption"]


def test_run_options_are_declared_only_in_their_table(source):
    assert not (found := run_options_declared_elsewhere(source)), "\n".join(found)


def test_a_run_option_declared_outside_the_table_is_found(tmp_path):
    files = {"evaljobs/run_options.py": "OPTIONS = (RunOption('retries', int, limit=True),)\n",
             "evaljobs/pipeline/runtime.py": "from evaljobs import run_options\n"
                                             "EXTRA = run_options.RunOption('seed', int)\n"}
    assert run_options_declared_elsewhere(planted_tree(tmp_path, files)) == [
        "evaljobs/pipeline/runtime.py:2: evaljobs.pipeline.runtime declares a run option: add it to "
        "evaljobs.run_options.RUN_OPTIONS instead"]


def test_run_options_are_listed_only_by_their_table(source):
    assert len(run_option_names(source)) >= 5
    assert run_options_listed_by_hand(source) == []


def test_a_run_option_list_kept_by_hand_is_found(tmp_path):
    files = {"evaljobs/run_options.py": "OPTIONS = (RunOption('retries', int, limit=True), "
                                   "RunOption('backoff', float, limit=True), RunOption('batch', tuple))\n",
             "evaljobs/store/runs.py": "LIMITS = ('retries', 'backoff')\n"
                                       "POLICY = dict(retries=1, backoff=2)\nONE = {'retries': 3}\n"
                                       "CALL = f(retries=1, batch=2)\n"}
    said = ("lists the run options retries, backoff by hand: derive them from "
            "evaljobs.run_options.RUN_OPTIONS")
    assert run_options_listed_by_hand(planted_tree(tmp_path, files)) == [
        f"evaljobs/store/runs.py:1: evaljobs.store.runs {said}",
        f"evaljobs/store/runs.py:2: evaljobs.store.runs {said}"]


# -- wire formats: what differs between them is asked of the format, never decided by its name --------

#: Where a wire format's name may decide something: the formats themselves (the client's side and the
#: simulated server's side) and the declaration of the names a providers file may use.
WIRE_MODULES = ("evaljobs.providers.wire", "evaljobs.simulated.wire")
WIRE_NAMES_DECLARED_IN = "evaljobs.catalog.modelspec"


def wire_names(modules: dict[str, Module], declared_in: str = WIRE_NAMES_DECLARED_IN) -> set[str]:
    """The names in ``WIRE_FORMATS = (…)`` of the declaring module."""
    for node in modules[declared_in].nodes:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "WIRE_FORMATS"
                                                for t in node.targets):
            return {e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)}
    return set()


def wire_name_branches(modules: dict[str, Module], allowed=WIRE_MODULES,
                       declared_in: str = WIRE_NAMES_DECLARED_IN) -> list[str]:
    """A comparison with a wire format's name (``wire == "anthropic"``, ``api in ("openai", "azure")``),
    a ``case "anthropic":``, or a second list of wire names, outside the wire modules: what differs
    between formats belongs to the format (an attribute or method of ``WireFormat``, or the simulated
    server's ``ServerWire``), found by ``wire_format(name)``."""
    names = wire_names(modules, declared_in)

    def named(node: ast.AST | None) -> list[str]:
        if isinstance(node, ast.Constant) and node.value in names:
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
        return []

    lines = []
    for name, module in sorted(modules.items()):
        if any(name == w or name.startswith(w + ".") for w in allowed):
            continue
        compared = {id(side) for node in module.nodes if isinstance(node, ast.Compare)
                    for side in (node.left, *node.comparators)}
        for node in module.nodes:
            if isinstance(node, ast.Compare):
                found = [n for side in (node.left, *node.comparators) for n in named(side)]
                what = "compares with"
            elif isinstance(node, ast.MatchValue):
                found, what = named(node.value), "matches"
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and name != declared_in \
                    and id(node) not in compared:
                found = named(node)
                found, what = (found if len(found) >= 2 else []), "lists"
            else:
                continue
            if found:
                lines.append(f"{module.shown}:{node.lineno}: {name} {what} the wire format name "
                             f"{', '.join(repr(n) for n in found)}: ask the format (a WireFormat "
                             "attribute or method in evaljobs/providers/wire/) instead of its name")
    return lines


def test_no_module_but_the_wire_formats_branches_on_a_wire_name(source):
    assert wire_names(source) == {"openai", "anthropic", "azure"}
    assert not (found := wire_name_branches(source)), "\n".join(found)


@pytest.mark.parametrize("text, what", [
    ("if self.wire == 'anthropic': pass\n", "compares with the wire format name 'anthropic'"),
    ("ok = api not in ('openai', 'azure')\n", "compares with the wire format name 'openai', 'azure'"),
    ("match api:\n    case 'azure': pass\n", "matches the wire format name 'azure'"),
    ("BATCH_WIRES = ('openai', 'azure', 'anthropic')\n",
     "lists the wire format name 'openai', 'azure', 'anthropic'"),
])
def test_a_branch_on_a_wire_name_is_found(tmp_path, text, what):
    files = {"evaljobs/catalog/modelspec.py": "WIRE_FORMATS = ('openai', 'anthropic', 'azure')\n",
             "evaljobs/providers/wire/anthropic.py": "if wire == 'anthropic':\n    pass\n",
             "evaljobs/simulated/wire.py": "SERVERS = {'openai': 1, 'anthropic': 2}\n",
             "evaljobs/providers/batches.py": "wire = 'openai'\n"}
    assert wire_name_branches(planted_tree(tmp_path, files)) == []
    planted = {**files, "evaljobs/providers/batches.py": text}
    found = wire_name_branches(planted_tree(tmp_path / "planted", planted))
    assert len(found) == 1 and what in found[0], found
    assert found[0].startswith("evaljobs/providers/batches.py:"), found


# -- the tests' own shape: one `sim` fixture, one CLI runner -------------------------------------------

#: Where the shared ``sim`` fixture and the one ``CliRunner`` of the tests live.
SHARED_SIM = "tests/conftest.py"
SHARED_CLI_RUNNER = "tests/helpers/cli.py"


def _test_nodes(tests: Path, but: str):
    """(file as shown, node) for every node of every module under ``tests`` but the one shown as ``but``."""
    for path in sorted(tests.rglob("*.py")):
        shown = path.relative_to(tests.parent).as_posix()
        if shown != but:
            for node in parsed_test_module(path)[1]:
                yield shown, node


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Attribute) and target.attr == "fixture") or (
        isinstance(target, ast.Name) and target.id == "fixture")


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for decorator in node.decorator_list:
        if _is_fixture(decorator):
            named = [k.value for k in getattr(decorator, "keywords", []) if k.arg == "name"]
            if named and isinstance(named[0], ast.Constant):
                return str(named[0].value)
            return node.name
    return None


def local_sim_fixtures(tests: Path) -> list[str]:
    """A ``sim`` fixture defined anywhere but tests/conftest.py (a module tunes the shared one instead)."""
    return [f"{shown}:{node.lineno}: defines its own `sim` fixture: use the one in {SHARED_SIM} "
            "(SIM_OPTIONS, SIM_PER_TEST = True)"
            for shown, node in _test_nodes(tests, but=SHARED_SIM)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _fixture_name(node) == "sim"]


def _names_cli_runner(node: ast.AST) -> bool:
    return ((isinstance(node, ast.Name) and node.id == "CliRunner")
            or (isinstance(node, ast.Attribute) and node.attr == "CliRunner")
            or (isinstance(node, ast.alias) and node.name == "CliRunner"))


def cli_runners_outside_the_fixture(tests: Path) -> list[str]:
    """click's ``CliRunner`` named anywhere but tests/helpers/cli.py (the ``cli`` fixture's)."""
    return [f"{shown}:{getattr(node, 'lineno', '?')}: builds click's CliRunner: use the `cli` fixture "
            f"(tests/conftest.py, {SHARED_CLI_RUNNER})"
            for shown, node in _test_nodes(tests, but=SHARED_CLI_RUNNER) if _names_cli_runner(node)]


def untype_checked_sources(pyproject: Path, sources: dict[str, Path]) -> list[str]:
    """A source tree of ours (``SOURCES``) that mypy's ``files`` leaves out."""
    # tomllib is 3.11+, and the tests also run on 3.10: the one line is read as TOML writes it.
    text = pyproject.read_text(encoding="utf-8")
    section = re.search(r"^\[tool\.mypy\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    files = re.search(r"^files\s*=\s*(.*)$", section.group(1), re.M) if section else None
    checked = {Path(name).parts[0] for name in re.findall(r'"([^"]+)"', files.group(1))} if files else set()
    return [f"{pyproject.name}: [tool.mypy] files leaves out {path.name}/ (add \"{path.name}\")"
            for path in sources.values() if path.name not in checked]


def test_one_sim_fixture():
    assert not (found := local_sim_fixtures(ROOT / "tests")), "\n".join(found)


def test_one_cli_runner():
    assert not (found := cli_runners_outside_the_fixture(ROOT / "tests")), "\n".join(found)


def test_every_source_tree_is_type_checked():
    assert not (found := untype_checked_sources(ROOT / "pyproject.toml", SOURCES)), "\n".join(found)


def test_a_local_sim_fixture_and_a_cli_runner_are_found(tmp_path):
    tests = tmp_path / "tests"
    shared = {"tests/conftest.py": "import pytest\n@pytest.fixture\ndef sim():\n    pass\n",
              "tests/helpers/cli.py": "from click.testing import CliRunner\nRUNNER = CliRunner()\n",
              "tests/test_a.py": "SIM_OPTIONS = {}\ndef test_a(sim, cli):\n    cli('--help')\n"}
    plant(tmp_path, shared)
    assert local_sim_fixtures(tests) == [] and cli_runners_outside_the_fixture(tests) == []
    plant(tmp_path, {
        "tests/test_b.py": "import pytest\n@pytest.fixture(scope='module')\ndef sim():\n    pass\n",
        "tests/c/test_c.py": "from pytest import fixture\n@fixture(name='sim')\ndef provider():\n    pass\n",
        "tests/test_d.py": "import click.testing\ndef test_d():\n    click.testing.CliRunner()\n",
        "tests/test_e.py": "def test_e():\n    from click.testing import CliRunner\n"})
    assert [line.split(": ")[0] for line in local_sim_fixtures(tests)] == [
        "tests/c/test_c.py:3", "tests/test_b.py:3"]
    assert [line.split(": ")[0] for line in cli_runners_outside_the_fixture(tests)] == [
        "tests/test_d.py:3", "tests/test_e.py:2"]


def test_a_source_tree_mypy_does_not_check_is_found(tmp_path):
    sources = {"evaljobs": tmp_path / "evaljobs", "evaljobs_middleware": tmp_path / "middleware"}
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.mypy]\nfiles = ["evaljobs", "middleware"]\n')
    assert untype_checked_sources(pyproject, sources) == []
    pyproject.write_text('[tool.mypy]\nfiles = ["evaljobs"]\n')
    assert untype_checked_sources(pyproject, sources) == [
        'pyproject.toml: [tool.mypy] files leaves out middleware/ (add "middleware")']


# -- the tests mirror the packages -----------------------------------------------------------------------

#: Folders of tests/ that name no package: what the tests share, their data, and the end-to-end suites that
#: cross every package (the public API, docs, README, packaging, this module).
TEST_FOLDERS_BESIDES_PACKAGES = {"helpers": "what tests share", "data": "the tests' data files",
                                 "system": "end-to-end suites that cross every package"}


def stray_test_modules(tests: Path, sources: dict[str, Path]) -> list[str]:
    """A test module at the root of tests/ (only conftest.py is), or a folder that names no package
    (``evaljobs``' subpackages, ``middleware``, and ``TEST_FOLDERS_BESIDES_PACKAGES``)."""
    packages = {path.parent.name for path in sources["evaljobs"].glob("*/__init__.py")}
    packages.add(sources["evaljobs_middleware"].name)
    lines = [f"tests/{path.name}: a module at the root of tests/: move it to the folder of the package it "
             "tests (tests/<package>/, tests/system/ for an end-to-end suite, tests/helpers/ for shared code)"
             for path in sorted(tests.glob("*.py")) if path.name != "conftest.py"]
    lines += [f"tests/{path.name}/: names no package ({', '.join(sorted(packages))}; or "
              f"{', '.join(TEST_FOLDERS_BESIDES_PACKAGES)})"
              for path in sorted(tests.iterdir()) if path.is_dir() and not path.name.startswith((".", "_"))
              and path.name not in packages and path.name not in TEST_FOLDERS_BESIDES_PACKAGES]
    return lines


def test_tests_mirror_the_packages():
    assert not (found := stray_test_modules(ROOT / "tests", SOURCES)), "\n".join(found)


def test_a_test_module_outside_a_package_folder_is_found(tmp_path):
    sources = plant(tmp_path, {"evaljobs/__init__.py": "", "evaljobs/store/__init__.py": "",
                               "middleware/__init__.py": "", "tests/conftest.py": "",
                               "tests/store/test_store.py": "", "tests/middleware/test_crashes.py": "",
                               "tests/system/test_readme.py": "", "tests/helpers/__init__.py": ""})
    assert stray_test_modules(tmp_path / "tests", sources) == []
    plant(tmp_path, {"tests/test_flat.py": "", "tests/recorder.py": "", "tests/stores/test_x.py": ""})
    found = stray_test_modules(tmp_path / "tests", sources)
    assert [line.split(":")[0] for line in found] == [
        "tests/recorder.py", "tests/test_flat.py", "tests/stores/"]
