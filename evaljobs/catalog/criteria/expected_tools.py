"""``expected_tools``: the tools the model must call (``expect.tools``), with a subset of arguments."""
from __future__ import annotations

import json

from evaljobs.catalog.criteria.base import Criterion, Shown
from evaljobs.catalog.model import Expect


def _show(expect: Expect) -> Shown | None:
    if not expect.tools:
        return None
    calls = tuple(f"{t.name}({json.dumps(t.arguments, sort_keys=True)})" for t in expect.tools)
    return Shown("calls: ", calls)


CRITERION = Criterion("expected_tools", present=lambda e: bool(e.tools), show=_show, enabled_by=("tools",))
