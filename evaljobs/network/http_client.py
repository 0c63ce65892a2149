"""httpx, imported without its command-line client (start-up time).

``import httpx`` runs ``from ._main import main``: httpx's ``httpx`` command, which imports
``pygments`` and ``rich`` when they are installed (pygments comes with pytest). With pygments and
without rich that is 66 M instructions of ``import httpx`` alone (30 M, 2.5 %, of a one-scenario
``evaljobs run``, which shares some of those imports) spent on a lexer table before an ImportError
httpx catches; with both installed it costs more. evaljobs
never runs httpx's command, so the first import of httpx in the process goes through here with
``httpx._main`` marked absent: httpx takes its own fallback (``httpx.main`` then says the CLI
extra is missing). The mark is removed at once: a later ``import httpx._main`` (or the ``httpx``
command, a process of its own) behaves exactly as without evaljobs. Every evaljobs module that
uses httpx imports it from here.
"""
from __future__ import annotations

import sys

if "httpx" not in sys.modules and "httpx._main" not in sys.modules:
    sys.modules["httpx._main"] = None  # type: ignore[assignment]  # `from ._main import main` -> ImportError
    try:
        import httpx
    finally:
        if sys.modules.get("httpx._main", 0) is None:
            del sys.modules["httpx._main"]
import httpx  # noqa: E402,F811 - the module, imported above or by someone else before us

__all__ = ["httpx"]
