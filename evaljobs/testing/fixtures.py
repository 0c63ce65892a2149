"""What the pytest plugin's fixtures (:mod:`evaljobs.testing.plugin`) set up, with ordinary imports.

The plugin loads this module the first time a test asks for an ``evaljobs_*`` fixture, so a host suite
that never asks pays nothing for evaljobs; each fixture there is one call here.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import dramatiq
from dramatiq.brokers.stub import StubBroker

from evaljobs import config, store
from evaljobs.api import Session
from evaljobs.pipeline.broker import bind, middleware_stack
from evaljobs.simulated import SimulatedProvider
from evaljobs.testing import run_catalog


@contextlib.contextmanager
def simulated(setenv: Callable[[str, str], None]) -> Iterator[SimulatedProvider]:
    """The simulated provider, started, and bound as this process's ``sim/...`` endpoint."""
    with SimulatedProvider(latency=0.0, retry_after=0.05) as provider:
        setenv("EVALJOBS_SIM_URL", provider.url)
        previous = config.settings()
        config.configure(previous, sim_url=provider.url)
        try:
            yield provider
        finally:
            config.configure(previous)


def database(folder: str) -> str:
    """A SQLite database in ``folder``, connected as evaljobs' database; its URL."""
    url = f"sqlite:///{folder}/evaljobs.db"
    store.connect(url)
    return url


@contextlib.contextmanager
def broker() -> Iterator[StubBroker]:
    """A ``StubBroker`` with evaljobs' middleware stack and its actors declared."""
    stub = StubBroker(middleware=middleware_stack())
    bind(stub)
    try:
        yield stub
    finally:
        stub.close()


@contextlib.contextmanager
def worker(on: dramatiq.Broker, threads: int) -> Iterator[dramatiq.Worker]:
    """A real Dramatiq ``Worker`` consuming ``on``, stopped afterwards."""
    running = dramatiq.Worker(on, worker_threads=threads, worker_timeout=50)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def session(db: str, on: dramatiq.Broker, width: int) -> Session:
    """A session on the test's broker and database (the worker is the fixture's)."""
    return Session(db=db, broker=on, width=width)


def runner(session: Session) -> Callable[..., Any]:
    """``run(catalog, models=("sim/fast",), **options)`` → a finished run of ``session``."""

    def run(catalog: Any, models: Any = ("sim/fast",), **options: Any) -> Any:
        return run_catalog(session, catalog, models, **options)

    return run
