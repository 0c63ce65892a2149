"""supervisord running ``scripts/supervisord.conf`` (the documented way to keep a worker up), and
``supervisorctl`` to ask it about its worker."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from helpers.workers import ROOT

#: The virtualenv's scripts: supervisord, supervisorctl and evaljobs.
BIN = Path(sys.executable).parent
CONF = ROOT / "scripts/supervisord.conf"


def ctl(env: dict[str, str], *args: str) -> str:
    """What ``supervisorctl ARGS`` prints (stdout, then stderr)."""
    out = subprocess.run([str(BIN / "supervisorctl"), "-c", str(CONF), *args],
                         env=env, capture_output=True, text=True, timeout=30)
    return out.stdout + out.stderr


def worker_pid(env: dict[str, str]) -> int | None:
    """The pid of the ``evaljobs-worker`` program's main process, or None while it is not running."""
    text = ctl(env, "pid", "evaljobs-worker").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


@contextmanager
def supervisord(env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """supervisord in its own session with ``env``; SIGTERM at the end (its whole process group SIGKILLed
    if it has not stopped within a minute)."""
    supervisor = subprocess.Popen([str(BIN / "supervisord"), "-c", str(CONF)], env=env, cwd=ROOT,
                                  start_new_session=True)
    try:
        yield supervisor
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(supervisor.pid, signal.SIGKILL)

