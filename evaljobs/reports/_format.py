"""How a report writes a rate and an amount of money: once, for every format.

The Markdown, HTML and text reports (and the headline, :mod:`evaljobs.reports.headline`)
must say the same thing the same way.
"""
from __future__ import annotations


def pct(rate: float) -> str:
    """A pass rate as ``87.5%``."""
    return f"{rate * 100:.1f}%"


def money(cost: float) -> str:
    """A cost in dollars as ``$0.0123``."""
    return f"${cost:.4f}"


__all__ = ["pct", "money"]
