"""The governor sizes a budget from the rate-limit headers providers send (issue 39): at the limit before
the first 429.

A cold budget lets one call go first; the request limit its answer announces
(``x-ratelimit-limit-requests``; Anthropic's ``anthropic-ratelimit-requests-limit`` through its wire
format) is where the budget opens, and its width never grows past it. Unit tests run on both stores
(the Lua scripts and the in-memory store must agree); the end-to-end tests run evaljobs against a
counting server of the test's own that announces its limit the way OpenAI does and counts its 429s.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from evaljobs import api
from evaljobs.api import Session
from evaljobs.clock import ManualClock
from evaljobs.governor import BudgetConfig, Busy, Governor
from evaljobs.governor.budgets import SCOUT_SECONDS
from evaljobs.providers.wire import wire_format
from helpers import CountingServer, counting_files

BUDGET = "announcing:model-a"
OPENAI = {"x-ratelimit-limit-requests": "8", "x-ratelimit-remaining-requests": "7",
          "x-ratelimit-reset-requests": "120ms", "x-ratelimit-limit-tokens": "150000",
          "x-ratelimit-remaining-tokens": "149990", "x-ratelimit-reset-tokens": "6m0s"}


@pytest.fixture
def make(governors):
    return lambda config, *, clock=None: governors(BUDGET, config, clock=clock)


def fill(governor: Governor) -> list:
    held = []
    while True:
        try:
            held.append(governor.acquire(BUDGET, "interactive", max_wait=0))
        except Busy:
            return held


def width(governor: Governor) -> int:
    held = fill(governor)
    for permit in held:
        permit.release()
    return len(held)


def test_a_cold_budget_opens_at_the_limit_its_first_answer_announces(make):
    governor = make(BudgetConfig(ceiling=64))
    (scout,) = fill(governor)  # one call first: nothing is known yet
    scout.release(headers=OPENAI)
    held = fill(governor)
    assert len(held) == 8, "the provider announced 8 requests: never more than 8 in flight"
    for permit in held:  # every slot in use and answered: still no wider than announced
        permit.release(headers=OPENAI)
    for _ in range(20):
        assert width(governor) == 8


def test_anthropic_announces_its_limit_through_its_wire_format(make):
    reset = (datetime.now(timezone.utc) + timedelta(seconds=20)).isoformat(timespec="seconds")
    headers = wire_format("anthropic").limit_headers({
        "anthropic-ratelimit-requests-limit": "5", "anthropic-ratelimit-requests-remaining": "4",
        "anthropic-ratelimit-requests-reset": reset, "anthropic-ratelimit-tokens-remaining": "9000"})
    governor = make(BudgetConfig(ceiling=64))
    (scout,) = fill(governor)
    scout.release(headers=headers)
    assert width(governor) == 5


def test_an_announced_limit_narrows_a_warm_budget_too(make):
    governor = make(BudgetConfig(initial=32, ceiling=64))  # no scout: an explicit start
    held = fill(governor)
    assert len(held) == 32
    held[0].release(headers=OPENAI)
    for permit in held[1:]:
        permit.release()
    assert width(governor) == 8


def test_a_scout_that_is_not_answered_in_time_opens_the_budget_blind(make):
    clock = ManualClock(1_700_000_000.0)
    governor = make(BudgetConfig(ceiling=16), clock=clock)
    (scout,) = fill(governor)
    clock.advance(SCOUT_SECONDS)  # a slow first call: the others do not wait for it any longer
    held = fill(governor)
    assert len(held) == 15
    for permit in (scout, *held):
        permit.release()


def test_a_cold_width_16_run_against_an_announced_limit_of_8_gets_at_most_one_429(
        tmp_path, counting_server, monkeypatch):
    """The provider serves 8 at once and says so in every answer; the run asks for 16 from a cold start."""
    monkeypatch.setenv("EVALJOBS_GOVERNOR", "on")
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.01")
    server: CountingServer = counting_server(cap=8, latency=0.05, announce=True)
    catalog, providers = counting_files(tmp_path, server, scenarios=48, provider="announcing")
    session = Session(db=f"sqlite:///{tmp_path}/run.db", broker="memory", width=16, providers=str(providers))
    try:
        info = session.run(str(catalog), ["announcing/m1"], strategy="fanout")
    finally:
        session.close()
    counts = server.counts()
    assert info.status == "complete" and counts["answered"] == 48
    assert counts["rate_limited"] <= 1, counts


@pytest.mark.redis
def test_worker_processes_share_the_announced_limit(tmp_path, counting_server, monkeypatch, redis_url):
    """Two worker processes of 8 threads (width 16) on one Redis governor, cold, against a limit of 8."""
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.01")
    server: CountingServer = counting_server(cap=8, latency=0.05, announce=True)
    catalog, providers = counting_files(tmp_path, server, scenarios=48, provider="announcing")
    run = api.benchmark(str(catalog), ["announcing/m1"], providers=str(providers),
                            out=str(tmp_path / "o"), strategies="fanout", widths="8", repeat=1,
                            cell_timeout=120.0, governor=True, broker=redis_url, processes=2)
    counts = server.counts()
    (m,) = run.result.measurements
    assert m.status == "complete"
    assert counts["rate_limited"] <= 1, counts  # warm-up runs included: the whole benchmark
    assert m.rate_limited <= counts["rate_limited"]
