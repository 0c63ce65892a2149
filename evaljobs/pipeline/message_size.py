"""How many pairs a fan-out message carries when the user did not say (``EVALJOBS_PAIRS_PER_MESSAGE`` unset).

One message a pair is the default (docs/internals.md): a pair holds a worker thread only for its own calls,
a crash loses one pair's work, progress moves pair by pair. But at zero latency a Dramatiq message (fetch,
decode, hooks, the crash counter's round trip, the ack) and a transaction of its own cost a worker more CPU
than the provider call they carry (BENCHMARKS.md, "Per-pair cost, session 12"), so for a provider *known* to
answer fast a run goes :data:`AUTO_PAIRS` to a message (``evaljobs.pipeline.actors.evaluate_pairs``: each
pair is still its own row, uniqueness check and barrier count; a pair turned away leaves as a message of its
own).

Known means measured, never guessed from a URL (a local model server may take seconds): every model of the
run had its pairs' median ``duration_ms`` at most :data:`FAST_PAIR_MS` in its newest complete run
(:func:`evaljobs.store.pair_speed.recent_pair_durations`). A first run knows nothing and goes one a message.
At that speed a batch holds a thread for at most about ``AUTO_PAIRS × FAST_PAIR_MS``, and a run batches only
when it still makes at least :data:`MIN_MESSAGES` messages, so the work still spreads over every worker.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

from evaljobs import store

#: Pairs a message when the provider is known to be fast.
AUTO_PAIRS = 8
#: A pair is fast when its median duration in the model's last complete run is at most this (ms).
FAST_PAIR_MS = 20.0
#: Fewest messages a batched run sends (fewer pairs: one a message, the run stays as wide as its workers).
MIN_MESSAGES = 64


def pairs_per_message(chosen: int | None, models: Sequence[str], pairs: int) -> int:
    """Pairs a fan-out message of a run of ``pairs`` pairs of ``models`` carries: ``chosen`` when the user
    set it, else :data:`AUTO_PAIRS` for models known to be fast (see the module), else 1."""
    if chosen is not None:
        return chosen
    if pairs < AUTO_PAIRS * MIN_MESSAGES or not models:
        return 1
    for model in models:
        durations = store.pair_speed.recent_pair_durations(model)
        if not durations or statistics.median(durations) > FAST_PAIR_MS:
            return 1
    return AUTO_PAIRS
