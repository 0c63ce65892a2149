"""Reports: built from a run's stored results (``build``), rendered as a table, Markdown, HTML, JUnit and
JSON (``render``), compared (``compare``), held to a gate (``gate``).

What other packages use from ``_format`` is named here. The comparison, the reviewers' block, the
judges' agreement with the reviewers, the flaky list and the HTML and JUnit renderers load on first
attribute access (:mod:`evaljobs.lazy`): ``reports.compare.compare(...)``.
"""
from evaljobs.lazy import submodules
from evaljobs.reports._format import signed_money
from evaljobs.reports.caching import cache_block, cache_note

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.reports import agreement as agreement
    from evaljobs.reports import compare as compare
    from evaljobs.reports import html as html
    from evaljobs.reports import human as human
    from evaljobs.reports import junit as junit
    from evaljobs.reports import variance as variance

__getattr__ = submodules(__name__, ("agreement", "compare", "html", "human", "junit", "variance"))

__all__ = ["cache_block", "cache_note", "signed_money"]
