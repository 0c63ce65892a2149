"""The governor wired into real runs: every provider call holds a permit of its deployment's budget."""
from __future__ import annotations

import pytest

from evaljobs.pipeline import runtime
from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.catalog.modelspec import load_providers, parse_model_spec
from evaljobs.evaluation.adapters import load_adapter
from evaljobs.providers.cache import ResponseCache, is_cached
from evaljobs.providers.calls import ProviderCalls
from evaljobs.governor import Governor, budget_key
from helpers.servers import RedisServer


def catalog(n: int):
    lines = ["name: gov", "scenarios:"]
    for i in range(n):
        lines += [
            f"  - key: s{i:03d}",
            f'    prompt: "[sim: say ok {i}]"',
            f"    expect: {{contains: ['ok {i}']}}",
        ]
    return loads_catalog("\n".join(lines) + "\n", source="gov.yaml")


@pytest.fixture
def limited(tmp_path, monkeypatch, simulated_provider):
    providers = tmp_path / "providers.yaml"
    providers.write_text("providers:\n  sim:\n    governor: {initial: 2, ceiling: 4}\n")
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(providers))  # Session sets it too; restored after the test
    return simulated_provider(latency=0.05, max_concurrent=4), str(providers)


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
def test_governor_redis_stopped_mid_run_the_run_completes_on_the_local_fallback(
    limited, redis_server, redis_url, sqlite_url, monkeypatch, caplog
):
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


# -- providers.calls with what the pipeline binds, handed in directly -----------------------------


class BoundGovernance:
    """What a pipeline binds for providers.calls: one governor, a lane, a permit wait, budget names."""

    def __init__(self, governor: Governor):
        self._governor = governor
        self.budgets: list[str] = []

    def governor(self) -> Governor:
        return self._governor

    def budget_for(self, providers, spec) -> str:
        config = providers.get(spec.provider)
        self.budgets.append(budget_key(config.name, spec.model, config.governor))
        return self.budgets[-1]

    def lane(self) -> str:
        return "interactive"

    def permit_wait(self) -> float:
        return 2.0


class StoreCache:
    """The store's cache table as the response cache's backend."""

    get = staticmethod(store.cache_get)
    put = staticmethod(store.cache_put)
    clear = staticmethod(store.cache_clear)


def test_calls_take_permits_from_the_governor_handed_in_and_a_cache_hit_takes_none(tmp_path, sqlite_url,
                                                                                     simulated_provider):
    store.connect(sqlite_url)
    governor = Governor(None)  # local state: the same code path as a worker without Redis
    sim = simulated_provider(latency=0.0, export=False)
    (tmp_path / "p.yaml").write_text(f"providers:\n  sim:\n    base_url: {sim.url}\n")
    providers = load_providers(tmp_path / "p.yaml")
    spec = parse_model_spec("sim/a", providers)
    ask = [{"role": "user", "content": "[sim: say governed]"}]

    def admitted() -> int:
        return sum(b["admitted"] for b in governor.stats())

    try:
        governance = BoundGovernance(governor)
        ProviderCalls(governance=governance).client(providers, spec).complete("a", ask, first=True)
        assert (admitted(), sim.stats()["requests"], governance.budgets) == (1, 1, ["sim:a"])

        ProviderCalls().client(providers, spec).complete("a", ask)  # nothing bound: no permit
        assert (admitted(), sim.stats()["requests"]) == (1, 2)

        cached = ProviderCalls(governance=governance, cache=ResponseCache(StoreCache(), 3600))
        miss = cached.client(providers, spec, "v1").complete("a", ask)
        hit = cached.client(providers, spec, "v1").complete("a", ask)
        assert not is_cached(miss) and is_cached(hit) and hit.content == miss.content
        assert (admitted(), sim.stats()["requests"]) == (2, 3)  # the hit took no permit and no call
    finally:
        governor.close()


def test_load_adapter_hands_the_calls_to_conversation_adapters_and_subclasses():
    from acme_host.adapter import DomainAdapter  # the example host package, installed by scripts/test

    providers = load_providers(None)
    calls = ProviderCalls(governance=BoundGovernance(None))
    default = load_adapter(None, providers, calls=calls)
    host = load_adapter("acme_host.adapter:DomainAdapter", providers, calls=calls)
    assert isinstance(host, DomainAdapter) and default.calls is calls and host.calls is calls
    assert load_adapter(None, providers).calls == ProviderCalls()  # nothing bound: direct calls


@pytest.mark.redis
def test_an_unbounded_provider_takes_no_permit_and_no_redis_round_trip(
    tmp_path, simulated_provider, sqlite_url, monkeypatch
):
    import redis

    providers = tmp_path / "providers.yaml"
    providers.write_text("providers:\n  sim:\n    governor: {unbounded: true}\n")
    simulated_provider(latency=0.01)
    # A Redis of its own: the session's server counts every client's commands, and a thread an earlier
    # test left behind in this pytest worker may still talk to it.
    with RedisServer() as server:
        monkeypatch.setenv("EVALJOBS_GOVERNOR_URL", server.url)
        client = redis.Redis.from_url(server.url)
        before = client.info("stats")["total_commands_processed"]
        with Session(db=sqlite_url, broker="memory", width=8, providers=str(providers)) as session:
            run = session.submit(catalog(20), ["sim/a"], strategy="fanout")
            info = session.wait(run.id, timeout=60, poll=0.5)
        assert info.status == "complete" and info.persisted == 20
        assert client.info("stats")["total_commands_processed"] - before == 1  # only this INFO
        client.close()
    assert runtime.governor().stats() == []
