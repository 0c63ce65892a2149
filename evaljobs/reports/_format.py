"""How a report writes a rate and an amount of money: once, for every format.

The Markdown, HTML and text reports (and the headline, :mod:`evaljobs.reports.headline`)
must say the same thing the same way.
"""
from __future__ import annotations

from typing import Any


def pct(rate: float) -> str:
    """A pass rate as ``87.5%``."""
    return f"{rate * 100:.1f}%"


def money(cost: float | None, unknown: int = 0, total: int | None = None) -> str:
    """A cost in dollars as ``$0.0123``; ``≥ $0.0123`` when ``unknown`` of the ``total`` pairs had no known
    price; ``unknown`` when none had one.

    An unknown price is never shown as $0: with pairs of unknown cost the known sum is a lower bound.
    """
    if cost is None or (unknown and total is not None and unknown >= total):
        return "unknown"
    return f"≥ ${cost:.4f}" if unknown else f"${cost:.4f}"


def signed_money(delta: float | None, unknown: int = 0) -> str:
    """A cost difference as ``+$0.0123``; ``unknown`` when no pair's difference is known; `` (N unknown)``
    after the known part when some are not."""
    if delta is None:
        return "unknown"
    text = f"{'+' if delta >= 0 else '-'}${abs(delta):.4f}"
    return f"{text} ({unknown} unknown)" if unknown else text


def known_sum(costs) -> tuple[float | None, int]:
    """(the sum of the known costs or None when there is none, how many are unknown): never 0 for unknown."""
    known = [c for c in costs if c is not None]
    unknown = len(costs) - len(known)
    return (round(sum(known), 6) if known or not unknown else None), unknown


def cost_line(block: dict, total: int) -> str:
    """A summary's cost: ``$X``, ``≥ $X (cost unknown for N pairs)``, or ``cost unknown for N pairs``."""
    n = block.get("cost_unknown") or 0
    if n and n >= total:
        return f"cost unknown for {n} pair{'s' if n != 1 else ''}"
    return money(block.get("cost"), n) + unknown_note(block)


def unknown_note(block: dict) -> str:
    """`` (cost unknown for N pairs)`` for a summary or model block with ``cost_unknown`` pairs."""
    n = block.get("cost_unknown") or 0
    return f" (cost unknown for {n} pair{'s' if n != 1 else ''})" if n else ""


def self_judge_note(run: dict) -> str:
    """`` · self-judged: M (--allow-self-judge)`` for a run whose judge was also a model under test."""
    models = run.get("self_judge")
    return f" · self-judged: {', '.join(models)} (--allow-self-judge)" if models else ""


def ms_pair(low: int | None, high: int | None) -> str:
    """``p50 / p95`` milliseconds, or ``-`` when none was measured."""
    return "-" if low is None else f"{low:,} / {high:,}"


__all__ = ["cell", "code", "cost_line", "known_sum", "money", "ms_pair", "pct", "self_judge_note", "short",
           "signed_money", "text", "unknown_note"]


def short(text: str | None, limit: int = 120) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    if not text:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def cell(text: Any) -> str:
    """A Markdown table cell: a pipe would end it, a newline would end the table."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def text(value: Any) -> str:
    """A plain-text table cell: also neutralizes HTML, which GitHub would otherwise interpret."""
    return cell(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def code(value: Any, limit: int = 80) -> str:
    """A name in a code span: shortened, and without backticks that would end the span early."""
    return f"`{cell(short(str(value), limit).replace('`', chr(39)))}`"
