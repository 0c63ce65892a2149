"""The grading criteria: one module per criterion, one table, read by everything that names one.

A criterion is declared once, in two halves because the catalog must not import
grading: here, what a catalog knows of it (a :class:`Criterion`: its name, the
keys it owns with their JSON Schema and validation — handled whole, ``keys``, or
read by the criterion itself, ``fields``/``read``/``body`` —, the ``expect`` keys
that enable it, whether ``expect.gate`` may name it, whether an LLM judge scores
it, whether it grades weighted lists, its label in reports); in
:mod:`evaljobs.evaluation.graders`, its grade function, registered under the same
name. The validator, the schema, the digest, the importers, grading, the reports,
the store and the viewer read this table; none of them lists criteria or decides
by a criterion's name (``tests/system/test_architecture.py`` checks).

Adding a criterion shaped like ``token_budget`` (one value, set in ``expect`` or as a
setting):

1. a module here: ``CRITERION = value_criterion("name", description=…, schema=…,
   check=…, label=…)``, and its module in ``_BUILT_IN`` (the order is the order
   criteria are listed in messages, the schema and a catalog's ``criteria``);
2. a module in :mod:`evaljobs.evaluation.graders`: ``GRADER = Grader("name",
   grade=…, fault=…)``, and its module in that package's ``_BUILT_IN``;
3. its paragraph in docs/catalogs.md.

Code outside the package (a plugin, a test) registers at run time instead:
:func:`register` here, then :func:`evaljobs.evaluation.graders.register`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaljobs.catalog.criteria import (
    assertions,
    contains,
    expected_tools,
    ideal,
    llm_judge,
    max_latency_ms,
    not_contains,
    regex,
    response_present,
    token_budget,
    tools_succeeded,
)
from evaljobs.catalog.criteria.base import (
    POSITIVE_INT,
    STRINGS,
    Criterion,
    Field,
    Key,
    Shown,
    Table,
    ValueProblem,
    Walk,
    positive_int,
    value_criterion,
)
from evaljobs.catalog.model import Expect

_BUILT_IN = (response_present, contains, not_contains, regex, expected_tools, max_latency_ms, token_budget,
             llm_judge, tools_succeeded, ideal, assertions)
_TABLE = Table("criterion", {m.CRITERION.name: m.CRITERION for m in _BUILT_IN})


def register(criterion: Criterion) -> Criterion:
    """Add a criterion after the built-in ones; ``ValueError`` when its name or one of its keys is taken."""
    taken = {key.name for key in value_keys()}
    clash = [key.name for key in criterion.keys if key.name in taken]
    if clash:
        raise ValueError(f"criterion {criterion.name!r}: key {clash[0]!r} belongs to another criterion")
    return _TABLE.add(criterion.name, criterion)


def unregister(name: str) -> None:
    """Remove a criterion added by :func:`register` (a test's throwaway one); built-ins stay."""
    _TABLE.remove(name)


def criteria() -> tuple[Criterion, ...]:
    """Every criterion, built-in ones first, in their order."""
    return _TABLE.values()


def criterion(name: str) -> Criterion:
    """The criterion called ``name``; ``KeyError`` when there is none."""
    return _TABLE[name]


def criterion_names() -> tuple[str, ...]:
    """What a catalog may list under ``criteria`` and ``weights``."""
    return _TABLE.names()


def gateable_names() -> tuple[str, ...]:
    """What a scenario's ``expect.gate`` may name."""
    return tuple(c.name for c in _TABLE.values() if c.gateable)


def judged_names() -> frozenset[str]:
    """The criteria whose score is an LLM judge's (``Criterion.judged``): a result scored on one was
    judged."""
    return frozenset(c.name for c in _TABLE.values() if c.judged)


def enabled_by_keys(expect: Mapping[str, Any]) -> tuple[str, ...]:
    """The gateable criteria a raw (not yet validated) ``expect`` mapping enables through their keys
    (``Criterion.enabled_by``), in criterion order: what an importer gates for a foreign format that gates
    everything it expects."""
    return tuple(c.name for c in _TABLE.values() if c.gateable and any(expect.get(k) for k in c.enabled_by))


def gated_alone() -> tuple[str, ...]:
    """The criteria ``expect.gate`` may name though no expectation enables them (checks of the answer
    itself: it is not empty, its tool calls succeeded)."""
    return tuple(c.name for c in _TABLE.values() if c.gateable and c.gate_alone)


def weighted_criterion() -> str:
    """The criterion a weighted ``expect`` is graded under (``Criterion.grades_weighted``): its score and its
    details (each entry's outcome) are the list's."""
    return next(c.name for c in _TABLE.values() if c.grades_weighted)


def weighted_conflicts() -> tuple[str, ...]:
    """The ``expect`` keys a weighted ``expect`` may not set: those enabling a criterion other than the one
    that grades weighted lists (``Criterion.grades_weighted``)."""
    return tuple(k for c in _TABLE.values() if not c.grades_weighted for k in c.enabled_by)


def version() -> int:
    """Changes whenever a criterion is registered or removed: what is derived from the table may be cached
    per version."""
    return _TABLE.version


def value_keys(*, settings_only: bool = False) -> tuple[Key, ...]:
    """The keys the registry handles whole, in criterion order (``settings_only``: those that are also
    settings of ``defaults``, groups and scenarios). Validation asks for them per scenario: cached."""
    cached = _KEYS.get((_TABLE.version, settings_only))
    if cached is None:
        cached = tuple(k for c in _TABLE.values() for k in c.keys if k.setting or not settings_only)
        if len(_KEYS) > 4:  # earlier versions of the table
            _KEYS.clear()
        _KEYS[(_TABLE.version, settings_only)] = cached
    return cached


_KEYS: dict[tuple[int, bool], tuple[Key, ...]] = {}


def expect_fields(*, later: bool) -> tuple[Field, ...]:
    """The ``expect`` keys criteria read themselves (``Criterion.fields``), in criterion order: those listed
    before the keys the registry handles whole, or (``later``) after them."""
    return tuple(f for c in _TABLE.values() for f in c.fields if f.later == later)


def expect_keys() -> tuple[str, ...]:
    """Every ``expect`` key a criterion owns, in the order messages and the schema list them."""
    return tuple(f.name for f in expect_fields(later=False)) + tuple(k.name for k in value_keys()) \
        + tuple(f.name for f in expect_fields(later=True))


def read_expect(walk: Walk, path: tuple, where: str, raw: Mapping[str, Any],
                declared: list[str]) -> dict[str, Any]:
    """The :class:`Expect` fields every criterion reads from a raw ``expect`` (``Criterion.read``),
    problems reported to ``walk``."""
    out: dict[str, Any] = {}
    for c in _TABLE.values():
        out.update(c.read(walk, path, where, raw, declared))
    return out


def expect_body(expect: Expect) -> dict[str, Any]:
    """What the criteria write of ``expect`` in the canonical body (``Criterion.body``), in key order."""
    out: dict[str, Any] = {}
    for c in _TABLE.values():
        out.update(c.body(expect))
    return out


def present_criteria(expect: Expect) -> tuple[str, ...]:
    """The gateable criteria this block of expectations enables, in criterion order."""
    return tuple(c.name for c in _TABLE.values() if c.gateable and c.present(expect))


def shown(expect: Expect) -> list[Shown]:
    """What the viewer's scenario page lists for these expectations, one entry per criterion that has one."""
    return [line for c in _TABLE.values() if (line := c.show(expect)) is not None]


__all__ = [
    "POSITIVE_INT",
    "STRINGS",
    "Criterion",
    "Field",
    "Key",
    "Shown",
    "ValueProblem",
    "Walk",
    "criteria",
    "criterion",
    "criterion_names",
    "enabled_by_keys",
    "expect_body",
    "expect_fields",
    "expect_keys",
    "gateable_names",
    "gated_alone",
    "judged_names",
    "positive_int",
    "present_criteria",
    "read_expect",
    "register",
    "shown",
    "unregister",
    "value_criterion",
    "value_keys",
    "version",
    "weighted_conflicts",
    "weighted_criterion",
]
