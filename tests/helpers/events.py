"""What a run publishes, counted in the test's process."""
from __future__ import annotations

import pytest


def counted_completes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the runs whose ``complete`` event this process publishes from now on (in order; a run
    finalized twice shows twice), the event still published."""
    from evaljobs.pipeline import events

    completes: list[str] = []
    original = events.publish_complete

    def counting(run_id, report):
        completes.append(run_id)
        original(run_id, report)

    monkeypatch.setattr(events, "publish_complete", counting)
    return completes
