"""A bound on what a YAML document may expand to: the guard against alias bombs.

Why: YAML aliases share a node, so nine lines of ``&a [*b, *b, …]`` describe
10^8 strings. The readers build shared objects cheaply, but everything
after them — validation, the digest, the stored snapshot, a report — walks
or serialises the *expanded* tree (issue 16: a 713-byte catalog took 87 s
and 3.7 GB, then was reported "ok"). So every reader counts, event by event,
what the document expands to (an alias costs what its anchor expands to) and
stops with one line as soon as a bound is passed, before anything expands.

The bounds are far above any real catalog (10,000 scenarios sharing tools by
alias stay well inside) and far below what hurts: the check itself is
linear in the text and keeps one number per anchor.
"""
from __future__ import annotations

from typing import Any, Callable

import yaml

from evaljobs.catalog.model import CatalogError

#: Most alias uses (``*name``) in one document.
MAX_ALIASES = 100_000
#: Most values (scalars, lists, mappings) the document may expand to.
MAX_NODES = 5_000_000
#: Most characters of scalar text the document may expand to (about its size as JSON).
MAX_CHARS = 50_000_000


class ExpansionBudget:
    """Counts what a YAML event stream expands to; :meth:`wrap` checks each event as it is read."""

    def __init__(self, source: str, *, max_aliases: int = MAX_ALIASES, max_nodes: int = MAX_NODES,
                 max_chars: int = MAX_CHARS) -> None:
        self.source = source
        self.max_aliases, self.max_nodes, self.max_chars = max_aliases, max_nodes, max_chars
        self.aliases = 0
        self.nodes = 0
        self.chars = 0
        self._open: list[tuple[str | None, int, int]] = []
        self._sizes: dict[str, tuple[int, int]] = {}

    def wrap(self, get_event: Callable[[], Any]) -> Callable[[], Any]:
        """``get_event`` that charges every event it returns (a loader's ``get_event``)."""
        def bounded() -> Any:
            event = get_event()
            if event is not None:
                self.charge(event)
            return event
        return bounded

    def charge(self, event: Any) -> None:
        kind = type(event)
        if kind is yaml.ScalarEvent:  # most events: _add inlined
            chars = len(event.value) + 2
            if event.anchor is not None:
                self._sizes[event.anchor] = (1, chars)
            self.nodes += 1
            self.chars += chars
            if self.nodes > self.max_nodes or self.chars > self.max_chars:
                self._add((0, 0), event)
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            self._open.append((event.anchor, self.nodes, self.chars))
            self._add((1, 2), event)
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            if self._open:
                anchor, nodes, chars = self._open.pop()
                if anchor is not None:
                    self._sizes[anchor] = (self.nodes - nodes, self.chars - chars)
        elif kind is yaml.AliasEvent:
            self.aliases += 1
            if self.aliases > self.max_aliases:
                raise self._error(event, f"more than {self.max_aliases:,} alias uses (*name)")
            # An alias to an anchor still open (recursive) or unknown costs nothing here:
            # the reader refuses those itself, with its own message.
            self._add(self._sizes.get(event.anchor, (1, 0)), event)

    def _add(self, size: tuple[int, int], event: Any) -> None:
        self.nodes += size[0]
        self.chars += size[1]
        if self.nodes > self.max_nodes:
            raise self._error(event, f"more than {self.max_nodes:,} values once its aliases are expanded")
        if self.chars > self.max_chars:
            raise self._error(event, f"more than {self.max_chars // 1_000_000} MB of text once its aliases "
                                     "are expanded")

    def _error(self, event: Any, what: str) -> CatalogError:
        line = event.start_mark.line + 1 if event.start_mark is not None else 0
        return CatalogError([f"{self.source}:{line}: the YAML document expands to {what} (an alias bomb?); "
                             "write the content out, or split the file"])


def check_expansion(text: str, source: str, loader: type) -> None:
    """Read ``text``'s events once with ``loader`` and raise ``CatalogError`` past a bound.

    For readers that hand the text to PyYAML's own constructor afterwards (the importers).
    """
    reader = loader(text)
    try:
        get_event = ExpansionBudget(source).wrap(reader.get_event)
        while get_event() is not None:
            pass
    finally:
        reader.dispose()


__all__ = ["ExpansionBudget", "check_expansion", "MAX_ALIASES", "MAX_NODES", "MAX_CHARS"]
