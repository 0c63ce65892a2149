"""Network faults between machines: a worker in a network namespace of its own loses a backend for 20 s.

The worker "machine" (:class:`helpers.netns.Machine`) reaches Redis, PostgreSQL and the provider each
over its own link, in the loopback range only; the servers and this test stay in the root namespace,
where nothing is impaired. The kernel here has no ``sch_netem``, so each link is a userspace relay that
drops or delays packets the way ``tc qdisc … netem loss 100%`` / ``delay 150ms loss 5%`` would (see
``tests/helpers/link_relay.py``). A cut is a black hole (no RST, no ICMP), the harder case for a client:
nothing fails, replies just never come.

Each test ends as every fault test does (:func:`helpers.assert_every_pair_once`: each pair once, one
report, one ``complete`` event), and also counts what the provider was sent on its own (a counting
server): the provider's request count equals the attempts the results record, so no pair was evaluated
twice behind the report's back. Each prints one ``RELIABILITY`` line (``pytest -s … | grep
RELIABILITY``); RELIABILITY.md tabulates them.

The machine, its servers and the end-of-run checks are :mod:`helpers.netns_runs`; the slow link (+300 ms,
5 % loss) is ``test_slow_link.py``, a module of its own so that both run at once on two xdist workers.

RabbitMQ is one of :data:`BACKENDS`: a link named for it on the machine, a ``rabbitmq-server`` of this
module listening on :meth:`Machine.server_host`; when it is the service cut, it is the fleet's broker
(its state, the governor and the run events, on the Redis the machine still reaches).
"""
from __future__ import annotations

import time

import pytest

from evaljobs import store
from helpers import fleet_run, observe
from helpers.netns_runs import (
    BACKENDS,
    FINISH_WITHIN,
    broker_for,
    drained,
    machine_fleet,
    provider_matches_attempts,
    settled,
)
from helpers.workers import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

#: How long a partition lasts (the issue's figure).
PARTITION_SECONDS = 20.0


@pytest.mark.parametrize("service", [pytest.param(name, marks=pytest.mark.rabbitmq) if name == "rabbitmq"
                                     else name for name in BACKENDS])
def test_a_worker_cut_off_from_a_backend_for_20_s_resumes_and_loses_nothing(network, urls, provider, tmp_path,
                                                                            service, request):
    server, catalog = provider
    broker = broker_for(request, urls, "rabbitmq" if service == "rabbitmq" else "redis")
    fleet = machine_fleet(network, urls, broker, tmp_path / "logs")
    with fleet_run(fleet, catalog, ["counted/m"], db=urls["postgres"], broker=broker) as run:
        assert wait_until(lambda: store.get_run(run.id).persisted >= 8, 120), fleet.log_text()
        network.cut(service)
        cut_at = time.monotonic()
        at_cut = store.get_run(run.id).persisted
        time.sleep(PARTITION_SECONDS)  # the fault itself lasts this long; nothing is asserted on time
        network.heal(service)
        healed_at = time.monotonic()
        at_heal = store.get_run(run.id)
        assert at_heal.report is None, "the run finished during the partition: it did not hit the run"
        assert wait_until(lambda: store.get_run(run.id).persisted > at_heal.persisted
                          or store.get_run(run.id).report is not None, FINISH_WITHIN), fleet.log_text()
        resumed_at = time.monotonic()
        assert wait_until(lambda: store.get_run(run.id).report is not None, FINISH_WITHIN), fleet.log_text()
        finished_at = time.monotonic()
        settled(fleet, urls, broker)
    drained(request, urls, broker)
    counted = provider_matches_attempts(run.id, server)
    observe(f"netns-cut-{service}", seconds_cut=f"{healed_at - cut_at:.1f}", persisted_at_cut=at_cut,
            persisted_at_heal=at_heal.persisted, resumed_after_heal=f"{resumed_at - healed_at:.1f}",
            finished_after_heal=f"{finished_at - healed_at:.1f}", **counted, **run.observed)
