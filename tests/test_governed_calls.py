"""The governor wired into real runs: every provider call holds a permit of its deployment's budget."""
from __future__ import annotations

import pytest

from evaljobs.pipeline import runtime
from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.providers.simulated import SimulatedProvider


def catalog(n: int):
    lines = ["name: gov", "scenarios:"]
    for i in range(n):
        lines += [f"  - key: s{i:03d}", f'    prompt: "[sim: say ok {i}]"', f"    expect: {{contains: ['ok {i}']}}"]
    return loads_catalog("\n".join(lines) + "\n", source="gov.yaml")


@pytest.fixture
def limited(tmp_path, monkeypatch):
    providers = tmp_path / "providers.yaml"
    providers.write_text("providers:\n  sim:\n    governor: {initial: 2, ceiling: 4}\n")
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(providers))  # Session sets it too; restored after the test
    with SimulatedProvider(latency=0.05, max_concurrent=4) as sim:
        monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
        yield sim, str(providers)


@pytest.mark.redis
def test_fanout_wider_than_the_budget_stays_within_it_on_redis(limited, redis_url, sqlite_url, monkeypatch):
    sim, providers = limited
    monkeypatch.setenv("EVALJOBS_GOVERNOR_URL", redis_url)
    with Session(db=sqlite_url, broker="memory", width=16, providers=providers) as session:
        run = session.submit(catalog(40), ["sim/a"], strategy="fanout")
        info = session.wait(run.id, timeout=60, poll=0.5)
    assert info.status == "complete" and info.persisted == 40
    stats = sim.stats()
    assert stats["rate_limited"] == 0  # 16 workers, but never more than the budget's ceiling (4) in flight
    assert stats["peak_in_flight"] <= 4
    budgets = {b["budget"]: b for b in runtime.governor().stats()}
    assert budgets["sim:a"]["admitted"] >= 40 and budgets["sim:a"]["backend"] == "redis"


def test_without_the_governor_the_same_run_trips_429s(limited, sqlite_url, monkeypatch):
    sim, providers = limited
    monkeypatch.setenv("EVALJOBS_GOVERNOR", "off")
    with Session(db=sqlite_url, broker="memory", width=16, providers=providers) as session:
        run = session.submit(catalog(40), ["sim/a"], strategy="fanout")
        info = session.wait(run.id, timeout=60, poll=0.5)
    assert info.status == "complete" and info.persisted == 40
    assert sim.stats()["rate_limited"] > 0  # the contrast: 16 at once against a limit of 4


def test_sequential_and_threads_share_the_local_budget(limited, sqlite_url, monkeypatch):
    sim, providers = limited
    monkeypatch.delenv("EVALJOBS_GOVERNOR_URL", raising=False)
    with Session(db=sqlite_url, width=12, providers=providers) as session:
        info = session.submit(catalog(24), ["sim/a"], strategy="threads")
    assert info.status == "complete" and sim.stats()["rate_limited"] == 0


@pytest.mark.redis
def test_governor_redis_stopped_mid_run_the_run_completes_on_the_local_fallback(limited, redis_server, redis_url,
                                                                               sqlite_url, monkeypatch, caplog):
    import threading

    from evaljobs.pipeline import runtime

    sim, providers = limited
    monkeypatch.setenv("EVALJOBS_GOVERNOR_URL", redis_url)
    with Session(db=sqlite_url, broker="memory", width=8, providers=providers) as session:
        run = session.submit(catalog(60), ["sim/a"], strategy="fanout")
        stopper = threading.Timer(0.3, redis_server.stop)
        stopper.start()
        info = session.wait(run.id, timeout=90, poll=0.5)
        stopper.join()
    assert info.status == "complete" and info.persisted == 60
    assert runtime.governor().backend == "local"  # it fell back instead of failing the evaluation
    assert all(r.status == "passed" for r in store.list_results(run.id))
