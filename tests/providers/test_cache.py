"""The response cache: shared through the database, keyed by the request, errors never cached, a TTL.

Against the real simulated provider (its request counter proves what reached
it) and real databases (SQLite and PostgreSQL for the store half).
"""
from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.providers.cache import (DEFAULT_TTL,
                                      CacheConfigError,
                                      CachingClient,
                                      cache_key,
                                      default_ttl,
                                      is_cached,
                                      parse_duration,
                                      request_body)
from evaljobs.catalog import loads_catalog
from evaljobs.cli import Group
from evaljobs.config import Settings
from evaljobs.cli.ops import cache as cache_group
from evaljobs.providers.client import ChatClient
from evaljobs.network.errors import PermanentError, TransientError
from helpers import utc_now


class STORE:
    """The store's cache table as the response cache's backend (what the pipeline binds)."""

    get = staticmethod(store.cache_get)
    put = staticmethod(store.cache_put)
    clear = staticmethod(store.cache_clear)


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.005)


@pytest.fixture
def client(sim):
    with ChatClient(sim.url) as c:
        yield c


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def unique(text: str) -> str:
    return f"{text} ({uuid.uuid4().hex[:8]})"


# -- CachingClient ---------------------------------------------------------------------------------


def test_a_repeated_request_is_answered_from_the_database(db_url, sim, client):
    store.connect(db_url)
    prompt = unique('[sim: call lookup {"id": "7"}]')
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    first_client = CachingClient(client, "sim", adapter_version="v1", backend=STORE)
    before = sim.stats()["requests"]
    first = first_client.complete("fast", ask(prompt), tools=tools, temperature=0)
    assert not is_cached(first) and sim.stats()["requests"] == before + 1
    # Another worker (another wrapper, same database) asks the same thing: no provider call.
    second = CachingClient(client, "sim", adapter_version="v1", backend=STORE).complete(
        "fast", ask(prompt), tools=tools, temperature=0, timeout=5
    )
    assert sim.stats()["requests"] == before + 1
    assert is_cached(second) and second.cached is True
    assert (second.content, second.tool_calls, second.raw_message) == (first.content, first.tool_calls,
                                                                       first.raw_message)
    assert (second.input_tokens, second.output_tokens, second.finish_reason) == \
        (first.input_tokens, first.output_tokens, first.finish_reason)
    assert second.tool_calls[0].name == "lookup" and second.tool_calls[0].arguments == {"id": "7"}
    assert (first_client.hits, first_client.misses) == (0, 1)


@pytest.mark.parametrize("change", ["model", "temperature", "tools", "provider", "adapter", "messages"])
def test_anything_that_changes_the_request_misses(sqlite_url, sim, client, change):
    store.connect(sqlite_url)
    prompt = unique("[sim: say hello]")
    base = dict(model="fast", messages=ask(prompt), temperature=0, tools=None)
    CachingClient(client, "sim", adapter_version="v1", backend=STORE).complete(
        base["model"], base["messages"], temperature=0
    )
    provider, version, kwargs = "sim", "v1", dict(base)
    if change == "model":
        kwargs["model"] = "smart"
    elif change == "temperature":
        kwargs["temperature"] = 0.7
    elif change == "tools":
        kwargs["tools"] = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]
    elif change == "provider":
        provider = "other"
    elif change == "adapter":
        version = "v2"
    else:
        kwargs["messages"] = ask(prompt + "!")
    before = sim.stats()["requests"]
    answer = CachingClient(client, provider, adapter_version=version, backend=STORE).complete(
        kwargs["model"], kwargs["messages"], temperature=kwargs["temperature"], tools=kwargs["tools"])
    assert not is_cached(answer) and sim.stats()["requests"] == before + 1


def test_errors_are_never_cached(sqlite_url, sim, client):
    store.connect(sqlite_url)
    caching = CachingClient(client, "sim", backend=STORE)
    before = sim.stats()["requests"]
    for _ in range(2):
        with pytest.raises(TransientError, match="HTTP 503"):
            caching.complete("fast", ask(unique("[sim: status 503 down]")))
    for _ in range(2):
        with pytest.raises(PermanentError, match="malformed JSON"):
            caching.complete("fast", ask("[sim: malformed] always the same"))
    assert sim.stats()["requests"] == before + 4
    key = cache_key("sim", "fast", request_body("fast", ask("[sim: malformed] always the same")))
    assert store.cache_get(key, DEFAULT_TTL) is None


def test_entries_older_than_the_ttl_are_not_used(sqlite_url, sim, client):
    store.connect(sqlite_url)
    prompt = unique("[sim: say fresh]")
    CachingClient(client, "sim", ttl=3600, backend=STORE).complete("fast", ask(prompt))
    key = cache_key("sim", "fast", request_body("fast", ask(prompt)))
    with store.database.connection_context():  # age the entry by two hours
        store.CacheEntry.update(created_at=utc_now() - timedelta(hours=2)).where(
            store.CacheEntry.key == key).execute()
    before = sim.stats()["requests"]
    assert is_cached(CachingClient(client, "sim", ttl=3 * 3600, backend=STORE).complete("fast", ask(prompt)))
    # refreshed
    assert not is_cached(CachingClient(client, "sim", ttl=3600, backend=STORE).complete("fast", ask(prompt)))
    assert sim.stats()["requests"] == before + 1
    assert is_cached(CachingClient(client, "sim", ttl=3600, backend=STORE).complete("fast", ask(prompt)))
    # 0: off
    assert not is_cached(CachingClient(client, "sim", ttl=0, backend=STORE).complete("fast", ask(prompt)))


def test_ttl_and_durations():
    assert [parse_duration(x) for x in ("90", "90s", "30m", "12h", "7d", "2w", "1.5h", 5)] == \
        [90, 90, 1800, 43200, 604800, 1209600, 5400, 5]
    assert default_ttl(Settings.from_env({})) == 7 * 86400
    assert default_ttl(Settings.from_env({"EVALJOBS_CACHE_TTL": "12h"})) == 43200
    with pytest.raises(CacheConfigError, match=r"^EVALJOBS_CACHE_TTL 'soon' is not a duration"):
        default_ttl(Settings.from_env({"EVALJOBS_CACHE_TTL": "soon"}))


def test_cache_clear_command(cli, sqlite_url, sim, client, monkeypatch):
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", sqlite_url)
    store.connect(sqlite_url)
    caching = CachingClient(client, "sim", backend=STORE)
    old, new = unique("[sim: say old]"), unique("[sim: say new]")
    for prompt in (old, new):
        caching.complete("fast", ask(prompt))
    with store.database.connection_context():
        store.CacheEntry.update(created_at=utc_now() - timedelta(days=3)).where(
            store.CacheEntry.key == cache_key("sim", "fast", request_body("fast", ask(old)))).execute()
    group = Group(commands={"cache": cache_group})
    result = cli("cache", "clear", "--older-than", "2d", command=group)
    assert result.exit_code == 0 and result.output.strip() == "removed 1 cached answer older than 2d"
    assert is_cached(caching.complete("fast", ask(new))) and not is_cached(caching.complete("fast", ask(old)))
    result = cli("cache", "clear", command=group)
    assert result.output.strip() == "removed 2 cached answers"
    bad = cli("cache", "clear", "--older-than", "yesterday", command=group)
    assert bad.exit_code == 2 and bad.output.strip() == (
        "error: --older-than 'yesterday' is not a duration: use seconds or a number with s, m, h, d or w "
        "(e.g. 12h, 7d)")


def test_the_cache_table_is_created_on_first_use_only(tmp_path):
    db = store.connect(f"sqlite:///{tmp_path}/fresh.db")
    with db.connection_context():
        assert "cache" not in db.get_tables()
    assert store.cache_clear() == 0
    with db.connection_context():
        assert "cache" in db.get_tables()


# -- runs with --cache (Session.submit(cache=True)) ----------------------------------------------------

CATALOG = """
name: cached
defaults:
  judge_model: sim/judge
scenarios:
  - key: judged
    prompt: "[sim: say sorry, happy to help TAG]"
    expect:
      judge: "Apologises and offers help. [sim@judge: say {\\"score\\": 0.9, \\"reason\\": \\"kind TAG\\"}]"
  - key: plain
    prompt: "[sim: say alpha TAG]"
    expect: {contains: [alpha]}
  - key: tools
    prompt: "[sim: call lookup {\\"id\\": \\"7\\"}] [sim: say found 7 TAG]"
    tools:
      - name: lookup
        parameters: {type: object, properties: {id: {type: string}}}
        returns: {ok: true}
    expect: {contains: ["found"], tools: [lookup]}
  - key: wrong
    prompt: "[sim: say gamma TAG]"
    expect: {contains: [nothing-like-this]}
  - key: broken
    prompt: "[sim: status 400 bad request TAG]"
"""


@pytest.fixture
def session(tmp_path, sim, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    with Session(db=f"sqlite:///{tmp_path}/runs.db", broker="memory", width=4) as s:
        yield s


def grades(run_id: str) -> dict:
    return {r.pair: (r.status, r.score, r.scores, r.fault, r.output, r.tool_calls and r.tool_calls[0]["name"])
            for r in store.list_results(run_id)}


def test_a_cached_second_run_makes_no_provider_call_and_grades_the_same(session, sim):
    catalog = loads_catalog(CATALOG.replace("TAG", uuid.uuid4().hex[:8]), source="cached.yaml")
    models = ["sim/fast", "sim/smart"]
    first = session.wait(session.submit(catalog, models, cache=True).id, timeout=60)
    assert first.options["cache"] is True and first.report["summary"]["results"] == 10
    assert not any(r.cached for r in store.list_results(first.id))
    assert all(r.cost > 0 for r in store.list_results(first.id) if r.status != "errored")
    judged = next(r for r in store.list_results(first.id) if r.scenario_key == "judged")
    assert judged.scores["llm_judge"] == 0.9  # the LLM judge was asked (and its answer is cached too)

    sim.reset_stats()
    second = session.wait(session.submit(catalog, models, cache=True).id, timeout=60)
    # Only the errored pair is asked again (errors are never cached): 1 call per model, nothing else,
    # neither for the models under test nor for the judge.
    assert sim.stats()["requests"] == 2
    assert grades(second.id) == grades(first.id)
    cached = {r.pair: r.cached for r in store.list_results(second.id)}
    assert cached == {(k, m): k != "broken" for k in catalog.keys for m in models}
    assert all(r.cost == 0 for r in store.list_results(second.id) if r.cached)
    cached_rows = {row["scenario_key"] for row in second.report["results"] if row["cached"]}
    assert cached_rows == {"judged", "plain", "tools", "wrong"}
    assert [m["cached"] for m in second.report["models"]] == [4, 4]

    sim.reset_stats()
    third = session.wait(session.submit(catalog, models).id, timeout=60)  # no --cache: every call is made
    assert sim.stats()["requests"] == 14 and not any(r.cached for r in store.list_results(third.id))


def own_calls_adapter(scenario, model):
    """A host adapter that talks to its own agent: the response cache cannot sit in front of it."""
    raise AssertionError("never called")


def test_cache_with_a_host_adapter_that_makes_its_own_calls_is_refused(session):
    from evaljobs.evaluation.adapters import AdapterError

    catalog = loads_catalog(CATALOG.replace("TAG", "x"), source="cached.yaml")
    refused = ("--cache needs the built-in conversation adapter (or a subclass); "
               "adapter 'test_cache:own_calls_adapter' makes its own provider calls")
    with pytest.raises(AdapterError, match=f"^{re.escape(refused)}$"):
        session.submit(catalog, ["sim/fast"], adapter="test_cache:own_calls_adapter", cache=True)
    assert store.list_runs() == []
