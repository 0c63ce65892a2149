"""Every wait a provider asks for is bounded, and the providers file's retry settings are honoured (issue 29).

* A ``Retry-After`` (seconds, or an HTTP date) longer than what is left of the pair's time limit,
  or than its provider's ``max_retry_after``, ends the pair ``errored`` (``rate_limited``, with the
  provider's figure) at once, on every strategy: before, the fan-out strategy re-queued the pair
  for the whole day and the run sat at 0/1.
* ``max_retries`` in the providers file is the pair's retry budget: ``max_retries: 0`` against a
  provider that always answers 500 makes exactly one request (it made 4).

The simulated provider counts the requests; nothing here measures time.
"""
from __future__ import annotations

import pytest

from evaljobs.api import Session
from evaljobs.catalog import loads_catalog

STRATEGIES = ("fanout", "per-model", "threads", "sequential")
HTTP_DATE = "Fri, 01 Jan 2099 00:00:00 GMT"


def one_pair(prompt: str):
    return loads_catalog(
        f"name: waits\nscenarios:\n  - key: only\n    prompt: {prompt!r}\n", source="waits.yaml"
    )


def run_one(db: str, catalog, model: str, strategy: str):
    with Session(db=db, broker="memory", width=2) as session:
        run = session.submit(catalog, [model], strategy=strategy)
        info = session.wait(run.id, timeout=120, poll=0.2)  # a guard against a hang, not a measurement
        return info, session.results(run.id)


@pytest.fixture
def provider(tmp_path, monkeypatch, simulated_provider):
    """A providers-file entry 'gw' on the simulated provider (``extra``: more of its keys), and the sim."""
    sim = simulated_provider(latency=0, export=False)

    def entry(extra: str = "") -> None:
        path = tmp_path / "providers.yaml"
        path.write_text(f"providers:\n  gw:\n    base_url: {sim.url}\n{extra}")
        monkeypatch.setenv("EVALJOBS_PROVIDERS", str(path))

    entry()
    return sim, entry


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("retry_after, figure", [("86400", "86400 s"), (HTTP_DATE, None)])
def test_a_retry_after_past_the_time_limit_ends_the_pair_rate_limited(
    strategy, retry_after, figure, sqlite_url, provider, monkeypatch
):
    sim, _ = provider
    monkeypatch.setenv("EVALJOBS_TIME_LIMIT", "10")
    info, results = run_one(sqlite_url, one_pair(f"[sim: ratelimit {retry_after}]"), "gw/m", strategy)
    assert info.status in ("partial", "failed") and info.persisted == 1, info
    [result] = results
    assert result.status == "errored"
    assert result.error.startswith("rate_limited: the provider asked to wait "), result.error
    assert "left of the pair's 10 s time limit" in result.error, result.error
    if figure:
        assert f"wait {figure} (Retry-After)" in result.error, result.error
    else:  # the date, as the seconds until it (more than 70 years)
        seconds = int(result.error.split("asked to wait ")[1].split(" s ")[0])
        assert seconds > 70 * 365 * 86400, result.error
    assert sim.stats()["requests"] == 1  # refused at once: never asked again


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_retry_after_past_the_providers_max_retry_after_ends_the_pair(strategy, sqlite_url, provider):
    sim, entry = provider
    entry("    max_retry_after: 5\n")
    _, results = run_one(sqlite_url, one_pair("[sim: ratelimit 30]"), "gw/m", strategy)
    [result] = results
    assert result.status == "errored" and result.error.startswith(
        "rate_limited: the provider asked to wait 30 s (Retry-After), more than max_retry_after (5 s) of "
        "provider 'gw'"), result.error
    assert sim.stats()["requests"] == 1


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("max_retries, requests", [(0, 1), (1, 2)])
def test_max_retries_in_the_providers_file_is_the_pairs_retry_budget(
    strategy, max_retries, requests, sqlite_url, provider, monkeypatch
):
    sim, entry = provider
    entry(f"    max_retries: {max_retries}\n")
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.05")
    _, results = run_one(sqlite_url, one_pair("[sim: status 500]"), "gw/m", strategy)
    [result] = results
    assert result.status == "errored" and result.attempts == requests, result.error
    assert result.error.endswith(f"(gave up after {requests} attempts)"), result.error
    assert sim.stats()["requests"] == requests


def test_a_day_long_retry_after_does_not_hold_the_deployments_other_pairs(sqlite_url, provider, monkeypatch):
    """Fan-out, governor on: each pair asked to wait a day errors at once; the budget is not paused for
    the day (the governor would have held every other pair of the deployment in hand-backs)."""
    sim, _ = provider
    monkeypatch.setenv("EVALJOBS_TIME_LIMIT", "10")
    monkeypatch.setenv("EVALJOBS_GOVERNOR", "on")
    text = "name: day\nscenarios:\n" + "".join(f"  - {{key: s{i}, prompt: '[sim: ratelimit 86400] {i}'}}\n"
                                                for i in range(4))
    info, results = run_one(sqlite_url, loads_catalog(text, source="day.yaml"), "gw/m", "fanout")
    assert info.persisted == 4 and info.report is not None, info
    assert all(
        r.status == "errored" and r.error.startswith("rate_limited: the provider asked to wait 86400 s")
        for r in results
    ), [r.error for r in results]
    assert sim.stats()["requests"] == 4


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_budget_paused_past_the_pairs_deadline_ends_the_pair_at_once(strategy, sqlite_url, provider,
                                                                       monkeypatch):
    """Governor on: a 429 with ``Retry-After: 120`` pauses the deployment's budget for 120 s. A pair of
    a later run, with a 5 s time limit, cannot get a permit before its deadline: it ends ``errored``
    (rate limited, with the pause's figure) without calling, on every strategy. Before, the fan-out
    strategy handed it back for the whole pause (the wait was not counted as the pair's time) and
    it ran two minutes later; the in-place strategies slept until the deadline."""
    sim, _ = provider
    monkeypatch.setenv("EVALJOBS_TIME_LIMIT", "5")
    monkeypatch.setenv("EVALJOBS_GOVERNOR", "on")
    with Session(db=sqlite_url, broker="memory", width=2) as session:
        first = session.submit(one_pair("[sim: ratelimit 120]"), ["gw/m"], strategy=strategy)
        session.wait(first.id, timeout=120, poll=0.2)  # errored at once: 120 s is past its 5 s
        assert sim.stats()["requests"] == 1
        run = session.submit(one_pair("[sim: say hello]"), ["gw/m"], strategy=strategy)
        info = session.wait(run.id, timeout=60, poll=0.2)  # a guard against a hang, not a measurement
        [result] = session.results(run.id)
    assert info.persisted == 1 and result.status == "errored", (info, result.error)
    assert result.error.startswith("rate_limited: the provider's budget is paused for "), result.error
    assert "(its Retry-After), more than the " in result.error, result.error
    assert "left of the pair's 5 s time limit" in result.error, result.error
    assert sim.stats()["requests"] == 1  # the paused budget was never called past


def test_a_shorter_pause_counts_as_the_pairs_time_in_its_handed_back_message(sqlite_url, redis_url, provider,
                                                                              monkeypatch):
    """Fan-out on Redis: a budget paused for 4 s (a 429's ``Retry-After`` through the governor's own
    release) with 10 s left: the pair is handed back for the pause, and its message carries the pause as
    time spent, so its deadline comes 4 s sooner (before, it carried only the attempt's milliseconds).
    The pair is evaluated here by calling the actor; the handed-back message is read from Redis."""
    import dramatiq
    import redis as redis_lib

    from evaljobs.pipeline import actors, runtime

    monkeypatch.setenv("EVALJOBS_TIME_LIMIT", "10")
    monkeypatch.setenv("EVALJOBS_GOVERNOR", "on")
    with Session(db=sqlite_url, broker=redis_url) as session:
        run = session.submit(one_pair("[sim: say hello]"), ["gw/m"])  # no worker: nothing runs it
        governor = runtime.governor()
        budget = runtime.budget_for(runtime.providers(), runtime.model_spec("gw/m"))
        governor.acquire(budget, max_wait=5).release(rate_limited=True, retry_after=4)
        actors.evaluate_scenario(run.id, "only", "gw/m")  # Busy (paused): handed back, due in 4 s
        client = redis_lib.Redis.from_url(redis_url)
        delayed = [
            dramatiq.Message.decode(body) for body in client.hgetall("dramatiq:agents.DQ.msgs").values()
        ]
        client.close()
    [message] = [m for m in delayed if m.actor_name == "evaluate_scenario"]
    assert message.kwargs["busy"] == 1 and message.options["pair_spent"] >= 3.5, message  # the pause, counted
