"""An assertion that cannot run in this process: its own module, below the graders and the assertion
runners that both raise it (so the runners may read the graders' table without an import cycle)."""
from __future__ import annotations


class AssertionRefused(Exception):
    """An assertion that cannot run here (no Node, no jsonschema): one line, naming it and the fix."""


__all__ = ["AssertionRefused"]
