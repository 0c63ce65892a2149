"""The provider governor against a real redis-server, and its local (no Redis / fallback) twin.

Most behaviour tests run twice, ``redis`` and ``local``: the Lua scripts and the
in-memory store must agree. Where time matters an injected clock drives both
(it replaces the Redis server clock in the scripts); the few tests that need a
real clock (a killed process, a Retry-After pause) use sub-second leases.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from evaljobs.clock import ManualClock
from evaljobs.governor import BudgetConfig, Busy, Governor, budget_key
from evaljobs.network.errors import RateLimited

REPO = Path(__file__).resolve().parents[2]
BUDGET = "sim:model-a"


@pytest.fixture
def make(governors):
    """A governor on the parametrized backend (see conftest's ``governors``), ``BUDGET`` unless told."""
    def factory(config: BudgetConfig | None = None, *, clock=None, budget: str = BUDGET) -> Governor:
        return governors(budget, config, clock=clock)
    return factory


def stat(governor: Governor, budget: str = BUDGET) -> dict:
    rows = {row["budget"]: row for row in governor.stats()}
    return rows[budget]


# ----------------------------------------------------------------------------- adaptive limit

def test_concurrent_calls_never_exceed_the_limit_and_the_limit_grows(make):
    governor = make(BudgetConfig(initial=2, ceiling=16))
    lock = threading.Lock()
    in_flight = 0
    peak = 0
    violations: list[dict] = []
    done = threading.Event()

    def call() -> None:
        nonlocal in_flight, peak
        permit = governor.acquire(BUDGET, max_wait=20)
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.03)
        with lock:
            in_flight -= 1
        permit.release(tokens=50)

    def sample() -> None:
        while not done.is_set():
            row = {r["budget"]: r for r in governor.stats()}.get(BUDGET)  # one atomic snapshot
            if row is not None and row["in_flight"] > row["limit"]:
                violations.append(row)
            time.sleep(0.003)

    sampler = threading.Thread(target=sample)
    sampler.start()
    workers = [threading.Thread(target=call) for _ in range(12)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    done.set()
    sampler.join(timeout=5)

    row = stat(governor)
    assert not violations, violations[:3]
    assert row["admitted"] == 12 and row["in_flight"] == 0
    assert 2 < row["limit"] <= 16
    assert peak <= row["limit"]  # the limit only grew here, so every moment respected it
    assert peak > 2, "the grown limit was never used"


def test_a_burst_of_429s_halves_the_limit_once_then_grows_additively(make):
    governor = make(BudgetConfig(initial=8, ceiling=8, bulk_reserve=0))
    burst = [governor.acquire(BUDGET) for _ in range(8)]
    for permit in burst:  # every call refused: no capacity shown, one plain halving
        permit.release(rate_limited=True)
    row = stat(governor)
    assert row["limit"] == 4 and row["rate_limited"] == 8

    # After the decrease the budget grows by one slot per `limit` successes (additive increase).
    held = [governor.acquire(BUDGET) for _ in range(4)]
    for permit in held[:3]:
        permit.release()
    assert stat(governor)["limit"] == 4
    held[3].release()  # in flight 1 of 4: an under-used budget does not grow
    assert stat(governor)["limit"] == 4
    pair = [governor.acquire(BUDGET) for _ in range(2)]
    pair[0].release()
    assert stat(governor)["limit"] == 5
    pair[1].release()

    # A 429 on a permit granted after the decrease is a new burst: it halves again, down to the floor of 1.
    for expected in (2, 1, 1):
        width = [governor.acquire(BUDGET) for _ in range(stat(governor)["limit"])]
        width[0].release(rate_limited=True)  # the width in use (the whole limit) halves
        for permit in width[1:]:
            permit.release(failed=True)
        assert stat(governor)["limit"] == expected


def test_a_lone_sequential_caller_does_not_inflate_the_limit_and_the_ceiling_holds(make):
    governor = make(BudgetConfig(initial=4, ceiling=5, bulk_reserve=0))
    for _ in range(6):
        governor.acquire(BUDGET).release()
    assert stat(governor)["limit"] == 4
    for _ in range(3):
        held = [governor.acquire(BUDGET) for _ in range(stat(governor)["limit"])]
        for permit in held:
            permit.release()
    assert stat(governor)["limit"] == 5


def test_spent_quota_headers_halve_the_limit_and_pause_until_the_reset(make):
    governor = make(BudgetConfig(initial=4, ceiling=8))
    width = [governor.acquire(BUDGET, "interactive") for _ in range(4)]  # the width in use: 4
    width[0].release(headers={"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20s",
                              "x-ratelimit-remaining-tokens": "1234"})
    for permit in width[1:]:
        permit.release(failed=True)
    row = stat(governor)
    assert row["limit"] == 2 and row["rate_limited"] == 0
    assert 19 < row["paused_for"] <= 20
    with pytest.raises(Busy) as busy:
        governor.acquire(BUDGET, max_wait=0.5)
    assert busy.value.reason == "paused" and 19 < busy.value.retry_in <= 20


def test_littles_law_jumps_slow_start_to_the_quota_estimate(make):
    by_requests = make(BudgetConfig(initial=1, ceiling=64, rpm=600), budget="a:rpm")
    by_requests.acquire("a:rpm").release(latency=2.0)
    assert stat(by_requests, "a:rpm")["limit"] == 17  # floor(0.85 * 600/60 * 2.0)

    by_tokens = make(BudgetConfig(initial=1, ceiling=64, rpm=600, tpm=60_000), budget="a:tpm")
    by_tokens.acquire("a:tpm", tokens=1000).release(latency=2.0, tokens=1000)
    # tokens bind: 0.85 * 60000/60/1000 * 2.0 = 1.7, so only the slow-start step applies
    assert stat(by_tokens, "a:tpm")["limit"] == 2


# ----------------------------------------------------------------------------- lanes

def test_a_full_bulk_lane_leaves_the_reserve_to_interactive_calls(make):
    governor = make(BudgetConfig(initial=10, ceiling=10, bulk_reserve=0.15))
    governor.acquire(BUDGET, "interactive").release(failed=True)  # the interactive lane is in use
    bulk = [governor.acquire(BUDGET, "bulk") for _ in range(8)]  # floor(0.85 * 10)
    with pytest.raises(Busy) as busy:
        governor.acquire(BUDGET, "bulk", max_wait=0.1)
    assert busy.value.reason == "limit" and busy.value.retry_in > 0
    interactive = [governor.acquire(BUDGET, "interactive", max_wait=0.1) for _ in range(2)]
    with pytest.raises(Busy):
        governor.acquire(BUDGET, "interactive", max_wait=0.05)
    row = stat(governor)
    assert (row["in_flight"], row["in_flight_bulk"], row["in_flight_interactive"]) == (10, 8, 2)
    for permit in bulk + interactive:
        permit.release()


def test_a_limit_of_one_still_admits_bulk(make):
    governor = make(BudgetConfig(initial=1, ceiling=1, bulk_reserve=0.5))
    governor.acquire(BUDGET, "bulk", max_wait=0).release()


# ----------------------------------------------------------------------------- pauses, windows, waits

def test_retry_after_pauses_the_budget_until_it_ends(make):
    governor = make(BudgetConfig(initial=4, ceiling=4))
    permit = governor.acquire(BUDGET)
    started = time.monotonic()
    permit.release(rate_limited=True, retry_after=0.5)

    with pytest.raises(Busy) as busy:  # the pause outlasts max_wait: no point waiting for it
        governor.acquire(BUDGET, "interactive", max_wait=0.1)
    # (how soon it refuses is a figure of this machine's speed, not asserted: retry_in says why it did)
    assert busy.value.reason == "paused" and 0.1 < busy.value.retry_in <= 0.5

    later = governor.acquire(BUDGET, max_wait=2)
    assert time.monotonic() - started >= 0.45
    later.release()


def test_a_rate_limited_exception_in_the_with_block_pauses_the_budget(make):
    governor = make(BudgetConfig(initial=4, ceiling=8))
    with pytest.raises(RateLimited):
        with governor.acquire(BUDGET):
            raise RateLimited("429 from provider", retry_after=30.0)
    row = stat(governor)  # the width in use was one call: halved to the floor
    assert row["rate_limited"] == 1 and row["limit"] == 1 and row["in_flight"] == 0
    assert 29 < row["paused_for"] <= 30


def test_requests_and_tokens_per_minute_windows(make):
    clock = ManualClock(1_700_000_000.0)
    governor = make(BudgetConfig(initial=8, ceiling=8, rpm=3, tpm=1000, bulk_reserve=0), clock=clock)
    first = governor.acquire(BUDGET, tokens=600)
    with pytest.raises(Busy) as busy:
        governor.acquire(BUDGET, tokens=600, max_wait=0)
    assert busy.value.reason == "tpm" and busy.value.retry_in == pytest.approx(60, abs=1)
    clock.advance(5)
    first.release(tokens=300)  # it used less than it reserved: the window gives the rest back
    second = governor.acquire(BUDGET, tokens=600, max_wait=0)
    second.release(tokens=10)
    clock.advance(5)
    governor.acquire(BUDGET, tokens=1, max_wait=0).release(tokens=1)

    with pytest.raises(Busy) as busy:  # 3 requests in the last minute
        governor.acquire(BUDGET, tokens=1, max_wait=0)
    assert busy.value.reason == "rpm" and busy.value.retry_in == pytest.approx(50, abs=1)
    clock.advance(50)
    governor.acquire(BUDGET, tokens=1, max_wait=0).release(tokens=1)


class Interrupted(Exception):
    pass


def test_a_cancelled_wait_gives_back_its_place(make):
    governor = make(BudgetConfig(initial=1, ceiling=1))
    holder = governor.acquire(BUDGET)

    with pytest.raises(Busy):  # a waiter that gives up
        governor.acquire(BUDGET, max_wait=0.1)

    def interrupt(signum, frame):
        raise Interrupted()

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.15)
        with pytest.raises(Interrupted):  # a waiter interrupted in the middle of its wait
            governor.acquire(BUDGET, max_wait=10)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

    assert stat(governor)["waiting"] == 0
    holder.release()
    # Neither left a place in the queue ahead of a newcomer, nor a slot.
    governor.acquire(BUDGET, max_wait=0).release()
    assert stat(governor)["in_flight"] == 0


def test_a_waiter_is_admitted_when_a_slot_frees(make):
    governor = make(BudgetConfig(initial=1, ceiling=1))
    holder = governor.acquire(BUDGET)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(governor.acquire(BUDGET, max_wait=5)))
    waiter.start()
    deadline = time.monotonic() + 2
    while stat(governor)["waiting"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stat(governor)["waiting"] == 1
    time.sleep(0.1)
    holder.release()
    waiter.join(timeout=5)
    assert len(got) == 1 and got[0].waited >= 0.1
    got[0].release()
    row = stat(governor)
    assert row["waiting"] == 0 and row["admitted"] == 2
    assert row["max_wait_ms"] >= 100
    assert row["mean_wait_ms"] == pytest.approx(row["max_wait_ms"] / 2, rel=0.01)


def test_waiters_are_counted_by_lane(make):
    """The per-lane wait counts (``evaljobs_governor_waiting{budget,lane}``) follow who queues where."""
    governor = make(BudgetConfig(initial=1, ceiling=1))
    holder = governor.acquire(BUDGET, "interactive")
    waiter, got = _queue_a_waiter(governor, "bulk")
    row = stat(governor)
    assert (row["waiting_interactive"], row["waiting_bulk"]) == (0, 1)
    holder.release()
    waiter.join(timeout=5)
    got[0].release()
    row = stat(governor)
    assert (row["waiting"], row["waiting_interactive"], row["waiting_bulk"]) == (0, 0, 0)


def _queue_a_waiter(governor: Governor, lane: str) -> tuple[threading.Thread, list]:
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(governor.acquire(BUDGET, lane, max_wait=3)))
    waiter.start()
    deadline = time.monotonic() + 2
    while stat(governor)["waiting"] == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert stat(governor)["waiting"] == 1
    return waiter, got


# A slot freed by an expiring lease (injected clock) wakes nobody, so the queued waiter and the
# newcomer race fairly: only the queue gives the slot to the waiter.

def test_waiters_are_served_first_come_first_served(make):
    clock = ManualClock(1_700_000_000.0)
    governor = make(BudgetConfig(initial=1, ceiling=1, lease_seconds=1), clock=clock)
    governor.acquire(BUDGET, keep_alive=False)
    waiter, got = _queue_a_waiter(governor, "bulk")
    clock.advance(1.5)  # the holder's lease ends; the waiter's place (renewed at each attempt) does not
    with pytest.raises(Busy):  # the freed slot belongs to the caller that queued first
        governor.acquire(BUDGET, max_wait=0)
    waiter.join(timeout=5)
    assert len(got) == 1
    got[0].release()


def test_queued_interactive_calls_go_before_bulk(make):
    clock = ManualClock(1_700_000_000.0)
    governor = make(BudgetConfig(initial=2, ceiling=2, bulk_reserve=0, lease_seconds=1), clock=clock)
    held = [governor.acquire(BUDGET, "bulk", keep_alive=False) for _ in range(2)]
    waiter, got = _queue_a_waiter(governor, "interactive")
    clock.advance(0.6)
    held[1].renew()
    clock.advance(0.6)  # held[0] has expired, held[1] has not
    with pytest.raises(Busy):
        governor.acquire(BUDGET, "bulk", max_wait=0)
    waiter.join(timeout=5)
    assert len(got) == 1 and got[0].lane == "interactive"
    got[0].release()
    held[1].release()


# ----------------------------------------------------------------------------- leases

def test_an_unrenewed_lease_expires_and_a_renewed_one_does_not(make):
    clock = ManualClock(1_700_000_000.0)
    governor = make(BudgetConfig(initial=1, ceiling=1, lease_seconds=10), clock=clock)
    permit = governor.acquire(BUDGET, keep_alive=False)
    clock.advance(8)
    permit.renew()
    clock.advance(8)
    assert stat(governor)["in_flight"] == 1
    with pytest.raises(Busy):
        governor.acquire(BUDGET, max_wait=0)
    clock.advance(3)
    assert stat(governor)["in_flight"] == 0
    governor.acquire(BUDGET, max_wait=0, keep_alive=False).release()
    permit.release()  # a late release of an expired lease is harmless
    assert stat(governor)["in_flight"] == 0


_CHILD = """
import sys, time
from evaljobs.governor import BudgetConfig, Governor
governor = Governor(sys.argv[1])
governor.configure("sim:killed", BudgetConfig(initial=1, ceiling=1, lease_seconds=1.0))
permit = governor.acquire("sim:killed", max_wait=5)
print("held", permit.backend, flush=True)
time.sleep(60)
"""


def test_a_killed_worker_process_loses_its_slot_when_its_lease_expires(redis_url):
    child = subprocess.Popen([sys.executable, "-c", _CHILD, redis_url], cwd=REPO, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    governor = Governor(redis_url)
    governor.configure("sim:killed", BudgetConfig(initial=1, ceiling=1, lease_seconds=1.0))
    try:
        assert child.stdout.readline().split() == ["held", "redis"]
        time.sleep(1.3)  # longer than the lease: the live child's renewer keeps it
        assert stat(governor, "sim:killed")["in_flight"] == 1
        with pytest.raises(Busy):
            governor.acquire("sim:killed", max_wait=0)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        permit = governor.acquire("sim:killed", max_wait=3)  # Busy unless the dead holder's lease lapsed
        permit.release()
        assert stat(governor, "sim:killed")["in_flight"] == 0
        assert governor.backend == "redis"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
        governor.close()


# ----------------------------------------------------------------------------- sharing and fallback

def test_two_governors_share_one_budget(redis_url):
    first, second = Governor(redis_url), Governor(redis_url)
    try:
        for governor in (first, second):
            governor.configure(BUDGET, BudgetConfig(initial=2, ceiling=2, bulk_reserve=0))
        held = [first.acquire(BUDGET), first.acquire(BUDGET)]
        with pytest.raises(Busy):
            second.acquire(BUDGET, max_wait=0.1)
        held[0].release(rate_limited=True)  # halves the shared limit to 1 for both
        with pytest.raises(Busy):
            second.acquire(BUDGET, max_wait=0.1)
        held[1].release()
        permit = second.acquire(BUDGET, max_wait=1)
        assert stat(first) == stat(second)
        assert stat(first)["in_flight"] == 1 and stat(first)["admitted"] == 3
        permit.release()
        assert first.backend == second.backend == "redis"
    finally:
        first.close()
        second.close()


def test_redis_down_falls_back_to_local_with_one_warning_then_returns(redis_server, redis_url, caplog):
    governor = Governor(redis_url, reconnect_after=0.3)
    governor.configure(BUDGET, BudgetConfig(initial=2, ceiling=4, bulk_reserve=0))
    caplog.set_level(logging.INFO, logger="evaljobs.governor")

    def warnings() -> list[str]:  # this governor's (threads left by other tests may log too)
        return [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "every 0.3s" in r.getMessage()]
    try:
        before = governor.acquire(BUDGET)
        assert before.backend == "redis"
        redis_server.stop()

        during = [governor.acquire(BUDGET, max_wait=0.5) for _ in range(2)]
        assert {p.backend for p in during} == {"local"}
        with pytest.raises(Busy):  # the local governor keeps the same limits
            governor.acquire(BUDGET, max_wait=0.05)
        before.release()  # its lease is in the stopped Redis: dropped, not an error
        for permit in during:
            permit.release()
        time.sleep(0.35)  # Redis is retried after reconnect_after, fails again: still the one warning
        governor.acquire(BUDGET).release()
        assert stat(governor)["backend"] == "local"
        assert len(warnings()) == 1 and "local per-process governor" in warnings()[0]

        redis_server.start()
        time.sleep(0.35)
        after = governor.acquire(BUDGET)
        assert after.backend == "redis" and governor.backend == "redis"
        observer = Governor(redis_url)
        try:
            assert stat(observer)["in_flight"] == 1
        finally:
            observer.close()
        after.release()
        assert len(warnings()) == 1
        assert any("back" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    finally:
        redis_server.start()
        governor.close()


# ----------------------------------------------------------------------------- keys, config, stats

def test_budget_key_modes():
    assert budget_key("openai", "gpt-4o-mini", {}) == "openai:gpt-4o-mini"
    assert budget_key("openai", "gpt-4o-mini", {"budget_key": "model"}) == "openai:gpt-4o-mini"
    assert budget_key("openai", "gpt-4o-mini", {"budget_key": "account"}) == "openai:*"
    assert budget_key("azure-east", "gpt-4o", {"budget_key": "azure-key-1"}) == "azure-key-1"
    assert budget_key("azure-west", "gpt-4o", {"budget_key": "azure-key-1"}) == "azure-key-1"
    with pytest.raises(ValueError, match=r"provider 'openai' governor: budget_key .* not 42"):
        budget_key("openai", "gpt-4o", {"budget_key": 42})


def test_models_behind_an_account_budget_share_its_slots(make):
    account = {"budget_key": "account", "initial": 1, "ceiling": 1}
    key_a, key_b = budget_key("openai", "gpt-4o", account), budget_key("openai", "gpt-4o-mini", account)
    governor = make()
    governor.configure(key_a, BudgetConfig.from_dict(account))
    held = governor.acquire(key_a)
    with pytest.raises(Busy):
        governor.acquire(key_b, max_wait=0)
    held.release()
    governor.acquire(key_b, max_wait=0).release()


def test_budget_config_from_dict_validates_with_one_line_errors():
    config = BudgetConfig.from_dict({"initial": 2, "ceiling": 32, "rpm": 500, "tpm": 90_000,
                                     "bulk_reserve": 0, "budget_key": "account"})
    assert config == BudgetConfig(initial=2, ceiling=32, rpm=500, tpm=90_000, bulk_reserve=0.0)
    assert BudgetConfig.from_dict(None) == BudgetConfig()
    where = "providers.yaml: provider 'openai' governor"
    cases = [({"initail": 2}, r"unknown key 'initail' \(valid keys: initial, ceiling"),
             ({"initial": 0}, r"initial must be an integer >= 1 \(or absent: start at the ceiling\), not 0"),
             ({"ceiling": "64"}, r"ceiling must be an integer >= 1, not '64'"),
             ({"initial": 8, "ceiling": 4}, r"initial \(8\) must not exceed ceiling \(4\)"),
             ({"rpm": -1}, r"rpm must be an integer >= 1"),
             ({"tpm": 1.5}, r"tpm must be an integer >= 1"),
             ({"bulk_reserve": 1}, r"bulk_reserve must be a fraction in \[0, 1\), not 1"),
             ({"lease_seconds": 0}, r"lease_seconds must be a number > 0, not 0"),
             ([1, 2], r"expected a mapping")]
    for data, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            BudgetConfig.from_dict(data, source=where)
        assert str(error.value).startswith(where) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match="governor: initial must be"):
        BudgetConfig(initial=-3)


def test_bad_arguments_are_one_line_errors(make):
    governor = make()
    with pytest.raises(ValueError, match="lane must be one of interactive, bulk, not 'batch'"):
        governor.acquire(BUDGET, "batch")
    with pytest.raises(ValueError, match="budget must be a non-empty string"):
        governor.acquire("")


def test_stats_list_every_known_budget_without_scanning(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.config_resetstat()
    governor = Governor(redis_url)
    try:
        governor.configure("a:1", BudgetConfig(initial=3, ceiling=3))
        governor.configure("b:2", BudgetConfig(initial=5, ceiling=5))
        held = governor.acquire("a:1", "interactive")
        governor.acquire("b:2").release(rate_limited=True)
        rows = governor.stats()
        assert [row["budget"] for row in rows] == ["a:1", "b:2"]
        a, b = rows
        assert (a["limit"], a["in_flight"], a["in_flight_interactive"], a["waiting"]) == (3, 1, 1, 0)
        assert a["admitted"] == 1
        # one call in flight when refused: the width in use (1) halves to the floor
        assert (b["limit"], b["in_flight"], b["rate_limited"], b["admitted"]) == (1, 0, 1, 1)
        assert {"mean_wait_ms", "max_wait_ms", "paused_for", "backend"} <= set(a)
        held.release()
        commands = client.info("commandstats")
        assert not {"cmdstat_scan", "cmdstat_keys"} & set(commands), sorted(commands)
    finally:
        governor.close()
        client.close()
