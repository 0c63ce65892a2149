"""Evaluation: one pair called (adapters, replays), graded (graders, assertions, judge) and retried.

What only some catalogs need loads on first attribute access (:mod:`evaljobs.lazy`): ActiveAgent's
diagnosis heuristics (their regexes compile at import), by the scenarios that ask for one, and promptfoo's
assertions, by the catalogs imported from promptfoo — ``evaluation.diagnosis.missing_capability(...)``
with ``from evaljobs import evaluation`` at the top.
"""
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.evaluation import diagnosis as diagnosis
    from evaljobs.evaluation import promptfoo_checks as promptfoo_checks

__getattr__ = submodules(__name__, ("diagnosis", "promptfoo_checks"))
