"""RabbitMQ as the broker (``amqp://``): what differs from Redis, on a real rabbitmq-server.

The fan-out, kill -9, lost-messages recovery and poison-pair tests run on both brokers
(tests/pipeline/test_fanout_redis.py, tests/pipeline/test_faults.py, over the ``broker_url`` fixture); here:
the node restarted mid-run, recovery's refusal to guess about messages a live consumer holds, and the
settings that fail closed.
"""
from __future__ import annotations

import time

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.config import DEFAULT_QUEUE, Settings
from evaljobs.errors import ConfigurationError
from evaljobs.pipeline.broker import BrokerError, make_broker
from evaljobs.pipeline.recovery import recover
from evaljobs.redact import redact
from helpers import (
    RETRY_AFTER,
    CommandProcess,
    Fleet,
    WorkerProcess,
    assert_all_passed,
    evaljobs_cli,
    fleet_run,
    numbered_catalog,
    observe,
    retry_after_catalog,
    retry_gap,
    wait_until,
)

pytestmark = [pytest.mark.rabbitmq, pytest.mark.redis]


#: A provider per test (the ``sim`` fixture in tests/conftest.py), which worker processes reach through
#: EVALJOBS_SIM_URL.
SIM_OPTIONS = dict(latency=0.2, jitter=0.05)
SIM_PER_TEST = True


def test_rabbitmq_restarted_mid_run_loses_nothing_and_gives_one_report(rabbitmq_server, amqp_url, sqlite_url,
                                                                      sim, tmp_path):
    """Durable queues, persistent messages: what was queued survives the restart; what a worker held
    unacknowledged is delivered again (a no-op if its result was recorded); the workers reconnect."""
    catalog, models = numbered_catalog(30, "rabbit-restart"), ["sim/a", "sim/b"]
    fleet = Fleet(amqp_url, sqlite_url, tmp_path / "logs", count=2, threads=4)
    recovered: list[str] = []
    with fleet_run(fleet, catalog, models, db=sqlite_url, broker=amqp_url) as run:
        assert wait_until(lambda: store.get_run(run.id).persisted >= 12, 90), fleet.log_text()
        rabbitmq_server.restart()
        at_restart = store.get_run(run.id).persisted
        deadline = time.monotonic() + 120
        # The runbook after a broker incident, as on Redis: `evaljobs recover` until the run ends.
        while not wait_until(lambda: store.get_run(run.id).report is not None, 3):
            out = evaljobs_cli("recover", "--db", sqlite_url, "--broker", amqp_url)
            assert out.returncode == 0, out.stderr
            recovered += [line for line in out.stdout.splitlines() if line != "nothing to recover"]
            assert time.monotonic() < deadline, fleet.log_text()
    assert_all_passed(run.id)
    observe("rabbitmq-restart", persisted_at_restart=at_restart, recover_actions=len(recovered),
            **run.observed)


def test_recover_leaves_pairs_a_live_consumer_may_hold(rabbitmq_server, amqp_url, sqlite_url, sim, tmp_path):
    """RabbitMQ shows no other connection the messages a consumer holds: with a worker on the queue,
    `recover` re-enqueues nothing it cannot see and says why; with none, it re-enqueues the lost pairs."""
    session = Session(db=sqlite_url, broker=amqp_url)
    try:
        run = store.create_run(numbered_catalog(6, "held"), ["sim/a"], strategy="fanout")
        store.mark_running(run.id)  # its start message lost before it ran: every pair missing
        binding = session.binding()
        holder = binding.broker.consume(DEFAULT_QUEUE, prefetch=1, timeout=50)  # a live consumer
        assert next(holder) is None  # pika sends basic.consume on the first fetch (the queue is empty)
        try:
            lines = recover(binding, run.id)
        finally:
            holder.close()
        assert len(lines) == 1 and "consumer(s) of RabbitMQ queue 'agents' may hold them" in lines[0], lines
        assert rabbitmq_server.ready(DEFAULT_QUEUE) == 0  # nothing was re-enqueued
        assert recover(binding, run.id) == [f"{run.id}: re-enqueued 6 of 6 missing pairs"]
        assert recover(binding, run.id) == []  # the pairs are queued now: a healthy run
        with WorkerProcess(amqp_url, sqlite_url, threads=4, log=tmp_path / "w.log"):
            info = session.wait(run.id, timeout=60, poll=0.5)
        assert info.status == "complete" and info.persisted == 6
    finally:
        session.close()


def test_a_rate_limited_pair_goes_back_through_the_delay_queue(amqp_url, sqlite_url, simulated_provider,
                                                                tmp_path):
    """The governor hands a 429'd pair back as a delayed message (RabbitMQ's ``agents.DQ``): it
    reaches the provider again no sooner than Retry-After, as measured by the provider."""
    sim = simulated_provider(latency=0.1, retry_after=RETRY_AFTER)
    session = Session(db=sqlite_url, broker=amqp_url)
    try:
        run = session.submit(loads_catalog(retry_after_catalog(0), source="ra.yaml"), ["sim/a"])
        with WorkerProcess(amqp_url, sqlite_url, threads=2, log=tmp_path / "w.log",
                           env={"EVALJOBS_PERMIT_WAIT": "0.5"}):
            info = session.wait(run.id, timeout=60, poll=0.5)
    finally:
        session.close()
    assert info.status == "complete", (tmp_path / "w.log").read_text()[-3000:]
    gap, _ = retry_gap(sim)
    assert gap >= RETRY_AFTER, f"retried {gap:.3f}s after a 429 with Retry-After: 1"


def test_a_cancelled_run_is_not_evaluated_further(amqp_url, sqlite_url, simulated_provider, tmp_path):
    sim = simulated_provider(latency=0.3)
    session = Session(db=sqlite_url, broker=amqp_url)
    try:
        run = session.submit(numbered_catalog(20, "cancelled"), ["sim/a"])
        with WorkerProcess(amqp_url, sqlite_url, threads=2, log=tmp_path / "w.log"):
            assert wait_until(lambda: store.get_run(run.id).persisted >= 2, 60)
            assert session.cancel(run.id).run.status == "cancelled"
            # every message of the run is taken and dropped: none left ready on the queue
            assert wait_until(lambda: rabbitmq_ready(amqp_url) == 0, 60)
        calls, info = len(sim.calls()), store.get_run(run.id)
    finally:
        session.close()
    assert info.status == "cancelled" and info.report is None
    assert calls < 20 and info.persisted <= calls, (calls, info.persisted)


def rabbitmq_ready(url: str) -> int:
    from evaljobs.pipeline import rabbitmq

    return sum(rabbitmq.ready_counts(url, [DEFAULT_QUEUE]))


def test_an_amqp_broker_without_a_state_redis_is_refused_in_one_line(rabbitmq_server, monkeypatch):
    url = rabbitmq_server.url.replace("guest:guest@", "guest:s3cret-Pa55word@")
    monkeypatch.delenv("EVALJOBS_REDIS_URL", raising=False)
    with pytest.raises(ConfigurationError) as raised:
        Settings.from_env({"EVALJOBS_BROKER_URL": url})
    message = str(raised.value)
    assert "EVALJOBS_REDIS_URL=redis://host:port/db" in message and "\n" not in message
    assert "s3cret-Pa55word" not in message
    with pytest.raises(BrokerError) as made:  # a --broker flag given beside settings without one
        make_broker(url, settings=Settings())
    assert "EVALJOBS_REDIS_URL" in str(made.value) and "s3cret-Pa55word" not in str(made.value)
    out = evaljobs_cli("worker", "--broker", url)
    assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "EVALJOBS_REDIS_URL" in out.stderr and "s3cret-Pa55word" not in out.stderr + out.stdout


def test_a_refused_amqp_login_is_one_line_without_the_password(rabbitmq_server, redis_url):
    url = rabbitmq_server.url.replace("guest:guest@", "guest:s3cret-Pa55word@")
    out = evaljobs_cli("worker", "--broker", url, env={"EVALJOBS_REDIS_URL": redis_url})
    assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "cannot reach the broker at amqp://guest:***@" in out.stderr and "ACCESS_REFUSED" in out.stderr
    assert "s3cret-Pa55word" not in out.stderr + out.stdout


def test_amqp_passwords_are_redacted():
    shown = redact("amqp://evaljobs:s3cret-Pa55word@mq.internal:5672/%2F")
    assert shown == "amqp://evaljobs:***@mq.internal:5672/%2F"
    assert "s3cret" not in redact("amqps://u:s3cret-Pa55word@mq:5671/prod?heartbeat=30")
    with pytest.raises(ConfigurationError) as raised:
        Settings(broker_url="amqp://u:s3cret-Pa55word@mq:5672/", redis_url="http://not-redis")
    assert "EVALJOBS_REDIS_URL" in str(raised.value) and "s3cret" not in str(raised.value)


def test_status_beside_rabbitmq_reads_the_state_redis_and_says_where_queue_depths_are(amqp_url, sqlite_url):
    out = evaljobs_cli("status", "--db", sqlite_url, "--broker", amqp_url)
    assert out.returncode == 0, out.stderr
    assert "RabbitMQ broker: queue depths with `rabbitmqctl list_queues" in out.stdout, out.stdout
    assert "in-process broker" not in out.stdout and "cannot read" not in out.stdout, out.stdout
    assert "QUEUE" not in out.stdout  # no empty table of Redis queues beside RabbitMQ


def test_an_elastic_pool_on_rabbitmq_counts_ready_messages_and_finishes_a_run(
        amqp_url, redis_url, sqlite_url, simulated_provider, tmp_path):
    """A pool's backlog is RabbitMQ's count of ready messages (queue and .DQ); its state is published in
    the state Redis, where `evaljobs status` reads it."""
    import redis as redis_lib

    from evaljobs.workers.status import read_pools

    simulated_provider(latency=0.2)
    session = Session(db=sqlite_url, broker=amqp_url)
    try:
        run = store.create_run(numbered_catalog(9, "pooled"), ["sim/a"], strategy="fanout")
        store.mark_running(run.id)
        assert recover(session.binding(), run.id) == [f"{run.id}: re-enqueued 9 of 9 missing pairs"]
        assert session.binding().broker.backlog([DEFAULT_QUEUE]) == 9  # what the pool grows on
        client = redis_lib.Redis.from_url(redis_url)
        log = tmp_path / "pool.log"
        pool = CommandProcess(amqp_url, sqlite_url, "pool", "--min", "1", "--max", "3", "--idle-seconds", "1",
                              "--broker", amqp_url, "--db", sqlite_url, log=log).start()
        try:
            info = session.wait(run.id, timeout=60, poll=0.5)
            assert read_pools(client), log.read_text()[-2000:]  # published beside RabbitMQ
        finally:
            pool.terminate(15)
            client.close()
    finally:
        session.close()
    assert info.status == "complete" and info.persisted == 9, log.read_text()[-2000:]
