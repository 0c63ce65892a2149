"""A pair answered 429 with ``Retry-After`` once, and the gap the provider measured before its retry.

Shared by tests/pipeline/test_retry_after.py (the in-process broker) and tests/pipeline/test_rabbitmq.py (the
hand-back through RabbitMQ's delay queue).
"""
from __future__ import annotations

RETRY_AFTER = 1.0


def retry_after_catalog(others: int) -> str:
    lines = ["name: retry-after", "scenarios:",
             "  - key: limited",
             '    prompt: "[sim: fail-first 1 429] [sim: say finally]"',
             "    expect: {contains: [finally]}"]
    for i in range(others):
        lines += [
            f"  - key: other{i:02d}",
            f'    prompt: "[sim: say ok{i}]"',
            f"    expect: {{contains: [ok{i}]}}",
        ]
    return "\n".join(lines) + "\n"


def retry_gap(sim) -> tuple[float, int]:
    """Seconds from the provider's 429 to the same conversation's next arrival, and how many calls of
    the run's other conversations arrived after that retry."""
    calls = sim.calls()
    refused = [c for c in calls if c["status"] == 429]
    assert len(refused) == 1, refused
    conversation = refused[0]["conversation"]
    later = [c for c in calls if c["conversation"] == conversation and c["status"] == 200]
    assert len(later) == 1, later
    behind = [c for c in calls if c["conversation"] != conversation and c["arrived"] > later[0]["arrived"]]
    return later[0]["arrived"] - refused[0]["answered"], len(behind)
