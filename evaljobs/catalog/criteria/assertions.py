"""``assertions``: imported assertions run natively, by a transform chain or an external runtime (a
``refused`` entry, dropped at import with its reason, enables nothing)."""
from __future__ import annotations

from evaljobs.catalog.criteria.base import Criterion

CRITERION = Criterion("assertions", present=lambda e: any(a.get("kind") != "refused" for a in e.assertions),
                      enabled_by=("assertions",), grades_weighted=True)
