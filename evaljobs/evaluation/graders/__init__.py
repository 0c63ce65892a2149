"""Grade functions: one module per criterion, one table, driven by :func:`evaljobs.evaluation.grading.grade`.

The grading half of a criterion (the catalog half — name, keys, schema, validation,
gate, label — is :mod:`evaljobs.catalog.criteria`; the catalog must not import
grading). A :class:`Grader` names its criterion, grades a :class:`Grading` (adds
its score and details, or raises :class:`Stop`), and says which fault its failure
stands for, where it comes among failed gates, what its details say of a failed
answer (``explain``: JUnit's failure message) and, when a promptfoo built-in
assertion maps to its key, how that checks a transformed output (``text_check``).

The table's order is the order an answer is graded in: the judge last (a judge
call costs; an answer that cannot be graded otherwise is not worth one).

Adding a built-in criterion: its module here (``GRADER = Grader(…)``, or
``value_grader(…)`` for one shaped like ``token_budget``) and in ``_BUILT_IN``,
besides its module in :mod:`evaljobs.catalog.criteria` (the recipe is there).
Code outside the package registers at run time with :func:`register`, after
:func:`evaljobs.catalog.criteria.register`.
"""
from __future__ import annotations

from evaljobs.catalog.criteria import criterion_names
from evaljobs.catalog.criteria.base import Table
from evaljobs.evaluation.graders import (
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
from evaljobs.evaluation.graders.base import (
    Grader,
    Grading,
    Stop,
    as_json,
    fraction,
    judgement_passes,
    listed,
    pattern_matches,
    scored_below_one,
    value_grader,
)

_BUILT_IN = (response_present, contains, not_contains, regex, expected_tools, tools_succeeded, ideal,
             max_latency_ms, token_budget, assertions, llm_judge)
_TABLE = Table("grader", {m.GRADER.name: m.GRADER for m in _BUILT_IN})


def register(grader: Grader) -> Grader:
    """Add the grade function of a registered criterion (graded after the built-in ones); ``ValueError``
    when no criterion has its name or it already has one."""
    if grader.name not in criterion_names():
        raise ValueError(f"grader {grader.name!r}: no criterion of that name; register the criterion first "
                         f"(evaljobs.catalog.criteria.register)")
    return _TABLE.add(grader.name, grader)


def unregister(name: str) -> None:
    """Remove a grader added by :func:`register` (a test's throwaway one); built-ins stay."""
    _TABLE.remove(name)


def graders() -> tuple[Grader, ...]:
    """Every grader, in the order an answer is graded."""
    return _TABLE.values()


def grader(name: str) -> Grader:
    """The grader of criterion ``name``; ``KeyError`` when it has none."""
    return _TABLE[name]


__all__ = [
    "Grader",
    "Grading",
    "Stop",
    "as_json",
    "fraction",
    "grader",
    "graders",
    "judgement_passes",
    "listed",
    "pattern_matches",
    "register",
    "scored_below_one",
    "unregister",
    "value_grader",
]
