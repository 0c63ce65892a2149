"""Reports: built from a run's stored results (``build``), rendered as a table, Markdown, HTML, JUnit and
JSON (``render``), compared (``compare``), held to a gate (``gate``).

What other packages use from ``_format`` is named here.
"""
from evaljobs.reports._format import signed_money
from evaljobs.reports.caching import cache_block, cache_note

__all__ = ["cache_block", "cache_note", "signed_money"]
