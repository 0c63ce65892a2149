"""The pytest plugin (entry point ``pytest11``: ``evaljobs``): fixtures for hosts, see
:mod:`evaljobs.testing`.

pytest loads this module in every test process of an environment where evaljobs is installed,
so it imports nothing of evaljobs at module level: the first fixture asked for loads
:mod:`evaljobs.testing.fixtures`, and a host suite that never asks for an ``evaljobs_*`` fixture pays
nothing.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Iterator

import pytest

#: Worker threads of the ``evaljobs_worker`` fixture.
WORKER_THREADS = 4


def _fixtures() -> ModuleType:
    # a pytest plugin: nothing of evaljobs until a fixture is used
    from evaljobs.testing import fixtures

    return fixtures


def pytest_configure(config: pytest.Config) -> None:
    """A host's ``freeze_time`` must not stop evaljobs' delays and deadlines (see :mod:`evaljobs.clock`)."""
    try:
        import freezegun.config  # noqa: F401 - only to tell it, if the host uses it
    except ImportError:
        return
    # a pytest plugin: of evaljobs only the clock (not the fixtures' API) for a host that uses freezegun
    from evaljobs.clock import shield_from_frozen_time

    shield_from_frozen_time()


@pytest.fixture
def evaljobs_simulated(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """evaljobs' simulated provider (serves ``sim/...`` models), started for this test."""
    with _fixtures().simulated(monkeypatch.setenv) as provider:
        yield provider


@pytest.fixture
def evaljobs_database(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A temporary SQLite database URL, bound as evaljobs' database for this test."""
    return _fixtures().database(str(tmp_path_factory.mktemp("evaljobs")))


@pytest.fixture
def evaljobs_broker() -> Iterator[Any]:
    """A Dramatiq ``StubBroker`` with evaljobs' middleware stack and its actors declared."""
    with _fixtures().broker() as broker:
        yield broker


@pytest.fixture
def evaljobs_worker(evaljobs_broker: Any) -> Iterator[Any]:
    """A real Dramatiq ``Worker`` consuming ``evaljobs_broker``, stopped after the test."""
    with _fixtures().worker(evaljobs_broker, WORKER_THREADS) as worker:
        yield worker


@pytest.fixture
def evaljobs_session(evaljobs_database: str, evaljobs_broker: Any, evaljobs_worker: Any,
                     evaljobs_simulated: Any) -> Iterator[Any]:
    """A :class:`evaljobs.Session` on the test's broker and database (the worker is the fixture's)."""
    with _fixtures().session(evaljobs_database, evaljobs_broker, WORKER_THREADS) as session:
        yield session


@pytest.fixture
def evaljobs_run(evaljobs_session: Any) -> Callable[..., Any]:
    """``evaljobs_run(catalog, models=("sim/fast",), context=None, **options)`` → a finished run."""
    return _fixtures().runner(evaljobs_session)
