"""``--log-format json``: one JSON object a line from worker, pool and view, naming run and pair, redacted."""
from __future__ import annotations

import json
import logging
import sys

import pytest
from helpers.paths import CHILD_PYTHONPATH
from helpers import Fleet, Viewer, fleet_run, numbered_catalog

from evaljobs import store
from evaljobs.workers.logs import JsonFormatter, LogContext, _work, pair_of

KEYS = {"time", "level", "logger", "message", "run", "pair", "worker", "thread"}


def _lines(text: str) -> list[dict]:
    """Every non-empty line, each of which must be one JSON object."""
    out = []
    for line in text.splitlines():
        if line.strip():
            try:
                entry = json.loads(line)
            except ValueError:
                raise AssertionError(f"not a JSON line: {line!r}") from None
            assert isinstance(entry, dict) and KEYS <= set(entry), line
            out.append(entry)
    return out


def test_a_line_is_one_redacted_json_object_with_the_pair_it_was_logged_for():
    record = logging.LogRecord("evaljobs.test", logging.WARNING, __file__, 1,
                               "cannot reach %s", ("redis://:hunter2@cache.internal:6379/0",), None)
    token = _work.set(("run-1", "s1/sim/a"))
    try:
        entry = json.loads(JsonFormatter().format(record))
    finally:
        _work.reset(token)
    assert entry["message"] == "cannot reach redis://:***@cache.internal:6379/0"
    assert (entry["level"], entry["logger"]) == ("WARNING", "evaljobs.test")
    assert (entry["run"], entry["pair"]) == ("run-1", "s1/sim/a")
    said = "login with password=" + "hunter2" + " rejected"  # the traceback's source line shows no secret
    try:
        raise RuntimeError(said)
    except RuntimeError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    entry = json.loads(JsonFormatter().format(record))
    assert "hunter2" not in json.dumps(entry) and "RuntimeError" in entry["exception"]
    assert (entry["run"], entry["pair"]) == (None, None)


def test_the_pair_comes_from_the_actor_arguments():
    assert pair_of("evaluate_scenario", ("r1", "s1", "sim/a")) == ("r1", "s1/sim/a")
    assert pair_of("evaluate_scenario", ("r1", "s1", "sim/a", 2)) == ("r1", "s1/sim/a#2")
    assert pair_of("start_run", ("r1",)) == ("r1", None)
    assert pair_of("finalize_run", ()) == (None, None)
    assert LogContext.after_skip_message is LogContext.after_process_message


@pytest.mark.redis
def test_a_worker_logs_json_lines_naming_run_and_pair(redis_url, sqlite_url, tmp_path, simulated_provider):
    simulated_provider(latency=0.01)
    fleet = Fleet(redis_url, sqlite_url, tmp_path / "logs", count=1, threads=2,
                  env={"EVALJOBS_LOG_FORMAT": "json"}, verbose=True)
    catalog = numbered_catalog(3, "json-logs")
    with fleet_run(fleet, catalog, ["sim/a"], db=sqlite_url, broker=redis_url) as run:
        assert run.session.wait(run.id, timeout=120, poll=0.5).status == "complete"
    entries = _lines("".join(path.read_text() for path in sorted(fleet.logs.glob("*.log"))))
    assert any("ready for action" in e["message"] for e in entries)
    calls = [e for e in entries if e["message"].startswith("provider call: POST")]
    assert calls and all(e["run"] == run.id and e["pair"].endswith("/sim/a") for e in calls), calls[:3]
    assert {e["pair"] for e in calls} == {"s0000/sim/a", "s0001/sim/a", "s0002/sim/a"}
    assert len(store.list_results(run.id)) == 3


@pytest.mark.redis
def test_the_viewer_logs_json(redis_url, sqlite_url, tmp_path):
    store.connect(sqlite_url)  # the viewer reads an existing database; it creates none
    viewer = Viewer(sqlite_url, redis_url, tmp_path / "view.log", extra=["--log-format", "json"])
    viewer.close()
    entries = _lines((tmp_path / "view.log").read_text())
    assert any(e["message"].startswith("evaljobs view: http://") for e in entries)


@pytest.mark.redis
def test_a_pool_logs_json(redis_url, sqlite_url, tmp_path):
    import os
    import signal
    import subprocess

    from helpers import ROOT, wait_until

    log = tmp_path / "pool.log"
    env = dict(os.environ, PYTHONPATH=CHILD_PYTHONPATH)
    with log.open("wb") as out:
        argv = [sys.executable, "-m", "evaljobs", "pool", "--broker", redis_url, "--db", sqlite_url,
                "--min", "1", "--max", "2", "--log-format", "json"]
        pool = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            assert wait_until(lambda: "members on" in log.read_text(), 60), log.read_text()
        finally:
            pool.send_signal(signal.SIGTERM)
            pool.wait(30)
    entries = _lines(log.read_text())
    assert any(e["logger"] == "evaljobs.workers.serve" and "members on" in e["message"] for e in entries)


def test_a_worker_whose_redis_stops_logs_only_json(sqlite_url, tmp_path):
    """With Redis stopped, a JSON worker printed plain-text tracebacks (``_Held.__del__ …
    AttributeError``, Python's "Exception ignored in") between its JSON lines (issue 40.17d)."""
    import os
    import signal
    import subprocess

    from helpers import ROOT, RedisServer, wait_until

    log = tmp_path / "worker.log"
    env = dict(os.environ, PYTHONPATH=CHILD_PYTHONPATH)
    with RedisServer() as redis_server, log.open("wb") as out:
        argv = [sys.executable, "-m", "evaljobs", "worker", "--broker", redis_server.url, "--db", sqlite_url,
                "--processes", "1", "--threads", "2", "--log-format", "json"]
        worker = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            assert wait_until(lambda: "ready for action" in log.read_text(), 60), log.read_text()
            redis_server.stop()
            # two rounds of reconnecting consumers: each round met the broken finalizer before the fix
            assert wait_until(lambda: log.read_text().count("Restarting consumer") >= 4, 60), log.read_text()
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(30)
    entries = _lines(log.read_text())
    assert any("connection error" in e["message"] for e in entries)
