"""Enqueue many messages at once: one Redis pipeline per chunk instead of one round trip each.

Why: ``start_run`` sends one ``evaluate_scenario`` message per pair. Dramatiq's
``RedisBroker.enqueue`` runs its dispatch script once per message and waits for
the answer, so 10,000 pairs cost 10,000 round trips (about 4 s here). This
module does exactly what ``RedisBroker.enqueue`` does for each message — a
fresh ``redis_message_id``, the ``before_enqueue`` hooks (the context
middleware signs there), the same dispatch script with the same arguments,
then the ``after_enqueue`` hooks — but sends the script calls of a chunk in one
pipeline. A message is announced (``after_enqueue``) only once its chunk is
in Redis.

Other brokers (the in-process ``StubBroker``) enqueue one by one as before; so
does a Redis broker whose internals this module does not recognise (a newer
Dramatiq), rather than guessing. The Dramatiq internals this relies on are in
:mod:`evaljobs.pipeline.dramatiq_internals`, pinned by a test.
"""
from __future__ import annotations

import logging
import sys
from typing import Sequence

import dramatiq

from evaljobs.pipeline import on_demand

logger = logging.getLogger("evaljobs.enqueue")

#: Messages per pipeline: large enough to amortise the round trip, small enough that a failure
#: mid-run leaves little for ``recover`` and that Redis is never blocked for long.
CHUNK = 500


def enqueue_many(broker: dramatiq.Broker, messages: Sequence[dramatiq.Message]) -> None:
    """Enqueue ``messages`` (none delayed) on ``broker``, pipelined on Redis."""
    # not loaded: not a Redis broker (start-up time)
    redis_brokers = sys.modules.get("dramatiq.brokers.redis")
    if redis_brokers is not None and isinstance(broker, redis_brokers.RedisBroker):
        internals = on_demand.dramatiq_internals  # loaded already: the broker is a Redis one
        if internals.pipelinable(broker):
            for start in range(0, len(messages), CHUNK):
                internals.enqueue_pipelined(broker, messages[start:start + CHUNK])
            return
    for message in messages:
        broker.enqueue(message)
