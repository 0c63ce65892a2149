"""The simulated provider: a real HTTP server on loopback speaking the OpenAI and Anthropic wire formats.

``directives`` parses the ``[sim: …]`` steering text, ``answers`` decides what to
say, ``server`` serves it over HTTP (``http`` is the HTTP/1.1 plumbing), ``judge`` grades a
judge request deterministically.

:class:`SimulatedProvider` (the server, its answers and its batch desk) loads on first use
(:mod:`evaljobs.lazy`): a run against real providers never starts one, so it does not load it.
"""
from typing import Any

from evaljobs.lazy import submodules
from evaljobs.simulated.directives import Directive, DirectiveError, collect_directives, strip_directives
from evaljobs.simulated.options import parse_simulate_options

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time it loads on first use (below)
    from evaljobs.simulated.server import SimulatedProvider

_EXPORTS = {"SimulatedProvider": "server"}
_module = submodules(__name__, ("answers", "batches", "http", "judge", "server", "wire"))


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    return _module(name) if module is None else getattr(_module(module), name)


__all__ = ["Directive", "DirectiveError", "SimulatedProvider", "collect_directives", "parse_simulate_options",
           "strip_directives"]
