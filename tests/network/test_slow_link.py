"""A worker in a network namespace of its own behind a bad link: +300 ms a round trip and 5 % loss.

The worker "machine" (:class:`helpers.netns.Machine`) reaches Redis, PostgreSQL, RabbitMQ and the
provider each over its own link; here every link holds each packet 150 ms and drops 5 %, each way, from
the start (a userspace relay doing what ``tc qdisc … netem delay 150ms loss 5%`` would: see
``tests/helpers/link_relay.py``). The machine, its servers and the end-of-run checks are
:mod:`helpers.netns_runs`; the partitions are ``test_network_faults.py`` (a module of its own, so that
both run at once on two xdist workers: BENCHMARKS.md, "The suite's wall clock, session 13").

The test ends as every fault test does (each pair once, one report, one ``complete`` event) and also
counts what the provider was sent on its own (a counting server): the provider's request count equals the
attempts the results record. It prints one ``RELIABILITY`` line; RELIABILITY.md tabulates them.
"""
from __future__ import annotations

import time

import pytest

from evaljobs import store
from helpers import fleet_run, observe
from helpers import netns_runs as runs
from helpers.workers import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

#: Fewer than the partitions' 60: a pair costs ~9 s of one thread here (a few dozen round trips at +300 ms).
SLOW_LINK_PAIRS = 24


@pytest.mark.parametrize("provider", [SLOW_LINK_PAIRS], indirect=True, ids=[f"{SLOW_LINK_PAIRS}-pairs"])
@pytest.mark.parametrize("broker_name", ["redis", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)])
def test_a_worker_behind_300_ms_and_5_percent_loss_finishes_every_pair_once(network, urls, provider,
                                                                             tmp_path, broker_name, request):
    server, catalog = provider
    broker = runs.broker_for(request, urls, broker_name)
    network.impair(delay=0.15, loss=0.05)  # each way, on every link: +300 ms a round trip
    fleet = runs.machine_fleet(network, urls, broker, tmp_path / "logs")
    started = time.monotonic()
    with fleet_run(fleet, catalog, ["counted/m"], db=urls["postgres"], broker=broker) as run:
        finished = wait_until(lambda: store.get_run(run.id).report is not None, runs.FINISH_WITHIN * 2)
        assert finished, fleet.log_text()
        elapsed = time.monotonic() - started
        runs.settled(fleet, urls, broker)
    runs.drained(request, urls, broker)
    counted = runs.provider_matches_attempts(run.id, server)
    observe(f"netns-latency-loss-{broker_name}", rtt_added_ms=300, loss_each_way="5%",
            seconds=f"{elapsed:.1f}", **counted, **run.observed)
