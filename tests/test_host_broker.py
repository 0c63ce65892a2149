"""`Session(broker=<a host's broker>)`: evaljobs binds the host's broker and starts no worker on it."""
from __future__ import annotations

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import CurrentMessage, Retries

from evaljobs import store
from evaljobs.api import Session
from evaljobs.testing import run_catalog
from evaljobs_middleware.context import ContextMiddleware
from evaljobs_middleware.db import DatabaseConnections

CATALOG = {"name": "host-broker", "scenarios": [{"key": "a", "prompt": "[sim: say done]", "expect": {"contains": ["done"]}},
                                                {"key": "b", "prompt": "[sim: say done]", "expect": {"contains": ["done"]}}]}


def test_a_host_broker_with_dramatiq_defaults_gets_evaljobs_stack_and_no_worker_of_ours(
        evaljobs_database, evaljobs_simulated):
    broker = StubBroker()  # what a host's tests build: Dramatiq's default middleware only
    with Session(db=evaljobs_database, broker=broker) as session:
        binding = session.binding()
        kinds = [type(m) for m in broker.middleware]
        assert kinds[0] is ContextMiddleware  # first: every other middleware sees the restored context
        assert {CurrentMessage, DatabaseConnections} <= set(kinds) and kinds.count(Retries) == 1
        assert {"start_run", "evaluate_scenario", "finalize_run"} <= set(broker.actors)
        assert binding.owned is False

        run = session.submit(_catalog(session), ["sim/fast"])
        assert session._worker is None  # nothing consumes until the host's worker does
        assert broker.queues[binding.queue].qsize() == 1
        assert store.get_run(run.id).status == "pending"

        worker = dramatiq.Worker(broker, worker_threads=2, worker_timeout=50)
        worker.start()
        try:
            finished = session.wait(run.id, timeout=60, poll=0.2)
        finally:
            worker.stop()
        assert finished.status == "complete"
        assert [r.status for r in store.list_results(run.id)] == ["passed", "passed"]


def test_run_catalog_on_the_plugin_fixtures_returns_the_results(evaljobs_session):
    finished = run_catalog(evaljobs_session, CATALOG, ["sim/fast", "sim/smart"])
    assert finished.status == "complete"
    assert sorted((r.scenario_key, r.model) for r in finished.results) == [
        ("a", "sim/fast"), ("a", "sim/smart"), ("b", "sim/fast"), ("b", "sim/smart")]


def _catalog(session):
    from evaljobs.testing import as_catalog

    return as_catalog(CATALOG, session)
