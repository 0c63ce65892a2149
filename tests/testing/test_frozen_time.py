"""A host freezing time (freezegun) around a run does not break it (evaljobs.clock).

Each run is rate limited (three 429s with Retry-After per conversation), so it depends on
delays, Dramatiq's delayed messages and Session.wait's timeout — all on the real clock, as are
evaljobs' own timestamps; only the host's code sees the frozen date.
"""
from __future__ import annotations

import calendar
import subprocess
import sys
import textwrap
from datetime import datetime, timezone

import pytest
from freezegun import freeze_time

from evaljobs import clock, config
from evaljobs.simulated import SimulatedProvider

PAIRS = 5
CATALOG = {
    "name": "frozen",
    "scenarios": [
        {
            "key": f"s{i}",
            "prompt": f"[sim: fail-first 3 429] [sim: say ok {i}]",
            "expect": {"contains": [f"ok {i}"]},
        }
        for i in range(PAIRS)
    ],
}


@pytest.fixture
def limited(monkeypatch):
    with SimulatedProvider(retry_after=0.1) as sim:
        monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
        previous = config.settings()
        config.configure(previous, sim_url=sim.url)
        yield sim
        config.configure(previous)


@pytest.mark.parametrize("when, tick", [("2024-01-01 12:00:00", False), ("2031-06-01 08:30:00", False),
                                        ("2024-01-01 12:00:00", True)],
                         ids=["past-frozen", "future-frozen", "past-ticking"])
def test_a_rate_limited_run_completes_under_frozen_time(evaljobs_run, limited, when, tick):
    with freeze_time(when, tick=tick):
        finished = evaljobs_run(CATALOG, ["sim/fast"], timeout=60)

    assert finished.status == "complete", finished.report
    assert [r.status for r in finished.results] == ["passed"] * PAIRS, [r.error for r in finished.results]
    assert limited.stats()["rate_limited"] == 3 * PAIRS  # the waits really happened
    real_now = datetime.fromtimestamp(clock.wall(), timezone.utc)
    assert abs((finished.run.created_at - real_now).total_seconds()) < 3600  # evaljobs' own dates are real


def test_the_clock_is_real_while_time_is_frozen():
    before = clock.monotonic()
    with freeze_time("2031-06-01"):
        import time

        assert time.time() == calendar.timegm((2031, 6, 1, 0, 0, 0))  # frozen for the host's code
        assert clock.monotonic() >= before
        assert abs(clock.wall() - calendar.timegm((2031, 6, 1, 0, 0, 0))) > 3600


def test_a_manual_clock_moves_only_forward_and_only_when_told():
    from evaljobs.testing import ManualClock

    manual = ManualClock(start=5.0)
    with freeze_time("2031-06-01", tick=True):
        assert manual() == 5.0 and manual() == 5.0  # neither real nor frozen time moves it
    assert manual.advance(2.5) == 7.5 and manual() == 7.5
    with pytest.raises(ValueError, match="does not go back"):
        manual.advance(-1)
    with pytest.raises(ValueError, match="does not go back"):
        manual.advance(float("nan"))
    assert manual() == 7.5


def test_a_session_outside_pytest_shields_itself(tmp_path):
    """No plugin: a host script that freezes time after creating its Session still completes its run."""
    script = textwrap.dedent(f"""
        import freezegun
        from evaljobs import Session
        from evaljobs.simulated import SimulatedProvider
        from evaljobs.testing import run_catalog
        import os
        with SimulatedProvider(retry_after=0.1) as sim:
            os.environ["EVALJOBS_SIM_URL"] = sim.url
            with Session(db="sqlite:///{tmp_path}/s.db", broker="memory", width=2) as session:
                with freezegun.freeze_time("2024-01-01"):
                    finished = run_catalog(session, {CATALOG!r}, ["sim/fast"], timeout=60)
            print(finished.status, sim.stats()["rate_limited"])
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert done.stdout.split() == ["complete", str(3 * PAIRS)], done.stderr[-2000:]
