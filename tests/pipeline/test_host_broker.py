"""``Session(broker=host_broker)`` declares evaljobs' actors and middleware when it is built.

A host's worker process builds the Session on its own ``RedisBroker`` (docs/hosts.md) and starts
its own Dramatiq worker; it never submits. Its worker must consume evaljobs' queue: a separate
real process, a real Redis, the simulated provider over loopback; the run submitted from this
process is evaluated there and finishes with its report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from dramatiq.brokers.redis import RedisBroker

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from helpers import abc_catalog_yaml

ROOT = Path(__file__).resolve().parents[2]

HOST_WORKER = textwrap.dedent("""
    import sys, threading
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker
    from evaljobs import Session

    broker = RedisBroker(url=sys.argv[1])
    dramatiq.set_broker(broker)
    session = Session(db=sys.argv[2], broker=broker)   # nothing else: no submit, no binding() call
    worker = dramatiq.Worker(broker, worker_threads=2)
    worker.start()
    print("consuming", sorted(broker.get_declared_queues()), flush=True)
    sys.stdin.read()   # until the test closes our stdin
    worker.stop()
""")


def test_a_session_on_a_host_broker_declares_at_construction(redis_url, sqlite_url):
    broker = RedisBroker(url=redis_url)
    try:
        assert "evaluate_scenario" not in broker.actors
        with Session(db=sqlite_url, broker=broker):
            assert {"start_run", "evaluate_scenario", "finalize_run"} <= set(broker.actors)
            assert any(type(m).__name__ == "ContextMiddleware" for m in broker.middleware)
    finally:
        broker.close()


def test_a_host_worker_process_that_only_builds_the_session_consumes_the_queue(
    redis_url, sqlite_url, simulated_provider
):
    sim = simulated_provider(latency=0.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALJOBS_SIM_URL": sim.url}
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_WORKER, redis_url, sqlite_url],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = host.stdout.readline()  # the host worker is up (waits on the process, not on a clock)
        assert line.startswith("consuming") and "agents" in line, line + host.stderr.read()
        with Session(db=sqlite_url, broker=redis_url) as session:
            catalog = loads_catalog(abc_catalog_yaml("host", failing="b"), source="host.yaml")
            info = session.run(catalog, ["sim/a"], strategy="fanout", wait=True, timeout=120)
        assert info.report is not None and info.persisted == 3, info
        assert [r.status for r in store.list_results(info.id)] == ["passed", "failed", "passed"]
    finally:
        host.stdin.close()
        try:
            host.wait(30)
        finally:
            if host.poll() is None:
                host.kill()
                host.wait(10)
