"""The pytest plugin (entry point ``pytest11``: ``evaljobs``): fixtures for hosts, see
:mod:`evaljobs.testing`.

pytest loads this module in every test process of an environment where evaljobs is installed,
so it imports nothing of evaljobs at module level: each fixture imports what it needs, and a
host suite that never asks for an ``evaljobs_*`` fixture pays nothing.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

#: Worker threads of the ``evaljobs_worker`` fixture.
WORKER_THREADS = 4


def pytest_configure(config: pytest.Config) -> None:
    """A host's ``freeze_time`` must not stop evaljobs' delays and deadlines (see :mod:`evaljobs.clock`)."""
    try:
        import freezegun.config  # noqa: F401 - only to tell it, if the host uses it
    except ImportError:
        return
    # a pytest plugin: nothing of evaljobs until a fixture is used
    from evaljobs.clock import shield_from_frozen_time

    shield_from_frozen_time()


@pytest.fixture
def evaljobs_simulated(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """evaljobs' simulated provider (serves ``sim/...`` models), started for this test."""
    # a pytest plugin: nothing of evaljobs until a fixture is used
    from evaljobs import config
    from evaljobs.simulated import SimulatedProvider

    with SimulatedProvider(latency=0.0, retry_after=0.05) as provider:
        monkeypatch.setenv("EVALJOBS_SIM_URL", provider.url)
        previous = config.settings()
        config.configure(previous, sim_url=provider.url)
        try:
            yield provider
        finally:
            config.configure(previous)


@pytest.fixture
def evaljobs_database(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A temporary SQLite database URL, bound as evaljobs' database for this test."""
    # a pytest plugin: nothing of evaljobs until a fixture is used
    from evaljobs import store

    url = f"sqlite:///{tmp_path_factory.mktemp('evaljobs')}/evaljobs.db"
    store.connect(url)
    return url


@pytest.fixture
def evaljobs_broker() -> Iterator[Any]:
    """A Dramatiq ``StubBroker`` with evaljobs' middleware stack and its actors declared."""
    from dramatiq.brokers.stub import StubBroker

    # a pytest plugin: nothing of evaljobs until a fixture is used
    from evaljobs.pipeline.broker import bind, middleware_stack

    broker = StubBroker(middleware=middleware_stack())
    bind(broker)
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def evaljobs_worker(evaljobs_broker: Any) -> Iterator[Any]:
    """A real Dramatiq ``Worker`` consuming ``evaljobs_broker``, stopped after the test."""
    import dramatiq

    worker = dramatiq.Worker(evaljobs_broker, worker_threads=WORKER_THREADS, worker_timeout=50)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


@pytest.fixture
def evaljobs_session(evaljobs_database: str, evaljobs_broker: Any, evaljobs_worker: Any,
                     evaljobs_simulated: Any) -> Iterator[Any]:
    """A :class:`evaljobs.Session` on the test's broker and database (the worker is the fixture's)."""
    # a pytest plugin: nothing of evaljobs until a fixture is used
    from evaljobs.api import Session

    with Session(db=evaljobs_database, broker=evaljobs_broker, width=WORKER_THREADS) as session:
        yield session


@pytest.fixture
def evaljobs_run(evaljobs_session: Any) -> Callable[..., Any]:
    """``evaljobs_run(catalog, models=("sim/fast",), context=None, **options)`` → a finished run."""
    # a pytest plugin: nothing of evaljobs until a fixture is used
    from evaljobs.testing import run_catalog

    def run(catalog: Any, models: Any = ("sim/fast",), **options: Any) -> Any:
        return run_catalog(evaljobs_session, catalog, models, **options)

    return run
