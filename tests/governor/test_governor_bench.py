"""The governor tuning behind the issue-6 benchmark, and the benchmark script itself.

`scripts/bench_governor` runs a 100-scenario fan-out against a provider limited to
8 concurrent calls. Two governor changes came out of it, tested here on both
stores (Redis and the local twin):

* after a 429 the budget remembers how many calls the provider was serving when it
  refused (its capacity, as far as we can tell), climbs back there at slow-start
  speed (Little's law included) and holds there for ``HOLD_ROUNDS`` rounds instead
  of probing above it again every round (plain AIMD halved, crawled back up and hit
  the limit again); a probe that finds the same capacity doubles the hold;
* a release wakes only the waiter whose turn it is (waiters know their place in
  line), not every waiting thread; a release that grows the limit wakes one more.

The last test runs the real script, tiny, and checks the shape of what it reports.
"""
from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evaljobs.governor import facade, local_store, redis_store
from evaljobs.governor import HOLD_ROUNDS, BudgetConfig, Governor

REPO = Path(__file__).resolve().parents[2]
BUDGET = "sim:bench"


@pytest.fixture
def make(governors):
    """A governor on the parametrized backend (see conftest's ``governors``) with ``BUDGET`` configured."""
    return lambda config: governors(BUDGET, config)


def limit(governor: Governor) -> int:
    return {row["budget"]: row for row in governor.stats()}[BUDGET]["limit"]


def full_round(governor: Governor) -> None:
    """Use every slot of the current limit at once, then release them all as successes."""
    held = [governor.acquire(BUDGET, max_wait=0) for _ in range(limit(governor))]
    for permit in held:
        permit.release()


# ----------------------------------------------------------------------------- hold at the capacity seen

def test_after_a_429_the_limit_returns_to_what_the_provider_served_and_holds_there(make):
    governor = make(BudgetConfig(initial=12, ceiling=64, bulk_reserve=0))
    served = [governor.acquire(BUDGET) for _ in range(8)]
    refused = [governor.acquire(BUDGET) for _ in range(4)]
    for permit in refused:  # the provider serves 8 at a time: calls 9..12 come back 429 in one burst
        permit.release(rate_limited=True)
    row = {r["budget"]: r for r in governor.stats()}[BUDGET]
    assert row["limit"] == 6 and row["rate_limited"] == 4  # halved once for the burst

    for permit in served:  # slow start back up, but only to the 8 the provider was serving
        permit.release()
    assert limit(governor) == 8
    # A full round counts 5 of its 8 releases (the budget is "in use" while 4+ of 8 are in flight):
    # plain additive increase (+1 per 8) would be at 9 after two rounds, and get a 429 again.
    plateau = rounds_at(governor, 8)
    assert abs(plateau - 8 * HOLD_ROUNDS / 5) <= 1  # HOLD_ROUNDS x 8 counted successes, then one slot more
    assert limit(governor) == 9

    # The probe at 9 gets a 429 with 8 others in flight: the same capacity, so hold there twice as long.
    served = [governor.acquire(BUDGET, max_wait=0) for _ in range(8)]
    governor.acquire(BUDGET, max_wait=0).release(rate_limited=True)
    assert limit(governor) == 4
    for permit in served:
        permit.release()
    assert limit(governor) == 8
    assert abs(rounds_at(governor, 8) - 2 * plateau) <= 2
    assert limit(governor) == 9
    for _ in range(2):  # above the level it remembers, the increase is +1 per round again
        full_round(governor)
    assert limit(governor) == 10


def rounds_at(governor: Governor, level: int) -> int:
    """Full rounds until the limit leaves ``level``."""
    rounds = 0
    while limit(governor) == level and rounds < 1000:
        full_round(governor)
        rounds += 1
    return rounds


def test_littles_law_does_not_jump_past_the_capacity_a_429_showed(make):
    governor = make(BudgetConfig(initial=12, ceiling=64, rpm=6000, bulk_reserve=0))
    served = [governor.acquire(BUDGET) for _ in range(8)]
    for permit in [governor.acquire(BUDGET) for _ in range(4)]:
        permit.release(rate_limited=True)
    served[0].release(latency=1.0)  # 0.85 x 6000/60 x 1.0 = 85 slots by the quota, but 8 served
    assert limit(governor) == 8
    for permit in served[1:]:
        permit.release(latency=1.0)
    assert limit(governor) == 8


def test_a_429_with_nothing_else_in_flight_holds_nothing(make):
    """No other call in flight (a per-minute quota, or someone else's traffic): no capacity to remember."""
    governor = make(BudgetConfig(initial=8, ceiling=64, bulk_reserve=0))
    governor.acquire(BUDGET).release(rate_limited=True)
    assert limit(governor) == 1  # the width in use (one call) halved, to the floor
    for _ in range(5):
        full_round(governor)
    assert limit(governor) > 4  # additive increase from the halved limit: nothing held it back


# ----------------------------------------------------------------------------- who a release wakes

@pytest.fixture
def long_polls(monkeypatch):
    """Waiters far from the head of the line poll rarely (5 s) so only a release can wake them quickly."""
    monkeypatch.setattr(facade, "SLEEP_CAP", 5.0)
    for store in (local_store, redis_store):
        monkeypatch.setattr(store, "WAITER_TTL", 6.0)


class Line:
    """Waiter threads queued in order, each holding its permit until told to release it."""

    def __init__(self, governor: Governor):
        self.governor = governor
        self.attempts: collections.Counter[str] = collections.Counter()
        self.granted: dict[str, float] = {}
        self.permits: dict[str, object] = {}
        self.threads: list[threading.Thread] = []
        real = governor._attempt

        def counting(*args, **kwargs):
            answer = real(*args, **kwargs)  # counted once it is in line
            self.attempts[threading.current_thread().name] += 1
            return answer

        governor._attempt = counting  # type: ignore[method-assign]

    def join(self, name: str) -> None:
        def wait() -> None:
            permit = self.governor.acquire(BUDGET, max_wait=20)
            self.permits[name] = permit
            self.granted[name] = time.monotonic()

        thread = threading.Thread(target=wait, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)
        deadline = time.monotonic() + 5
        while self.attempts[name] < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert self.attempts[name] >= 1, f"{name} never asked for a permit"

    def wait_granted(self, name: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while name not in self.granted and time.monotonic() < deadline:
            time.sleep(0.002)
        assert name in self.granted, f"{name} was not granted within {timeout}s"
        return self.granted[name]

    def close(self) -> None:
        deadline = time.monotonic() + 10
        while any(t.is_alive() for t in self.threads) and time.monotonic() < deadline:
            for name in list(self.permits):
                self.permits.pop(name).release()  # let the waiters behind it through
            time.sleep(0.01)
        for permit in self.permits.values():
            permit.release()


def test_a_release_wakes_the_next_waiter_not_the_whole_line(make, long_polls):
    governor = make(BudgetConfig(initial=1, ceiling=1, bulk_reserve=0))
    governor.acquire(BUDGET).release(latency=20.0)  # calls take ~20 s: the line's expected waits are long
    holder = governor.acquire(BUDGET)
    line = Line(governor)
    for name in ("w0", "w1", "w2", "w3"):
        line.join(name)
    try:
        before = dict(line.attempts)
        released = time.monotonic()
        holder.release()
        assert line.wait_granted("w0", 2.0) - released < 1.0
        time.sleep(0.2)
        assert {n: line.attempts[n] - before[n] for n in ("w1", "w2", "w3")} == {"w1": 0, "w2": 0, "w3": 0}

        released = time.monotonic()
        line.permits.pop("w0").release()  # now it is w1's turn, and only w1's
        assert line.wait_granted("w1", 2.0) - released < 1.0
        time.sleep(0.2)
        assert line.attempts["w2"] == before["w2"] and line.attempts["w3"] == before["w3"]
    finally:
        line.close()


def test_a_release_that_grows_the_limit_wakes_one_waiter_per_new_slot(make, long_polls):
    governor = make(BudgetConfig(initial=1, ceiling=4, bulk_reserve=0))
    governor.acquire(BUDGET).release(latency=20.0)  # slow start: limit 2; calls take ~20 s
    assert limit(governor) == 2
    held = [governor.acquire(BUDGET) for _ in range(2)]
    line = Line(governor)
    line.join("w0")
    line.join("w1")
    try:
        released = time.monotonic()
        held[0].release(latency=20.0)  # one slot back, and the limit grows to 3: two slots free
        assert limit(governor) == 3
        assert line.wait_granted("w0", 3.0) - released < 2.0
        assert line.wait_granted("w1", 3.0) - released < 2.0  # not at its next poll, 5 s away
    finally:
        held[1].release()
        line.close()


# ----------------------------------------------------------------------------- the script

@pytest.mark.redis
def test_the_benchmark_script_reports_each_mode(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_governor"), "--modes", "known", "--repeat", "1",
         "--scenarios", "12", "--width", "8", "--max-concurrent", "2", "--latency", "0.05",
         "--worker-timeout-ms", "100", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "| mode | wall clock (s) | vs ideal | 429s (% of calls) | provider requests |" in proc.stdout
    assert "| governor, `initial: 2, ceiling: 2` |" in proc.stdout
    report = json.loads(out.read_text())
    assert report["ideal_s"] == pytest.approx(12 / 2 * 0.05)
    [row] = report["summary"]
    assert row["mode"] == "known" and row["all_complete"] and row["trials"] == 1
    assert row["wall_s"] >= report["ideal_s"]  # 12 calls of 0.05 s, 2 at a time: the physical bound
    assert row["vs_ideal_pct"] == pytest.approx(100 * (row["wall_s"] / report["ideal_s"] - 1), abs=0.1)
    [trial] = report["trials"]
    assert trial["status"] == "complete" and trial["passed"] == 12
    # the governor knows the provider's limit: the worker's 8 threads never go over it
    assert trial["completed"] == trial["requests"] == 12 and trial["rate_limited"] == 0
    assert trial["rate_limited_pct"] == 0.0 and trial["peak_in_flight"] == 2
