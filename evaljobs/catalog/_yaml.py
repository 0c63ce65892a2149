"""The YAML reader of catalog files: plain data plus the line of every key and list item.

Private to :mod:`evaljobs.catalog`: validation reports problems by file and
line, and PyYAML's own loader keeps no lines (and is ten times slower on
catalogs of 10,000 scenarios); see :func:`load_yaml`. YAML 1.2 scalars
(:mod:`evaljobs.catalog.yaml12`): Yes/No/on/off stay strings.
"""
from __future__ import annotations

from typing import Any, Callable

import yaml

from evaljobs.catalog.model import CatalogError
from evaljobs.catalog.text import escape_breaks, show
from evaljobs.catalog.yaml12 import MAX_INT_DIGITS
from evaljobs.catalog.yaml12 import FastLoader as _Loader
from evaljobs.catalog.yaml_bounds import ExpansionBudget

_TAG = "tag:yaml.org,2002:"
_PLAIN_TAGS = (None, "!", _TAG + "map", _TAG + "seq")
_NO_KEY = object()
_MERGE = object()
#: The longest text read once and shared (keys, tags, roles: the texts a catalog repeats).
_SHARED_TEXT = 32


class LinesNeeded(Exception):
    """A duplicate key met while only some lines are kept: its message names the first one's line."""


class _Frame:
    __slots__ = ("obj", "path", "line", "is_map", "key", "key_line", "merges", "anchor", "keep")

    def __init__(self, obj: Any, path: tuple, line: int, anchor: str | None, keep: bool):
        self.obj, self.path, self.line, self.anchor = obj, path, line, anchor
        self.is_map = isinstance(obj, dict)
        #: Whether the lines of this collection's keys or items are recorded.
        self.keep = keep
        self.key: Any = _NO_KEY
        self.key_line = 0
        self.merges: list[tuple[Any, int]] | None = None


def load_yaml(text: str, source: str, problems: list[str],
              lines_of: Callable[[tuple], bool] | None = None) -> tuple[Any, dict[tuple, int]]:
    """Plain data from the YAML event stream, plus ``{path: line}`` for every key and list item.

    With ``lines_of``, only the items of the lists whose path it accepts get a line (a catalog's
    scenarios: 100,000 of them have 900,000 keys and items, whose lines take more memory and time than
    the scenarios; messages need them, a valid catalog does not), and a duplicate key raises
    :class:`LinesNeeded` instead of being reported without its first line: read again without
    ``lines_of``. Everything else, messages included, is the same.

    PyYAML's own composer + constructor build a node tree and then walk it
    with generic, generator-based machinery: about 10x slower than this, which
    matters for catalogs of 10,000 scenarios. Duplicate keys (which YAML would
    silently collapse) are appended to ``problems``; anything that cannot be
    plain data (recursive aliases, complex keys, collection tags) raises
    ``CatalogError``.
    """
    loader = _Loader(text)
    resolvers = loader.yaml_implicit_resolvers
    wildcard = resolvers.get(None, [])
    # The resolvers to try by a plain scalar's first character (the wildcard's last), made once.
    candidates = {first: entries + wildcard for first, entries in resolvers.items() if first is not None}
    # Each short text once: 100,000 scenarios write 'key', 'prompt', 'expect' and their tags 100,000 times.
    texts: dict[str, str] = {}
    lines: dict[tuple, int] = {}
    anchors: dict[str, Any] = {}
    open_anchors: set[str] = set()
    stack: list[_Frame] = []
    root: list[Any] = []
    documents = 0

    def fatal(line: int, what: str) -> CatalogError:
        return CatalogError(problems + [escape_breaks(f"{source}:{line}: {what}")])

    def scalar(event: Any) -> Any:
        tag, value = event.tag, event.value
        if tag is None and event.implicit[0]:
            for tag, regexp in candidates.get(value[:1], wildcard):
                if regexp.match(value):
                    break
            else:
                return value
            if tag == _TAG + "null":
                return None
            if tag == _TAG + "bool":
                return loader.bool_values[value.lower()]
            if (tag == _TAG + "int" and value.isdigit() and (value[0] != "0" or value == "0")
                    and len(value) <= MAX_INT_DIGITS):  # longer: the constructor refuses it, in one line
                return int(value)
            if tag == _TAG + "merge":
                return _MERGE
        elif tag is None or tag == "!" or tag == _TAG + "str":
            return value
        node = yaml.ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
        return loader.construct_object(node)

    def child_path(line: int, kind: str) -> tuple:
        if not stack:
            return ()
        parent = stack[-1]
        if not parent.is_map:
            return parent.path + (len(parent.obj),)
        if parent.key is _NO_KEY:
            raise fatal(line, f"a mapping key must be a plain value, not {kind}; catalogs use string keys")
        return parent.path + (parent.key,)

    def add(value: Any, line: int) -> None:
        if type(value) is str and len(value) <= _SHARED_TEXT:
            value = texts.setdefault(value, value)
        frame = stack[-1] if stack else None
        if value is _MERGE and (frame is None or not frame.is_map or frame.key is not _NO_KEY):
            raise fatal(line, "'<<' is YAML's merge key; quote it (\"<<\") to use it as text")
        if frame is None:
            root.append(value)
            return
        if not frame.is_map:
            if frame.keep:
                lines[frame.path + (len(frame.obj),)] = line
            frame.obj.append(value)
        elif frame.key is _NO_KEY:
            if isinstance(value, (dict, list, set, frozenset)):  # `!!set x: 1` builds a set key
                raise fatal(line, "a mapping key must be a plain value, not a collection; "
                                  "catalogs use string keys")
            frame.key, frame.key_line = value, line
        else:
            key, frame.key = frame.key, _NO_KEY
            if key is _MERGE:
                frame.merges = (frame.merges or []) + [(value, frame.key_line)]
                return
            if key in frame.obj:
                if not frame.keep:
                    raise LinesNeeded
                problems.append(escape_breaks(
                    f"{source}:{frame.key_line}: duplicate key {show(key)} in the same mapping "
                    f"(first at line {lines.get(frame.path + (key,), '?')}); remove one: only the last "
                    f"would be used"))
            elif frame.keep:
                lines[frame.path + (key,)] = frame.key_line
            frame.obj[key] = value

    def merge(frame: _Frame) -> None:
        """``<<: *anchor`` (or a list of them): explicit keys win, then earlier sources."""
        for value, line in frame.merges or ():
            sources = value if isinstance(value, list) else [value]
            for item in sources:
                if not isinstance(item, dict):
                    raise fatal(line, "'<<' (merge) needs a mapping or a list of mappings")
                for key, item_value in item.items():
                    frame.obj.setdefault(key, item_value)

    try:
        get_event = loader.get_event
        charge = ExpansionBudget(source).charge  # alias bombs stop here, in one line
        while (event := get_event()) is not None:
            charge(event)
            kind = type(event)
            line = event.start_mark.line + 1
            if kind is yaml.ScalarEvent:
                value = scalar(event)
                if event.anchor is not None:
                    anchors[event.anchor] = value
                    open_anchors.discard(event.anchor)  # redefined: aliases now mean this value
                add(value, line)
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                name = "a mapping" if kind is yaml.MappingStartEvent else "a list"
                if event.tag not in _PLAIN_TAGS:
                    if event.tag == _TAG + "set":
                        raise fatal(line, "a YAML set (!!set) is not JSON data; write a list instead")
                    raise fatal(line, f"YAML tag {event.tag.replace(_TAG, '!!')} is not supported: a catalog "
                                      f"holds JSON-like data; write {name} without the tag")
                path = child_path(line, name)
                is_map = kind is yaml.MappingStartEvent
                frame = _Frame({} if is_map else [], path, line, event.anchor,
                               lines_of is None or (not is_map and lines_of(path)))
                if event.anchor is not None:
                    anchors[event.anchor] = frame.obj
                    open_anchors.add(event.anchor)
                stack.append(frame)
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                frame = stack.pop()
                if frame.merges:
                    merge(frame)
                if frame.anchor is not None:
                    open_anchors.discard(frame.anchor)
                add(frame.obj, frame.line)
            elif kind is yaml.AliasEvent:
                if event.anchor not in anchors:
                    raise fatal(line, f"unknown alias *{event.anchor}; "
                                      f"define the anchor &{event.anchor} first")
                if event.anchor in open_anchors:
                    raise fatal(line, f"recursive alias *{event.anchor} (used inside its own anchor); "
                                      f"a catalog must be a tree: copy the content instead")
                add(anchors[event.anchor], line)
            elif kind is yaml.DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise fatal(line, "a second YAML document ('---'); a catalog file holds exactly one")
    finally:
        loader.dispose()
    return (root[0] if root else None), lines


def yaml_error(source: str, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or problem is None:
        return escape_breaks(f"{source}: YAML error: {str(exc).splitlines()[0] if str(exc) else exc!r}")
    context = getattr(exc, "context", None)
    constructing = isinstance(exc, yaml.constructor.ConstructorError)
    kind = "cannot read YAML value" if constructing else "YAML syntax error"
    text = f"{source}:{mark.line + 1}: {kind}: {problem} (column {mark.column + 1})"
    context_mark = getattr(exc, "context_mark", None)
    if context:
        text += f", {context}"
        if context_mark is not None and context_mark.line != mark.line:
            text += f" at line {context_mark.line + 1}"
    return escape_breaks(text)


__all__ = ["LinesNeeded", "load_yaml", "yaml_error"]
