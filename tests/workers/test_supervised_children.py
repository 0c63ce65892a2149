"""A SIGKILLed worker main process takes its worker processes with it (real supervisord,
scripts/supervisord.conf).

Before: the children were re-parented and kept consuming after the main process died, beside
the fresh set supervisord started. Now each asks for a parent-death SIGTERM (Dramatiq's graceful stop).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from pathlib import Path

import pytest

from evaljobs.workers import supervision
from helpers import wait_until
from helpers.supervisor import BIN, ctl, supervisord, worker_pid

def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for a reaper that may never come in a container)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.redis
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the worker processes")
def test_worker_processes_exit_when_supervisord_sigkills_the_main_process(redis_url, sqlite_url, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, EVALJOBS_HOME=str(home), EVALJOBS_BIN=str(BIN / "evaljobs"),
               EVALJOBS_BROKER_URL=redis_url, EVALJOBS_DATABASE_URL=sqlite_url)
    with supervisord(env):
        assert wait_until(lambda: worker_pid(env) is not None, 30), ctl(env, "status")
        first = worker_pid(env)
        log = home / "worker.log"
        assert wait_until(
            lambda: log.exists() and "Worker process is ready" in log.read_text(errors="replace"), 60
        )
        kids = children(first)
        assert kids, "Dramatiq's main process forks its worker processes"

        os.kill(first, signal.SIGKILL)  # the main process only: nothing forwards a signal to the children

        assert wait_until(lambda: not any(alive(kid) for kid in kids), 60), \
            f"worker processes {kids} outlived their main process:\n{log.read_text(errors='replace')[-3000:]}"
        assert wait_until(lambda: (worker_pid(env) or first) != first, 30), ctl(env, "status")  # restarted


def _grandchild(force_watchdog: bool, ready) -> None:
    if force_watchdog:
        supervision._prctl_pdeathsig = lambda signum: False
    how = supervision.exit_with_parent(signal.SIGTERM, interval=0.05)
    ready.send(how)
    signal.pause()  # until the parent-death SIGTERM ends this process


def _middle(force_watchdog: bool, ready) -> None:
    multiprocessing.get_context("fork").Process(target=_grandchild, args=(force_watchdog, ready)).start()
    signal.pause()


@pytest.mark.parametrize("force_watchdog", [False, True], ids=["prctl", "watchdog"])
def test_exit_with_parent_both_ways(force_watchdog):
    reader, writer = multiprocessing.get_context("fork").Pipe(duplex=False)
    middle = multiprocessing.get_context("fork").Process(target=_middle, args=(force_watchdog, writer))
    middle.start()
    try:
        assert reader.poll(30)
        assert reader.recv() == ("watchdog" if force_watchdog else "prctl")
        (grandchild,) = children(middle.pid)
        os.kill(middle.pid, signal.SIGKILL)
        middle.join(10)
        assert wait_until(lambda: not alive(grandchild), 30)
    finally:
        if middle.is_alive():
            middle.kill()
