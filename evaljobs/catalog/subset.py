"""Subsets: run only the scenarios you need (``--filter``, ``--tag``, ``--exclude-tag``, ``--limit``,
``--sample``).

A selection is applied to a loaded catalog before the run exists, and gives a
catalog of the chosen scenarios (its own body and digest, so the run's snapshot
is exactly what it evaluates). The order is fixed and documented:

1. ``--filter GLOB`` (repeatable; any matches): the scenario key matches a shell glob;
2. ``--tag TAG`` (repeatable; any matches): the scenario carries the tag;
3. ``--exclude-tag TAG`` (repeatable): drops every scenario carrying it;
4. ``--sample N --seed S``: N scenarios drawn at random (``random.Random(S)``, over the
   keys in order, so the same seed draws the same scenarios on every machine);
5. ``--limit N``: the first N by key.

An empty selection is a one-line error, raised before anything is created.
"""
from __future__ import annotations

import fnmatch
import random
from dataclasses import dataclass
from typing import Any

from evaljobs.catalog.digest import build_catalog
from evaljobs.catalog.model import Catalog
from evaljobs.errors import UsageError


class EmptySelection(UsageError):
    """No scenario is left after the selection (one line naming the catalog and the selection)."""


@dataclass(frozen=True)
class Selection:
    filters: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    exclude_tags: tuple[str, ...] = ()
    limit: int | None = None
    sample: int | None = None
    seed: int = 0

    @property
    def empty(self) -> bool:
        """True when it selects everything (nothing to apply, nothing to record)."""
        return not (self.filters or self.tags or self.exclude_tags or self.limit is not None
                    or self.sample is not None)

    def describe(self) -> str:
        """``tag: refunds, filter: refund-*, sample 12 (seed 7)``: how the report names the selection."""
        parts = []
        if self.filters:
            parts.append("filter: " + ", ".join(self.filters))
        if self.tags:
            parts.append("tag: " + ", ".join(self.tags))
        if self.exclude_tags:
            parts.append("excluding tag: " + ", ".join(self.exclude_tags))
        if self.sample is not None:
            parts.append(f"sample {self.sample} (seed {self.seed})")
        if self.limit is not None:
            parts.append(f"limit {self.limit}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "filter": list(self.filters),
            "tag": list(self.tags),
            "exclude_tag": list(self.exclude_tags),
            "limit": self.limit,
            "sample": self.sample,
            "seed": self.seed if self.sample is not None else None,
        }


def select(catalog: Catalog, selection: Selection) -> tuple[Catalog, dict[str, Any] | None]:
    """The catalog of the selected scenarios and what the run records about it (None: no selection)."""
    if selection.empty:
        return catalog, None
    for name, value in (("--limit", selection.limit), ("--sample", selection.sample)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be 1 or more, not {value}")
    chosen = list(catalog.scenarios)
    if selection.filters:
        chosen = [s for s in chosen if any(fnmatch.fnmatchcase(s.key, glob) for glob in selection.filters)]
    if selection.tags:
        chosen = [s for s in chosen if set(s.tags) & set(selection.tags)]
    if selection.exclude_tags:
        chosen = [s for s in chosen if not set(s.tags) & set(selection.exclude_tags)]
    if selection.sample is not None and selection.sample < len(chosen):
        picked = set(random.Random(selection.seed).sample([s.key for s in chosen], selection.sample))
        chosen = [s for s in chosen if s.key in picked]
    if selection.limit is not None:
        chosen = chosen[:selection.limit]
    if not chosen:
        raise EmptySelection(f"{catalog.source}: no scenario of catalog {catalog.name!r} "
                             f"({len(catalog.scenarios)} scenarios) matches {selection.describe()}: "
                             f"nothing to run; {_what_there_is(catalog)}")
    picked_keys = {s.key for s in chosen}  # chosen by key order (above); listed as the catalog lists them
    chosen = [catalog.scenario(key) for key in catalog.order if key in picked_keys]
    subset = build_catalog(catalog.name, catalog.description, chosen, catalog.source, epochs=catalog.epochs)
    record = {**selection.to_dict(), "chosen": len(chosen), "of": len(catalog.scenarios),
              "text": selection.describe()}
    return subset, record


def _what_there_is(catalog: Catalog, shown: int = 12) -> str:
    """The catalog's tags (with counts) and its first keys: what a --tag or --filter could have named."""
    counts: dict[str, int] = {}
    for scenario in catalog.scenarios:
        for tag in scenario.tags:
            counts[tag] = counts.get(tag, 0) + 1

    def listed(items: list[str]) -> str:
        return ", ".join(items[:shown]) + (f" …and {len(items) - shown} more" if len(items) > shown else "")

    tags = listed([f"{tag} ({n})" for tag, n in sorted(counts.items())]) if counts else "none"
    return f"its tags: {tags}; its keys: {listed(list(catalog.keys))}"


def selection_note(record: dict[str, Any] | None) -> str:
    """``12 of 140 scenarios (tag: refunds)``, or "" for a run over the whole catalog."""
    if not record:
        return ""
    return f"{record['chosen']} of {record['of']} scenarios ({record['text']})"


__all__ = ["EmptySelection", "Selection", "select", "selection_note"]
