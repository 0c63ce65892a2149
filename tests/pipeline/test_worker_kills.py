"""Worker processes SIGKILLed once a second mid-run lose nothing and evaluate nothing twice (Redis, RabbitMQ).

A fault test like those of ``test_faults.py`` (the same end-of-run check,
:func:`helpers.fleet.assert_every_pair_once` through :func:`helpers.fleet_run`, and one ``RELIABILITY``
line), in a module of its own: its runs are the longest of the fault tests, and as a module apart they
go to another xdist worker than the rest (BENCHMARKS.md, "The suite's wall clock, session 13"). The
long soak variant is marked ``slow`` and runs with ``--soak``.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from evaljobs import store
from helpers import Fleet, assert_all_passed, fleet_run, numbered_catalog, observe

pytestmark = [pytest.mark.redis]

#: A provider per test (the ``sim`` fixture in tests/conftest.py), which worker processes reach through
#: EVALJOBS_SIM_URL.
SIM_OPTIONS = dict(latency=0.2, jitter=0.05)
SIM_PER_TEST = True


@pytest.fixture
def short_leases(tmp_path, monkeypatch) -> Path:
    """A providers file giving the simulated provider 5-second governor leases.

    A SIGKILLed worker never releases its governor permits; they come back when their lease
    runs out (60 s by default). With a kill a second that would park most of the budget on
    dead workers for a minute; production sets ``lease_seconds`` to taste the same way.
    """
    path = tmp_path / "providers.yaml"
    path.write_text("providers:\n  sim:\n    governor: {lease_seconds: 5}\n")
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(path))
    return path


@pytest.mark.postgres
@pytest.mark.parametrize(
    "scenarios, seconds",
    [(100, 150), pytest.param(1000, 1200, marks=pytest.mark.slow)],
    ids=["200-pairs", "soak-2000-pairs"],
)
def test_workers_sigkilled_every_second_lose_and_double_nothing(
    broker_url, pg_url, sim, short_leases, tmp_path, scenarios, seconds
):
    catalog, models = numbered_catalog(scenarios, "killed"), ["sim/a", "sim/b"]
    # Deliberate kills also count against the pairs in flight (see evaljobs.pipeline.crash_counting): far
    # above what a pair meets here, so the test shows that killed work is redone, never given up on.
    # verbose: each provider call is a log line, which is how the test tells a worker at work.
    fleet = Fleet(
        broker_url,
        pg_url,
        tmp_path / "logs",
        count=2,
        threads=4,
        env={"EVALJOBS_MAX_CRASHES": "25"},
        verbose=True,
    )
    with fleet_run(fleet, catalog, models, db=pg_url, broker=broker_url) as run:
        started = last_kill = time.monotonic()
        while store.get_run(run.id).report is None and time.monotonic() - started < seconds:
            time.sleep(0.2)
            # At most one kill a second, each of a worker in the middle of its work.
            if time.monotonic() - last_kill >= 1.0 and fleet.kill_one_that_worked(calls=10):
                last_kill = time.monotonic()
        elapsed = time.monotonic() - started
    assert_all_passed(run.id)
    assert fleet.kills >= 3, "the run finished before the workers were killed: nothing was tested"
    broker = "rabbitmq" if broker_url.startswith("amqp") else "redis"
    observe(f"sigkill-workers-{broker}", kills=fleet.kills, seconds=f"{elapsed:.0f}", **run.observed)
