"""Worker processes that do not outlive their main process.

``dramatiq evaljobs.workers.boot`` (and so ``evaljobs worker``) is a main process that forks
the worker processes. Supervisors signal the main process (or its group); but when the main
process alone is SIGKILLed — ``supervisorctl signal KILL``, the OOM killer, a container
runtime's kill of PID 1 — nothing tells its children: they are re-parented to PID 1 (or a
subreaper) and keep consuming, out of reach of the supervisor, which then starts a second
set beside them.

So each worker process asks to be told: on Linux ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` through
ctypes (the kernel sends SIGTERM when the parent dies); elsewhere a daemon thread watches
``os.getppid()``. SIGTERM is Dramatiq's graceful stop: the messages in progress finish and the
unstarted ones go back to the queue — the same as ``supervisorctl stop``. A parent that died
before the request was made (a race at boot) is caught by comparing the parent pid with the
one ``multiprocessing`` recorded.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading

#: linux/prctl.h
PR_SET_PDEATHSIG = 1
#: Seconds between two looks at the parent pid, where prctl is not available.
WATCH_INTERVAL = 1.0


def _expected_parent() -> int | None:
    parent = multiprocessing.parent_process()  # None in a process not started by multiprocessing
    return parent.pid if parent is not None else None


def _prctl_pdeathsig(signum: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int, signum: int, interval: float) -> None:
    event = threading.Event()
    while not event.wait(interval):
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)
            return


def exit_with_parent(signum: int = signal.SIGTERM, *, interval: float = WATCH_INTERVAL) -> str:
    """Have ``signum`` sent to this process when its parent dies; returns how ("prctl" or "watchdog").

    Returns "none" in a process that multiprocessing did not start (nothing to watch).
    """
    parent = _expected_parent()
    if parent is None:
        return "none"
    how = "prctl" if _prctl_pdeathsig(signum) else "watchdog"
    if how == "watchdog":
        threading.Thread(target=_watch, args=(parent, signum, interval), name="evaljobs-parent-watch",
                         daemon=True).start()
    if os.getppid() != parent:  # the parent died before we asked: nobody will tell us now
        os.kill(os.getpid(), signum)
    return how
