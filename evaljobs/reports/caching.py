"""What the provider's prompt cache did in a run: tokens read and written, and what it saved.

One definition (invariant 18) for every view: the JSON report's ``summary.cache`` and each model's
``cache``, the table, Markdown, HTML and JUnit renderings, ``compare`` and the viewer all read
:func:`cache_block` and say it with :func:`cache_note`. A row's saving is computed once, when it is
priced (:func:`evaljobs.catalog.pricing.cache_saving`); here they are only added up, an unknown one
never counted as 0.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from evaljobs.evaluation.result import Result


def cache_block(results: Iterable[Any]) -> dict[str, Any] | None:
    """``{pairs, input_tokens, read_tokens, write_tokens, saved, saving_unknown}`` over rows with a
    prompt cache's tokens; None when no row read or wrote one (a report without caching keeps its shape).

    ``saved`` sums the known savings (None when none is known); ``saving_unknown`` counts the rows whose
    saving is unknown (a cache price not known), so ``saved`` is then a lower bound.
    """
    rows = list(results)
    touched = [r for r in rows if (r.cache_read_tokens or 0) or (r.cache_write_tokens or 0)]
    if not touched:
        return None
    savings = [r.cache_saving for r in touched]
    known = [s for s in savings if s is not None]
    return {"pairs": len(touched),
            "input_tokens": sum([int(r.input_tokens or 0) for r in rows]),
            "read_tokens": sum([int(r.cache_read_tokens or 0) for r in touched]),
            "write_tokens": sum([int(r.cache_write_tokens or 0) for r in touched]),
            "saved": round(sum(known), 6) if known else None,
            "saving_unknown": len(savings) - len(known)}


def cache_note(block: dict[str, Any] | None, *, lead: str = " · ") -> str:
    """``· prompt cache: 9,000 of 12,000 input tokens read, 1,000 written; saved $0.0012`` ("" if none)."""
    if not block:
        return ""
    written = f", {block['write_tokens']:,} written" if block.get("write_tokens") else ""
    saved = block.get("saved")
    unknown = block.get("saving_unknown") or 0
    if saved is None:
        saving = "saving unknown (no cache price known)"
    else:
        word = "saved" if saved >= 0 else "cost"  # cache writes cost more than they saved
        saving = f"{word} {'≥ ' if unknown else ''}${abs(saved):.4f}"
        if unknown:
            saving += f" ({unknown} pair{'s' if unknown != 1 else ''} unknown)"
    return (f"{lead}prompt cache: {block['read_tokens']:,} of {block['input_tokens']:,} input tokens read"
            f"{written}; {saving}")


def side_cache(side: Any) -> dict[str, Any] | None:
    """One side of a comparison's prompt-cache figures: a report's own ``summary.cache``, or
    :func:`cache_block` of its rows (Results, or result dicts whose missing figures are 0)."""
    if isinstance(side, Mapping):
        return (side.get("summary") or {}).get("cache")
    return cache_block(row if isinstance(row, Result) else _RowView(row) for row in side)


class _RowView:
    """A result dict read like a Result by :func:`cache_block` (missing figures are 0)."""

    def __init__(self, row: Mapping[str, Any]) -> None:
        self.row = row

    def __getattr__(self, name: str) -> Any:
        return self.row.get(name, None if name == "cache_saving" else 0)


__all__ = ["cache_block", "cache_note", "side_cache"]
