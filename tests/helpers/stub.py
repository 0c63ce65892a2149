"""The ``evaljobs.testing`` plugin's StubBroker, for tests that send evaljobs' actors by hand.

The plugin's fixtures (``evaljobs_database``, ``evaljobs_broker``, ``evaljobs_worker``) build the
broker, its middleware, the actors, the worker and the database; this only hands a test the
declared actors and the queue along with the broker.
"""
from __future__ import annotations

from dataclasses import dataclass

import dramatiq
import pytest

from evaljobs.pipeline import actors


@dataclass(frozen=True)
class StubBinding:
    broker: dramatiq.Broker
    actors: actors.Actors
    queue: str


def plugin_broker(request: pytest.FixtureRequest, *, worker: bool = True) -> StubBinding:
    """The plugin's database and broker for this test, with a worker consuming it unless ``worker=False``.

    Call it after setting the environment the actors depend on: they take their retry options
    (``EVALJOBS_MAX_RETRIES``…) when the fixture declares them.
    """
    request.getfixturevalue("evaljobs_database")
    broker = request.getfixturevalue("evaljobs_worker" if worker else "evaljobs_broker")
    broker = broker.broker if worker else broker
    declared = actors.bound()
    return StubBinding(broker=broker, actors=declared, queue=declared.queue)
