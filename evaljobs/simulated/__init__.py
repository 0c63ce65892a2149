"""The simulated provider: a real HTTP server on loopback speaking the OpenAI and Anthropic wire formats.

``directives`` parses the ``[sim: …]`` steering text, ``answers`` decides what to
say, ``server`` serves it over HTTP (``http`` is the HTTP/1.1 plumbing), ``judge`` grades a
judge request deterministically.
"""
from evaljobs.simulated.directives import Directive, DirectiveError, collect_directives, strip_directives
from evaljobs.simulated.options import parse_simulate_options
from evaljobs.simulated.server import SimulatedProvider

__all__ = ["Directive", "DirectiveError", "SimulatedProvider", "collect_directives", "parse_simulate_options",
           "strip_directives"]
