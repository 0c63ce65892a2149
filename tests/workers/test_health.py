"""Health probes: ``evaljobs worker --health-port`` and pools answer /livez and /readyz."""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import pytest
from helpers import Fleet, RedisServer, free_port, pool_thread, wait_until

from evaljobs.workers.health import consumers_check, readiness


def probe(port: int, path: str) -> tuple[int, dict | str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            code, body = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        code, body = exc.code, exc.read().decode()
    except OSError:
        return 0, ""
    return code, (json.loads(body) if body.startswith("{") else body)


@pytest.mark.redis
def test_a_worker_is_ready_once_its_processes_consume_and_not_while_redis_is_down(sqlite_url, tmp_path):
    redis_server = RedisServer()
    port = free_port()
    fleet = Fleet(redis_server.url, sqlite_url, tmp_path / "logs", count=1, threads=2,
                  env={"EVALJOBS_HEALTH_PORT": str(port)})
    fleet.workers[0].args[fleet.workers[0].args.index("--processes") + 1] = "2"
    try:
        fleet.start()
        assert wait_until(lambda: probe(port, "/readyz")[0] == 200, 120), \
            (probe(port, "/readyz"), fleet.log_text())
        _, body = probe(port, "/readyz")
        assert body == {"ready": True, "checks": {"broker": "ok", "database": "ok", "consumers": "ok"}}
        assert probe(port, "/livez") == (200, "ok\n")
        redis_server.kill()
        assert wait_until(lambda: probe(port, "/readyz")[0] == 503, 60)
        _, body = probe(port, "/readyz")
        assert body["ready"] is False and body["checks"]["broker"].startswith("broker redis://127.0.0.1:")
        assert probe(port, "/livez")[0] == 200  # up, not ready: a supervisor must not restart it for this
    finally:
        fleet.stop()
        redis_server.close()


@pytest.mark.redis
def test_a_pool_answers_the_probes(redis_url, sqlite_url):
    port = free_port()
    with pool_thread(redis_url, sqlite_url, health_port=port):
        assert wait_until(lambda: probe(port, "/readyz")[0] == 200, 60), probe(port, "/readyz")
        assert probe(port, "/livez") == (200, "ok\n")


def test_a_stale_or_missing_process_is_not_ready(tmp_path):
    now = time.time()
    (tmp_path / "1.json").write_text(json.dumps({"time": now, "consumers": 2, "consumers_alive": 2}))
    (tmp_path / "2.json").write_text(json.dumps({"time": now - 60, "consumers": 2, "consumers_alive": 2}))
    (tmp_path / "3.json").write_text(json.dumps({"time": now, "consumers": 2, "consumers_alive": 1}))
    assert consumers_check(str(tmp_path), 1)() is None
    assert consumers_check(str(tmp_path), 2)() == "consumers: 1 of 2 worker processes consuming"
    code, body, _ = readiness({"consumers": consumers_check(str(tmp_path), 3), "database": lambda: None})
    assert code == 503 and json.loads(body) == {"ready": False, "checks": {
        "consumers": "consumers: 1 of 3 worker processes consuming", "database": "ok"}}
    assert os.path.exists(tmp_path / "1.json")


class _Waited(BaseException):
    """Raised by the reconnect loop's sleep: the check waited for the database instead of answering."""


@pytest.mark.postgres
def test_readyz_says_the_database_is_down_at_once_not_after_the_reconnect_window(pg_url, postgres_server,
                                                                                  monkeypatch):
    """Found by running the issue's check: with PostgreSQL stopped, /readyz answered after 60 s (the
    reconnect window), so a probe timed out instead of reading why; a scrape lost every metric likewise."""
    from evaljobs import config, store
    from evaljobs.store import connections
    from evaljobs.workers.health import database_check
    from evaljobs.workers.metrics import FleetCollector

    store.connect(pg_url, reconnect_seconds=3600)
    assert database_check() is None  # reached once: an outage from now on is what the window is for
    postgres_server.stop()

    def waited(seconds: float) -> None:
        raise _Waited(seconds)

    monkeypatch.setattr(connections.time, "sleep", waited)
    problem = database_check()
    assert problem is not None and problem.startswith("database: ") and "cannot reach database" in problem
    # no broker: the runs gauge only
    families = list(FleetCollector(config.settings(), broker_url="").collect())
    assert [family.name for family in families] == ["evaljobs_runs"] and families[0].samples == []
