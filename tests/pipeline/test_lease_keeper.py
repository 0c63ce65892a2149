"""The thread renewing this process's run leases (``evaljobs-leases``) ends with the last lease it renews.

A lease given up while the thread was renewing (its notify then reached nobody) kept it asleep for a whole
renewal period with nothing to renew; in a test suite, past the test, into the next one's fork. The test
holds the thread inside a real renewal (a gate around ``store.leases.renew``), gives the lease up, opens
the gate, and waits for the thread to end: before the fix it slept the period (set to an hour here).
"""
from __future__ import annotations

import threading

from evaljobs import store
from evaljobs.pipeline import ownership


def test_the_keeper_ends_once_its_last_lease_is_given_up_mid_renewal(sqlite_url, monkeypatch):
    store.connect(sqlite_url)
    run = store.create_run(_catalog(), ["sim/a"], strategy="sequential")
    entered, gate = threading.Event(), threading.Event()
    renew = store.leases.renew

    def gated(run_ids):
        entered.set()
        gate.wait(60)
        return renew(run_ids)

    monkeypatch.setattr(store.leases, "renew", gated)
    monkeypatch.setattr(store.leases, "RENEW_SECONDS", 0.01)
    ownership.hold(run.id)
    keeper = next(t for t in threading.enumerate() if t.name == "evaljobs-leases")
    try:
        assert entered.wait(60)  # the keeper is inside a renewal
        monkeypatch.setattr(store.leases, "RENEW_SECONDS", 3600.0)
        ownership.release([run.id])
    finally:
        gate.set()
    keeper.join(60)
    assert not keeper.is_alive() and ownership.held() == frozenset()


def _catalog():
    from evaljobs.catalog import loads_catalog

    return loads_catalog("name: k\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {contains: [hi]}\n",
                         source="k.yaml")
