"""The time a pair spent in its earlier attempts, carried from one Dramatiq retry to the next.

The per-pair time limit spans a pair's attempts, but not the time a retry waits in the queue
behind other work, so the spent seconds (each machine's own ``time.monotonic()`` differences,
never compared across machines) travel in the message's options: Dramatiq's ``Retries``
re-enqueues the message it was processing, options and all.
"""
from __future__ import annotations

from dramatiq.middleware import CurrentMessage

#: Message option: seconds this pair has spent in earlier attempts.
SPENT = "pair_spent"


def spent() -> float:
    """Seconds the current message's pair spent in earlier attempts (0 for a first attempt)."""
    message = CurrentMessage.get_current_message()
    return float(message.options.get(SPENT, 0.0)) if message is not None else 0.0


def remember_spent(seconds: float) -> None:
    """Carry ``seconds`` to the retry of the current message."""
    message = CurrentMessage.get_current_message()
    if message is not None:
        message.options[SPENT] = round(seconds, 3)


__all__ = ["SPENT", "remember_spent", "spent"]
