"""A worker "machine" behind links of its own, and the checks its runs end with (tests/network/).

The fixtures here (``machine``, ``servers``, ``rabbitmq``, ``network``, ``urls``, ``provider``) are
registered for every module by ``pytest_plugins`` in tests/conftest.py; the module-scoped ones are one
per test module, so ``test_network_faults.py`` (the partitions) and ``test_slow_link.py`` (+300 ms and
5 % loss) each build their own namespace and servers and can run at once on two pytest-xdist workers
(BENCHMARKS.md, "The suite's wall clock, session 13"). The namespace, its links and how a cut or an
impaired link is made are :mod:`helpers.netns`.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from helpers.netns import Machine, NetnsError

#: The services a worker machine reaches over a link of its own; RabbitMQ is the broker when it is cut.
BACKENDS = ["redis", "postgres", "rabbitmq"]
#: The provider's answer time: slow enough that a run of PAIRS spans the fault.
PROVIDER_LATENCY = 0.3
PAIRS = 60
#: Generous bounds a healed run must finish within, or the test fails (never asserted as timings).
FINISH_WITHIN = 180.0


@pytest.fixture(scope="module")
def machine() -> Iterator[Machine]:
    try:
        built = Machine([*BACKENDS, "provider"])
    except NetnsError as exc:
        pytest.fail(f"cannot build the worker's network namespace: {exc}", pytrace=False)
    yield built
    built.close()


@pytest.fixture(scope="module")
def servers(machine: Machine) -> Iterator[dict]:
    """Redis and PostgreSQL listening where the machine's links lead (and on 127.0.0.1)."""
    from helpers.servers import PostgresServer, RedisServer

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
def rabbitmq(machine: Machine) -> Iterator[Any]:
    """A RabbitMQ node where the machine's "rabbitmq" link leads, started only for the tests that use it."""
    from helpers.servers import RabbitmqServer

    server = RabbitmqServer(host=machine.server_host("rabbitmq"))
    yield server
    server.close()


@pytest.fixture
def network(machine: Machine, servers: dict) -> Iterator[Machine]:
    """The machine with healthy links, restored after the test whatever happened."""
    machine.impair(delay=0, loss=0)
    for service in machine.services:
        machine.heal(service)
    yield machine
    machine.impair(delay=0, loss=0)
    for service in machine.services:
        machine.heal(service)


@pytest.fixture
def urls(servers: dict) -> Iterator[dict]:
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
def provider(network: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             request: pytest.FixtureRequest) -> Iterator[tuple]:
    """A counting provider on the machine's provider link, the catalog of PAIRS scenarios (or the indirect
    parameter's number) that use it."""
    from evaljobs.catalog import load_catalog
    from helpers.counting import CountingServer, counting_files

    server = CountingServer(cap=64, latency=PROVIDER_LATENCY, host=network.server_host("provider"))
    catalog, providers = counting_files(tmp_path, server, scenarios=getattr(request, "param", PAIRS))
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(providers))
    yield server, load_catalog(catalog)
    server.stop()


def broker_for(request: pytest.FixtureRequest, urls: dict, broker: str) -> str:
    """The broker URL the fleet and the test use: the Redis, or this module's RabbitMQ (its queue emptied,
    its state in the Redis: ``EVALJOBS_REDIS_URL``, set before the workers copy the environment)."""
    from evaljobs.config import DEFAULT_QUEUE

    if broker == "redis":
        return urls["redis"]
    server = request.getfixturevalue("rabbitmq")
    server.delete_queues(DEFAULT_QUEUE)
    request.getfixturevalue("monkeypatch").setenv("EVALJOBS_REDIS_URL", urls["redis"])
    return server.url


def machine_fleet(network: Machine, urls: dict, broker: str, logs: Path) -> Any:
    """One worker process (4 threads) inside the machine's namespace."""
    from helpers.fleet import Fleet

    return Fleet(broker, urls["postgres"], logs, count=1, threads=4, prefix=network.command())


def settled(fleet: Any, urls: dict, broker: str) -> None:
    """Every message acked while the worker still runs: none is left in its ack set (Redis), to run again
    at its restart, and no ack was given up ("You've found a bug in Dramatiq": a timed-out ack). On
    RabbitMQ, what the live worker holds is invisible to another connection: :func:`drained` checks
    the queue once the worker has stopped."""
    from helpers.fleet import redis_queue_state
    from helpers.workers import wait_until

    if broker == urls["redis"]:
        assert wait_until(lambda: redis_queue_state(broker)["unacked"] == 0, 60), (
            f"{redis_queue_state(broker)['unacked']} message(s) stay unacked in a live worker\n"
            f"{fleet.log_text()}")
    logs = "".join(path.read_text(errors="replace") for path in fleet.logs.glob("*.log"))
    assert "You've found a bug in Dramatiq" not in logs, logs[-3000:]


def drained(request: pytest.FixtureRequest, urls: dict, broker: str) -> None:
    """After the workers stopped: nothing left on the RabbitMQ queues (a message the worker held unacked
    is ready again once its connection closed), so nothing would run again at a restart."""
    from evaljobs.config import DEFAULT_QUEUE

    if broker != urls["redis"]:
        left = request.getfixturevalue("rabbitmq").ready(DEFAULT_QUEUE)
        assert left == 0, f"{left} message(s) left on RabbitMQ after the run completed"


def provider_matches_attempts(run_id: str, server: Any) -> dict:
    """What the provider counted equals what the results record: no evaluation the report does not show."""
    from evaljobs import store

    attempts = sum(result.attempts for result in store.list_results(run_id))
    sent = server.counts()["requests"]
    assert sent == attempts, f"the provider was sent {sent} requests, the results record {attempts} attempts"
    return {"provider_requests": sent, "recorded_attempts": attempts}
