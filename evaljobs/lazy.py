"""The one lazy mechanism for start-up: a package face names the submodules it loads on first use.

A face (a package's ``__init__``) that would otherwise be imported whole, or whose callers would import
a submodule inside a function to keep ``evaljobs run`` and ``evaljobs --help`` quick, declares::

    TYPE_CHECKING = False
    if TYPE_CHECKING:  # what type checkers and editors see
        from evaljobs.pipeline import events, rerun
    __getattr__ = submodules(__name__, ("events", "rerun"))

and its callers write ``pipeline.rerun.create(...)`` at the place of use, with ``from evaljobs import
pipeline`` at the top. The submodule is imported on the first attribute access (PEP 562 module
``__getattr__``); after that it is an ordinary attribute of the package. Names (rather than submodules)
loaded on first use are an ``_EXPORTS`` table, as in :mod:`evaljobs` and :mod:`evaljobs.api`.

Two more places use the same loader:

* a package's own modules do not import its face (the face names them, so that would be an import
  cycle): the siblings they load on first use are named by a small module of the package instead,
  ``on_demand`` (:mod:`evaljobs.pipeline.on_demand`, :mod:`evaljobs.workers.on_demand`), whose module
  ``__getattr__`` is this one;
* a face's own functions call the loader by name: ``_web = submodules(__name__, ("app", "bundle"))``,
  ``__getattr__ = _web``, then ``_web("app").create_app(...)`` (:mod:`evaljobs.view`, the catalog
  importers' table of converters in :mod:`evaljobs.catalog.importers`).

What is left as an import inside a function (``tests/system/test_architecture.py`` counts them, each with its
reason) is an optional extra whose ``ImportError`` is the message, a plugin loaded before the package,
and a process that must load none of evaljobs.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable, Iterable


def submodules(package: str, names: Iterable[str]) -> Callable[[str], ModuleType]:
    """A module ``__getattr__`` for ``package`` that imports each of ``names`` on first access."""
    known = frozenset(names)

    def __getattr__(name: str) -> ModuleType:
        if name not in known:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return importlib.import_module(f"{package}.{name}")

    return __getattr__
