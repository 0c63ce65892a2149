"""What a criterion declares to the catalog: its name, its keys (schema and validation), its label.

Plain data and pure functions (no grading: the grade function is attached by
:mod:`evaljobs.evaluation.graders`, a layer above). The table of criteria is
:mod:`evaljobs.catalog.criteria`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from evaljobs.catalog.model import Expect
from evaljobs.catalog.text import show

#: Integers beyond 64 bits are not portable JSON (and Python refuses to print huge ones).
MAX_INT = 2**63 - 1
#: The JSON Schema of a whole number >= 1 (within ``MAX_INT``).
POSITIVE_INT: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_INT}
#: The JSON Schema of a non-empty string, and of one or a list of them, or null (``expect.contains``, …).
NONEMPTY: dict[str, Any] = {"type": "string", "minLength": 1, "pattern": r"\S"}
STRINGS: dict[str, Any] = {"anyOf": [NONEMPTY, {"type": "array", "items": NONEMPTY}, {"type": "null"}]}


class ValueProblem(ValueError):
    """A key's value that a criterion refuses: the message is one line, naming the key and the value."""


def is_int(value: Any) -> bool:
    """A JSON integer (a boolean is not one), within ``MAX_INT``."""
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT <= value <= MAX_INT


def positive_int(name: str, value: Any) -> int:
    """``value`` when it is a whole number >= 1, else :class:`ValueProblem`."""
    if not is_int(value) or value < 1:
        raise ValueProblem(f"{name} must be a positive integer, not {show(value)}")
    return value


def score_threshold(name: str, value: Any) -> float:
    """``value`` as a float when it is a number from 0 to 1 (a score needed to pass), else
    :class:`ValueProblem`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueProblem(f"{name} must be a number from 0 to 1 (the score needed to pass), "
                           f"not {show(value)}")
    return float(value)


class Walk(Protocol):
    """What a criterion reading its own ``expect`` keys (``Criterion.read``) asks of the catalog walk
    (:mod:`evaljobs.catalog.validate`): where to report a problem, and the readers of shapes every part of a
    catalog shares. ``path`` locates the value in the file (its line), ``where`` names the scenario."""

    def add(self, path: tuple, where: str, what: str) -> None:
        """Report one problem (one line)."""

    def unknown_keys(self, path: tuple, where: str, raw: dict, valid: tuple[str, ...],
                     what: str = "key") -> None:
        """Report each key of ``raw`` not in ``valid`` (with a did-you-mean)."""

    def strings(self, path: tuple, where: str, what: str, raw: Any) -> tuple[str, ...]:
        """A string or a list of non-empty strings, de-duplicated (order kept)."""
        return ()

    def json_value(self, path: tuple, where: str, what: str, value: Any) -> Any:
        """``value`` when it is plain JSON data (reported otherwise)."""


class Field(NamedTuple):
    """A key of ``expect`` a criterion reads itself (``Criterion.read``), onto a typed field of
    :class:`Expect`: its value needs the whole scenario (the declared tools), or more than one key's."""

    name: str
    #: Its JSON Schema (``null``, "not set", included).
    schema: dict[str, Any]
    #: One sentence for the schema (editors show it while typing).
    description: str
    #: Listed after the keys criteria declare whole (``Key``), as the keys added later always were.
    later: bool = False


def _read_nothing(walk: Walk, path: tuple, where: str, raw: Mapping[str, Any],
                  declared: list[str]) -> dict[str, Any]:
    return {}


def _no_body(expect: Expect) -> dict[str, Any]:
    return {}


class Key(NamedTuple):
    """A catalog key a criterion owns whole: the registry validates it, describes it in the schema, keeps
    it in the canonical body (so in the digest) and hands its value to the grader (``Expect.value``)."""

    name: str
    #: The JSON Schema of a set value (``null``, "not set", is added by the schema).
    schema: dict[str, Any]
    #: One sentence for the schema (editors show it while typing).
    description: str
    #: ``check(where, value) -> value``: the value to keep, or :class:`ValueProblem`.
    check: Callable[[str, Any], Any]
    #: Also a setting: ``defaults:``, a group's defaults and a scenario may set it for every expectation
    #: below them (a scenario's own ``expect:`` may set it too, not both).
    setting: bool = True
    #: Written in the canonical body even when unset (``null``): the keys that were always there keep
    #: catalogs' digests; a key added later is written only when set.
    always_in_body: bool = False


class Shown(NamedTuple):
    """What the viewer's scenario page lists for an expectation: ``text``, then each of ``codes`` as code,
    then ``block`` as a preformatted block."""

    text: str
    codes: tuple[str, ...] = ()
    block: str | None = None


def _nothing(expect: Expect) -> Shown | None:
    return None


class Criterion(NamedTuple):
    """One grading criterion as a catalog knows it.

    ``present(expect)`` says whether the expectations enable it (``gate: true`` gates exactly these); a
    criterion enabled by no expectation (``response_present``, ``tools_succeeded``) says ``False`` and is
    applied by its grader on its own terms.
    """

    name: str
    present: Callable[[Expect], bool]
    #: The keys the registry handles whole (a criterion whose keys need the whole scenario — declared
    #: tools, the judge's block — is validated by the catalog walk in :mod:`evaljobs.catalog.validate`).
    keys: tuple[Key, ...] = ()
    #: Whether ``expect.gate`` may name it (a gate fails the scenario whatever the mean score).
    gateable: bool = True
    #: Whether ``expect.gate`` may name it though no expectation enables it (a check of the answer itself).
    gate_alone: bool = False
    #: Its label in reports: the line the viewer's scenario page shows for the expectation.
    show: Callable[[Expect], Shown | None] = _nothing
    #: The keys of ``expect`` whose values enable it (an importer building a gate list from a foreign
    #: format's expectations asks these; a weighted ``expect`` may set none of them but its own).
    enabled_by: tuple[str, ...] = ()
    #: Its score is an LLM judge's: a scenario grading it needs a judge model (the verdict digest names the
    #: judge), a result scored on it cost one judge call, and it passes on the judge's own decision
    #: (``details.judge.passed``), not on its score alone.
    judged: bool = False
    #: It grades a weighted ``expect`` (promptfoo's assertion lists) alone: the keys of the other criteria
    #: may not be set beside ``weighted: true``.
    grades_weighted: bool = False
    #: The keys of ``expect`` it reads itself (``Field``), besides the ones the registry handles (``keys``).
    fields: tuple[Field, ...] = ()
    #: ``read(walk, path, where, raw_expect, declared_tools) -> {Expect field: value}``: its ``fields``
    #: validated, problems reported to ``walk``.
    read: Callable[[Walk, tuple, str, Mapping[str, Any], list[str]], dict[str, Any]] = _read_nothing
    #: ``body(expect) -> {key: value}``: what it writes of its ``fields`` in the canonical body (so the
    #: digest); a key that was always there is always written, a key added later only when set (catalogs
    #: that do not use it keep their digest).
    body: Callable[[Expect], dict[str, Any]] = _no_body


def value_criterion(name: str, *, description: str, schema: dict[str, Any],
                    check: Callable[[str, Any], Any], label: Callable[[Any], str],
                    always_in_body: bool = False) -> Criterion:
    """A criterion shaped like ``token_budget``: one key, a value set in ``expect`` or as a setting, present
    when set; ``label(value)`` is its line on the viewer's scenario page."""

    def present(expect: Expect) -> bool:
        return expect.value(name) is not None

    def shown(expect: Expect) -> Shown | None:
        value = expect.value(name)
        return None if value is None else Shown(label(value))

    key = Key(name, schema, description, check, always_in_body=always_in_body)
    return Criterion(name=name, present=present, keys=(key,), show=shown, enabled_by=(name,))


T = TypeVar("T")


class Table(Generic[T]):
    """A table of declarations by criterion name: the built-in ones in their order, then those registered
    at run time (a plugin's, a test's throwaway one), which may be removed again; built-ins stay."""

    def __init__(self, what: str, built_in: dict[str, T]):
        self.what = what
        self._built_in = frozenset(built_in)
        self._items = dict(built_in)
        self._values = tuple(self._items.values())
        #: Changes with every registration: what is derived from the table is cached per version.
        self.version = 0

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._items[name] = item
        self._changed()
        return item

    def remove(self, name: str) -> None:
        if name in self._built_in:
            raise ValueError(f"{self.what} {name!r} is built in")
        if self._items.pop(name, None) is not None:
            self._changed()

    def _changed(self) -> None:
        self._values = tuple(self._items.values())
        self.version += 1

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def values(self) -> tuple[T, ...]:
        return self._values


__all__ = ["MAX_INT", "NONEMPTY", "POSITIVE_INT", "STRINGS", "Criterion", "Field", "Key", "Shown", "Table",
           "ValueProblem", "Walk", "is_int", "positive_int", "score_threshold", "value_criterion"]
