"""Invariant 9: listing a run's results or progress never scans a Redis keyspace or a whole table.

SQL: every statement the listing functions issue is captured from peewee's
query log and explained on a populated database (thousands of rows, ANALYZEd,
so the planner has a real choice): no full scan of ``run`` or ``result`` on
SQLite or PostgreSQL.

Redis: MONITOR records every command while `evaljobs show`, `watch`, `status`
and `Session.wait` follow a run worked by a real worker process: none of them
(nor the worker) issues SCAN/KEYS/HSCAN/SSCAN/ZSCAN — nor do the Lua scripts that
run inside Redis (MONITOR reports their commands with client type ``lua``): Dramatiq's
maintenance, which runs ``keys`` on a dead worker's ack sets, is off, and evaljobs'
heartbeat script names the ack sets it hands back (evaljobs/pipeline/heartbeats.py).
"""
from __future__ import annotations

import threading

import pytest
import redis as redis_lib

from evaljobs.pipeline import events
from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.cli import Group
from evaljobs.cli.ops import status as status_command, watch as watch_command
from evaljobs.workers.status import active_runs
from helpers import WorkerProcess, assert_no_full_scans, full_scans, populate

SCANS = {"SCAN", "KEYS", "HSCAN", "SSCAN", "ZSCAN"}


# -- SQL (the populated database and the plan reader are in tests/helpers/database.py) ------------


def test_listing_results_and_progress_uses_indexes_only(db_url):
    db = store.connect(db_url)
    ids, rerun_id = populate()
    running = ids[0]
    calls = {
        "list_results": lambda: store.list_results(running),
        "progress": lambda: store.progress(running),
        "missing_pairs": lambda: store.missing_pairs(running),
        "missing_pairs of a rerun": lambda: store.missing_pairs(rerun_id),
        "is_recorded": lambda: store.is_recorded(running, "s05", "m2"),
        "pair_state": lambda: store.pair_state(running, "s05", "m2"),
        "get_run": lambda: store.get_run(running),
        "list_runs": lambda: store.list_runs(limit=20),
        "list_runs by status": lambda: store.list_runs(limit=50, statuses=["pending", "running"]),
        "expected_pairs": lambda: store.expected_pairs(rerun_id),
        "pair_statuses": lambda: store.pair_statuses(running),
        "status: active runs": lambda: active_runs(),
    }
    results = assert_no_full_scans(db, calls)
    # The calls did their job on the populated database (the plans above are for real work).
    assert len(results["list_results"]) == 49 and results["missing_pairs"] == [("s00", "m1", 0)]
    assert results["progress"]["persisted"] == 49 and results["missing_pairs of a rerun"] == [
        ("s07", "m2", 0)
    ]
    assert len(results["list_runs"]) == 20 and len(results["list_runs by status"]) == 11
    assert len(results["status: active runs"]) == 11 and results["is_recorded"] is True
    assert results["pair_state"][0].id == running and results["pair_state"][1] is True


def test_the_check_catches_a_full_scan(db_url):
    """The detector is not vacuous: a query with no usable index is reported on both backends."""
    db = store.connect(db_url)
    populate(runs=20, idle_runs=2000)
    sql, params = store.ResultRow.select().where(store.ResultRow.output == "needle").sql()
    with db.connection_context():
        assert full_scans(db, sql, params)
        sql, params = store.Run.select().where(store.Run.catalog_name == "big").sql()
        assert full_scans(db, sql, params)


# -- Redis ----------------------------------------------------------------------------------------


class Monitor:
    """Redis MONITOR on a thread; ``commands`` holds what was seen after :meth:`mark`."""

    STOP = "evaljobs-monitor-stop"

    def __init__(self, url: str):
        self.url = url
        self.commands: list[dict] = []
        self.marked = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Monitor":
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def _run(self) -> None:
        client = redis_lib.Redis.from_url(self.url)
        with client.monitor() as monitor:
            self._ready.set()
            while True:
                command = monitor.next_command()
                if self.STOP in command["command"]:
                    break
                self.commands.append(command)
        client.close()

    def stop(self) -> None:
        redis_lib.Redis.from_url(self.url).echo(self.STOP)
        self._thread.join(10)

    def seen(self, prefix: str) -> bool:
        return any(c["command"].startswith(prefix) for c in self.commands)


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.05, jitter=0.02)


@pytest.mark.redis
def test_show_watch_status_and_wait_never_scan_redis(cli, redis_url, sqlite_url, sim, tmp_path, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", sqlite_url)
    monitor = Monitor(redis_url).start()
    probe = redis_lib.Redis.from_url(redis_url)
    probe.scan(0, match="probe-*")  # the monitor does see a scan when one is sent
    probe.close()
    session = Session(db=sqlite_url, broker=redis_url)
    ops = Group(commands={"status": status_command, "watch": watch_command})
    lines = ["name: watched", "scenarios:"] + [
        f'  - key: s{i:02d}\n    prompt: "[sim: say {i}]"\n    expect: {{contains: ["{i}"]}}'
        for i in range(16)]
    catalog = loads_catalog("\n".join(lines) + "\n", source="watched.yaml")
    try:
        worker = WorkerProcess(redis_url, sqlite_url, threads=4, log=tmp_path / "worker.log").start()
        try:
            run = session.submit(catalog, ["sim/a", "sim/b"])
            waited: list[store.RunInfo] = []
            waiter = threading.Thread(
                target=lambda: waited.append(session.wait(run.id, timeout=90, poll=0.5)))
            waiter.start()
            during = cli("status", "--broker", redis_url, command=ops)
            watched = cli("watch", run.id, "--broker", redis_url, "--timeout", "90", command=ops)
            waiter.join(90)
            shown = cli("show", run.id)
            after = cli("status", "--json", "--broker", redis_url, command=ops)
        finally:
            worker.kill()  # the run is over: no need for a graceful stop
    finally:
        session.close()
        monitor.stop()
        events.bind_redis(None)  # later tests follow runs in-process
    assert during.exit_code == 0 and "agents" in during.output, during.output
    log = (tmp_path / "worker.log").read_text()[-2000:]
    assert watched.exit_code == 0 and "verdict:" in watched.output, log
    assert waited and waited[0].report is not None
    assert shown.exit_code == 0 and "s15 × sim/b" in shown.output
    assert after.exit_code == 0 and '"ready": 0' in after.output

    probe_index = next(i for i, c in enumerate(monitor.commands) if c["command"].startswith("SCAN 0"))
    ours = monitor.commands[probe_index + 1:]  # Lua included: no maintenance scan either
    offending = [c["command"] for c in ours if c["command"].split(" ", 1)[0].upper() in SCANS]
    assert offending == []
    # The monitor really watched this traffic: the status reads and the event subscriptions are there.
    assert monitor.seen("LLEN dramatiq:agents") and monitor.seen("HGETALL evaljobs:pools")
    assert monitor.seen(f"SUBSCRIBE evaljobs:run:{run.id}") and monitor.seen("EVALSHA")
