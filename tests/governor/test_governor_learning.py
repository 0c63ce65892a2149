"""The governor's start and what it learns (issue 20): start at the width asked for, halve once per
429 burst, keep the learned limit across runs (Redis and the database), and hold ``bulk_reserve``
back only while an interactive lane is in use.

Behaviour tests run on both stores (``redis`` and ``local``): the Lua scripts and the in-memory
store must agree. The learned limit is checked across real processes on a SQLite file.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from evaljobs import store
from evaljobs.pipeline.context import DatabaseLearned
from evaljobs.clock import ManualClock
from evaljobs.governor import INTERACTIVE_RECENT, BudgetConfig, Busy, Governor, Learned

REPO = Path(__file__).resolve().parents[2]
BUDGET = "sim:model-a"


@pytest.fixture
def make(governors):
    """A governor on the parametrized backend (see conftest's ``governors``) with ``BUDGET`` configured."""
    return lambda config, *, clock=None, learned=None: governors(BUDGET, config, clock=clock, learned=learned)


def stat(governor: Governor) -> dict:
    return {row["budget"]: row for row in governor.stats()}[BUDGET]


def fill(governor: Governor, lane: str = "bulk") -> list:
    """Acquire without waiting until the governor says no: the permits it granted."""
    held = []
    while True:
        try:
            held.append(governor.acquire(BUDGET, lane, max_wait=0))
        except Busy:
            return held


def release_all(permits: list, **outcome) -> None:
    for permit in permits:
        permit.release(**outcome)


def answer_the_scout(governor: Governor, **outcome) -> None:
    """A cold budget lets one call go first (issue 39): its answer, announcing no limit, opens the budget."""
    governor.acquire(BUDGET, max_wait=0).release(**outcome)


# ----------------------------------------------------------------------------- the start width

def test_a_fresh_budget_starts_at_its_ceiling_not_at_a_slow_start(make):
    governor = make(BudgetConfig(ceiling=16))  # the defaults otherwise, bulk_reserve 0.15 included
    scout = fill(governor)
    assert len(scout) == 1, "cold: one call first, its answer may announce the provider's limit"
    release_all(scout)  # it announced nothing: the budget opens at once, as wide as asked
    held = fill(governor)
    assert len(held) == 16 and stat(governor)["limit"] == 16
    release_all(held)


def test_an_explicit_initial_still_starts_lower(make):
    governor = make(BudgetConfig(initial=3, ceiling=16))
    held = fill(governor)
    assert len(held) == 3
    release_all(held)


# ----------------------------------------------------------------------------- one halving per burst

def test_a_provider_refusing_a_fifth_call_is_learned_in_one_burst(make):
    """Width 16 against a provider serving 4: twelve 429s come back, one halving, then the capacity."""
    governor = make(BudgetConfig(ceiling=64))
    answer_the_scout(governor)
    held = [governor.acquire(BUDGET, max_wait=0) for _ in range(16)]  # a run of width 16
    served, refused = held[:4], held[4:]
    refused[0].release(rate_limited=True, retry_after=0.01)
    assert stat(governor)["limit"] == 8  # halved once: the width in use, 16, not the untested 64
    for permit in refused[1:]:
        permit.release(rate_limited=True)
    row = stat(governor)
    assert row["rate_limited"] == 12
    assert row["limit"] == 4, "the burst's last 429 saw the provider serving 4: the limit stays there"
    release_all(served)
    assert stat(governor)["limit"] == 4


def test_the_width_in_use_is_halved_not_an_untested_ceiling(make):
    governor = make(BudgetConfig(ceiling=64))
    answer_the_scout(governor)
    held = [governor.acquire(BUDGET) for _ in range(16)]
    held[0].release(rate_limited=True)  # 16 in flight of a limit of 64: the run's width was 16
    assert stat(governor)["limit"] == 8
    held[1].release(rate_limited=True)  # the same burst (granted before the decrease): no second halving
    row = stat(governor)
    assert row["limit"] == 8 and row["rate_limited"] == 2
    release_all(held[2:])


def test_a_burst_where_every_call_was_refused_shows_no_capacity(make):
    """A spent quota refuses everything: that is one halving, not a concurrency of 1."""
    governor = make(BudgetConfig(initial=8, ceiling=8))
    held = fill(governor, "interactive")
    release_all(held, rate_limited=True)
    assert stat(governor)["limit"] == 4


# ----------------------------------------------------------------------------- lanes

def test_bulk_reserve_holds_slots_back_only_while_the_interactive_lane_is_in_use(make):
    clock = ManualClock(1_700_000_000.0)
    governor = make(BudgetConfig(initial=10, ceiling=10, bulk_reserve=0.15), clock=clock)
    held = fill(governor)
    assert len(held) == 10, "nobody uses the interactive lane: bulk may use every slot"
    release_all(held)

    interactive = governor.acquire(BUDGET, "interactive")  # in flight: the reserve applies
    held = fill(governor)
    assert len(held) == 8  # floor(0.85 * 10), the interactive call beside them
    release_all(held)
    interactive.release()

    clock.advance(INTERACTIVE_RECENT - 1)  # used recently: still reserved
    held = fill(governor)
    assert len(held) == 8
    release_all(held)

    clock.advance(2)  # no interactive call for longer than INTERACTIVE_RECENT: the reserve is lifted
    held = fill(governor)
    assert len(held) == 10
    release_all(held)


# ----------------------------------------------------------------------------- kept across runs

class MemoryLearned:
    def __init__(self) -> None:
        self.rows: dict[str, Learned] = {}

    def load(self, budget: str) -> Learned | None:
        return self.rows.get(budget)

    def save(self, budget: str, learned: Learned) -> None:
        self.rows[budget] = learned


def learn_capacity_4(governor: Governor) -> None:
    answer_the_scout(governor)
    held = [governor.acquire(BUDGET) for _ in range(16)]
    release_all(held[4:], rate_limited=True)
    release_all(held[:4])


def test_what_was_learned_is_where_the_next_governor_starts(make):
    learned = MemoryLearned()
    first = make(BudgetConfig(), learned=learned)
    learn_capacity_4(first)
    first.close()
    assert learned.rows[BUDGET].limit == 4 and learned.rows[BUDGET].hold == 4

    second = make(BudgetConfig(), learned=learned)  # a later run (Redis: its state kept there too)
    held = fill(second)
    assert len(held) == 4
    release_all(held)


def test_redis_keeps_what_was_learned_and_the_database_seeds_an_emptied_redis(redis_url, sqlite_url):
    store.connect(sqlite_url)
    first = Governor(redis_url, learned=DatabaseLearned())
    first.configure(BUDGET, BudgetConfig())
    learn_capacity_4(first)
    first.close()

    second = Governor(redis_url)  # no database: Redis alone remembers
    second.configure(BUDGET, BudgetConfig())
    held = fill(second)
    assert len(held) == 4
    release_all(held)
    second.close()

    redis.Redis.from_url(redis_url).flushall()  # Redis lost it: the database still has it
    third = Governor(redis_url, learned=DatabaseLearned())
    third.configure(BUDGET, BudgetConfig())
    held = fill(third)
    assert len(held) == 4
    release_all(held)
    third.close()


_LEARN = """
import json, sys
from evaljobs import store
from evaljobs.pipeline.context import DatabaseLearned
from evaljobs.governor import BudgetConfig, Busy, Governor
store.connect(sys.argv[1])
governor = Governor(None, learned=DatabaseLearned())
governor.configure("sim:model-a", BudgetConfig())
try:  # a cold budget's scout (one call first), answered announcing no limit
    governor.acquire("sim:model-a", max_wait=0).release()
except Busy:  # (a warm budget grants it too: one call that changes nothing)
    pass
held = []
while True:  # as wide as the governor lets us go now
    try:
        held.append(governor.acquire("sim:model-a", max_wait=0))
    except Busy:
        break
width = len(held)
for permit in held[16:]:  # a run of width 16
    permit.release(failed=True)
if sys.argv[2] == "learn":  # a provider that serves 4 and refuses the rest, like the simulated one
    for permit in held[4:16]:
        permit.release(rate_limited=True)
for permit in held[:16]:
    permit.release()
governor.close()
print(json.dumps({"width": width, "limit": governor.stats()[0]["limit"]}))
"""


def test_the_learned_limit_outlives_the_process_in_sqlite(sqlite_url):
    """No Redis: the embedded default. The second process starts where the first one learned."""
    def run(mode: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", _LEARN, sqlite_url, mode], cwd=REPO, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    assert run("learn") == {"width": 64, "limit": 4}
    assert run("use") == {"width": 4, "limit": 4}
    store.connect(sqlite_url)
    assert store.governor_limits.load(BUDGET) == {"limit": 4, "ssthresh": 4, "hold": 4, "plateau": 16}
    assert store.governor_limits.clear() == 1
    assert run("use")["width"] == 64, "cleared: back to the ceiling"


# ----------------------------------------------------------------------------- unbounded budgets

def test_an_unbounded_budget_costs_no_redis_round_trip(redis_url):
    client = redis.Redis.from_url(redis_url)
    governor = Governor(redis_url)
    try:
        governor.configure(BUDGET, BudgetConfig.from_dict({"unbounded": True}))
        before = client.info("stats")["total_commands_processed"]
        held = [governor.acquire(BUDGET, max_wait=0) for _ in range(200)]  # no ceiling applies either
        for permit in held[:100]:
            permit.release()
        for permit in held[100:]:
            permit.release(rate_limited=True, retry_after=30)  # nothing to learn, nothing paused
        governor.acquire(BUDGET, max_wait=0).release()
        after = client.info("stats")["total_commands_processed"]
        assert after - before == 1, "only this test's own INFO reached Redis"
        assert governor.stats() == []
    finally:
        governor.close()
        client.close()


def test_unbounded_is_refused_with_a_quota_in_one_line():
    with pytest.raises(ValueError, match=r"^p: unbounded means no limit to respect; remove it, or rpm/tpm$"):
        BudgetConfig.from_dict({"unbounded": True, "rpm": 500}, source="p")
    with pytest.raises(ValueError, match=r"^p: unbounded must be true or false, not 'yes'$"):
        BudgetConfig.from_dict({"unbounded": "yes"}, source="p")


def test_a_budget_that_learned_nothing_writes_nothing(make):
    learned = MemoryLearned()
    governor = make(BudgetConfig(ceiling=8), learned=learned)
    for _ in range(3):
        release_all(fill(governor))
    governor.close()
    assert learned.rows == {}, "at its ceiling with no 429 seen: nothing to keep"


def test_the_learned_store_round_trips_on_sqlite_and_postgresql(db_url):
    store.connect(db_url)
    learned = DatabaseLearned()
    assert learned.load(BUDGET) is None
    learned.save(BUDGET, Learned(limit=4, ssthresh=4, hold=4, plateau=32))
    learned.save(BUDGET, Learned(limit=3, ssthresh=3, hold=3, plateau=64))  # replaced, not added
    assert learned.load(BUDGET) == Learned(limit=3, ssthresh=3, hold=3, plateau=64)
    assert store.governor_limits.clear() == 1
