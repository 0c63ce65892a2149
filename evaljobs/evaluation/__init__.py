"""Evaluation: one pair called (adapters, replays), graded (graders, assertions, judge) and retried.

ActiveAgent's diagnosis heuristics compile their regexes at import, so they load on first attribute access
(:mod:`evaljobs.lazy`), by the scenarios that ask for one: ``evaluation.diagnosis.missing_capability(...)``
with ``from evaljobs import evaluation`` at the top.
"""
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time it loads on first use (below)
    from evaljobs.evaluation import diagnosis as diagnosis

__getattr__ = submodules(__name__, ("diagnosis",))
