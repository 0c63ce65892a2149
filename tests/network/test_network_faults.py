"""Network faults between machines: a worker in a network namespace of its own loses a backend, or a bad link.

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

RabbitMQ is one of :data:`BACKENDS`: a link named for it on the machine, a ``rabbitmq-server`` of this
module listening on :meth:`Machine.server_host`; when it is the service cut, it is the fleet's broker
(its state, the governor and the run events, on the Redis the machine still reaches).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from evaljobs import store
from evaljobs.catalog import load_catalog
from evaljobs.config import DEFAULT_QUEUE
from helpers import (
    CountingServer,
    Fleet,
    PostgresServer,
    RabbitmqServer,
    RedisServer,
    counting_files,
    fleet_run,
    observe,
    redis_queue_state,
)
from helpers.netns import Machine, NetnsError
from helpers.workers import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

#: The services a worker machine reaches over a link of its own; RabbitMQ is the broker when it is cut.
BACKENDS = ["redis", "postgres", "rabbitmq"]
#: How long a partition lasts (the issue's figure).
PARTITION_SECONDS = 20.0
#: The provider's answer time: slow enough that a run of PAIRS spans the fault.
PROVIDER_LATENCY = 0.3
PAIRS = 60
#: Fewer on the slow link: a pair costs ~9 s of one thread there (a few dozen round trips at +300 ms).
SLOW_LINK_PAIRS = 24
#: Generous bounds a healed run must finish within, or the test fails (never asserted as timings).
FINISH_WITHIN = 180.0


@pytest.fixture(scope="module")
def machine():
    try:
        built = Machine([*BACKENDS, "provider"])
    except NetnsError as exc:
        pytest.fail(f"cannot build the worker's network namespace: {exc}", pytrace=False)
    yield built
    built.close()


@pytest.fixture(scope="module")
def servers(machine):
    """Redis and PostgreSQL listening where the machine's links lead (and on 127.0.0.1)."""
    redis_server = RedisServer(host=machine.server_host("redis"))
    try:
        postgres = PostgresServer(host=machine.server_host("postgres"))
    except BaseException:
        redis_server.close()
        raise
    yield {"redis": redis_server, "postgres": postgres}
    redis_server.close()
    postgres.close()


@pytest.fixture(scope="module")
def rabbitmq(machine):
    """A RabbitMQ node where the machine's "rabbitmq" link leads, started only for the tests that use it."""
    server = RabbitmqServer(host=machine.server_host("rabbitmq"))
    yield server
    server.close()


@pytest.fixture
def network(machine, servers):
    """The machine with healthy links, restored after the test whatever happened."""
    machine.impair(delay=0, loss=0)
    for service in machine.services:
        machine.heal(service)
    yield machine
    machine.impair(delay=0, loss=0)
    for service in machine.services:
        machine.heal(service)


@pytest.fixture
def urls(servers):
    import redis

    client = redis.Redis.from_url(servers["redis"].url)
    try:
        client.flushall()
    finally:
        client.close()
    name = f"netns_{int(time.time() * 1000) % 10**9}"
    yield {"redis": servers["redis"].url, "postgres": servers["postgres"].create_database(name)}
    servers["postgres"].drop_database(name)


@pytest.fixture
def provider(network, tmp_path, monkeypatch, request):
    """A counting provider on the machine's provider link, the catalog of PAIRS scenarios (or the indirect
    parameter's number) that use it."""
    server = CountingServer(cap=64, latency=PROVIDER_LATENCY, host=network.server_host("provider"))
    catalog, providers = counting_files(tmp_path, server, scenarios=getattr(request, "param", PAIRS))
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(providers))
    yield server, load_catalog(catalog)
    server.stop()


def _broker(request: pytest.FixtureRequest, urls: dict, broker: str) -> str:
    """The broker URL the fleet and the test use: the Redis, or this module's RabbitMQ (its queue emptied,
    its state in the Redis: ``EVALJOBS_REDIS_URL``, set before the workers copy the environment)."""
    if broker == "redis":
        return urls["redis"]
    server = request.getfixturevalue("rabbitmq")
    server.delete_queues(DEFAULT_QUEUE)
    request.getfixturevalue("monkeypatch").setenv("EVALJOBS_REDIS_URL", urls["redis"])
    return server.url


def _fleet(network: Machine, urls: dict, broker: str, logs: Path) -> Fleet:
    return Fleet(broker, urls["postgres"], logs, count=1, threads=4, prefix=network.command())


def _settled(fleet: Fleet, urls: dict, broker: str) -> None:
    """Every message acked while the worker still runs: none is left in its ack set (Redis), to run again
    at its restart, and no ack was given up ("You've found a bug in Dramatiq": a timed-out ack). On
    RabbitMQ, what the live worker holds is invisible to another connection: :func:`_drained` checks
    the queue once the worker has stopped."""
    if broker == urls["redis"]:
        assert wait_until(lambda: redis_queue_state(broker)["unacked"] == 0, 60), (
            f"{redis_queue_state(broker)['unacked']} message(s) stay unacked in a live worker\n"
            f"{fleet.log_text()}")
    logs = "".join(path.read_text(errors="replace") for path in fleet.logs.glob("*.log"))
    assert "You've found a bug in Dramatiq" not in logs, logs[-3000:]


def _drained(request: pytest.FixtureRequest, urls: dict, broker: str) -> None:
    """After the workers stopped: nothing left on the RabbitMQ queues (a message the worker held unacked
    is ready again once its connection closed), so nothing would run again at a restart."""
    if broker != urls["redis"]:
        left = request.getfixturevalue("rabbitmq").ready(DEFAULT_QUEUE)
        assert left == 0, f"{left} message(s) left on RabbitMQ after the run completed"


def _provider_matches_attempts(run_id: str, server: CountingServer) -> dict:
    """What the provider counted equals what the results record: no evaluation the report does not show."""
    attempts = sum(result.attempts for result in store.list_results(run_id))
    sent = server.counts()["requests"]
    assert sent == attempts, f"the provider was sent {sent} requests, the results record {attempts} attempts"
    return {"provider_requests": sent, "recorded_attempts": attempts}


@pytest.mark.parametrize("service", [pytest.param(name, marks=pytest.mark.rabbitmq) if name == "rabbitmq"
                                     else name for name in BACKENDS])
def test_a_worker_cut_off_from_a_backend_for_20_s_resumes_and_loses_nothing(network, urls, provider, tmp_path,
                                                                            service, request):
    server, catalog = provider
    broker = _broker(request, urls, "rabbitmq" if service == "rabbitmq" else "redis")
    fleet = _fleet(network, urls, broker, tmp_path / "logs")
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
        _settled(fleet, urls, broker)
    _drained(request, urls, broker)
    counted = _provider_matches_attempts(run.id, server)
    observe(f"netns-cut-{service}", seconds_cut=f"{healed_at - cut_at:.1f}", persisted_at_cut=at_cut,
            persisted_at_heal=at_heal.persisted, resumed_after_heal=f"{resumed_at - healed_at:.1f}",
            finished_after_heal=f"{finished_at - healed_at:.1f}", **counted, **run.observed)


@pytest.mark.parametrize("provider", [SLOW_LINK_PAIRS], indirect=True, ids=[f"{SLOW_LINK_PAIRS}-pairs"])
@pytest.mark.parametrize("broker_name", ["redis", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)])
def test_a_worker_behind_300_ms_and_5_percent_loss_finishes_every_pair_once(network, urls, provider,
                                                                             tmp_path, broker_name, request):
    server, catalog = provider
    broker = _broker(request, urls, broker_name)
    network.impair(delay=0.15, loss=0.05)  # each way, on every link: +300 ms a round trip
    fleet = _fleet(network, urls, broker, tmp_path / "logs")
    started = time.monotonic()
    with fleet_run(fleet, catalog, ["counted/m"], db=urls["postgres"], broker=broker) as run:
        finished = wait_until(lambda: store.get_run(run.id).report is not None, FINISH_WITHIN * 2)
        assert finished, fleet.log_text()
        elapsed = time.monotonic() - started
        _settled(fleet, urls, broker)
    _drained(request, urls, broker)
    counted = _provider_matches_attempts(run.id, server)
    observe(f"netns-latency-loss-{broker_name}", rtt_added_ms=300, loss_each_way="5%",
            seconds=f"{elapsed:.1f}", **counted, **run.observed)
