"""scripts/supervisord.conf, exercised: workers restart after a crash and stop gracefully."""
from __future__ import annotations

import os
import shutil
import signal
import time

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from helpers import wait_until
from helpers.supervisor import BIN, ctl, supervisord, worker_pid

pytestmark = [pytest.mark.redis]


def test_supervisord_restarts_a_killed_worker_and_the_run_completes(redis_url, sqlite_url, tmp_path,
                                                                   monkeypatch, simulated_provider):
    assert shutil.which("supervisord", path=str(BIN)), "supervisor is a test dependency (setup.cfg [test])"
    home = tmp_path / "home"
    home.mkdir()
    lines = ["name: supervised", "scenarios:"]
    for i in range(24):
        lines += [
            f"  - key: s{i}",
            f'    prompt: "[sim: say ok {i}]"',
            f"    expect: {{contains: ['ok {i}']}}",
        ]
    sim = simulated_provider(latency=0.2, export=False)  # exported below, once the supervisor runs
    env = dict(os.environ, EVALJOBS_HOME=str(home), EVALJOBS_BIN=str(BIN / "evaljobs"),
               EVALJOBS_BROKER_URL=redis_url, EVALJOBS_DATABASE_URL=sqlite_url, EVALJOBS_SIM_URL=sim.url,
               EVALJOBS_HEARTBEAT_TIMEOUT_MS="2500", EVALJOBS_MAINTENANCE_CHANCE="250000")
    with supervisord(env):
        assert wait_until(lambda: worker_pid(env) is not None, 20), ctl(env, "status")
        first = worker_pid(env)
        monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
        with Session(db=sqlite_url, broker=redis_url) as session:
            run = store.create_run(loads_catalog("\n".join(lines) + "\n", source="s.yaml"), ["sim/a"],
                                   strategy="fanout")
            session.binding().actors.start_run.send(run.id)
            assert wait_until(lambda: store.get_run(run.id).persisted >= 4, 30)
            os.killpg(first, signal.SIGKILL)  # crash the worker mid-run
            assert wait_until(lambda: (worker_pid(env) or first) != first, 20), ctl(env, "status")
            info = session.wait(run.id, timeout=90, poll=0.5)
        assert info.status == "complete" and info.persisted == 24
        # Graceful stop: SIGTERM through supervisorctl, the worker exits by itself.
        started = time.monotonic()
        out = ctl(env, "stop", "evaljobs-worker")
        assert "stopped" in out, out
        assert time.monotonic() - started < 30
        log = (home / "worker.log").read_text(errors="replace")
        assert "Worker process is ready for action" in log or "ready" in log.lower()
