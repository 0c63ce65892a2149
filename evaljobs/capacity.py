"""How many threads this machine lets one process start: the bound on ``--width``.

Why: a width is a number of real threads (the in-process worker, the ``threads``
strategy). Past what the kernel allows, ``Thread.start`` fails half-way through a
run — ``RuntimeError: can't start new thread``, or a C library aborting the whole
process (exit 134) — after pairs were already taken. The bound is read from the
machine once, before anything starts, so a width too wide is one line instead.

Each limit the kernel applies counts: ``kernel.threads-max``, the cgroup's
``pids.max``, ``RLIMIT_NPROC`` (ignored by the kernel for root), and
``vm.max_map_count`` (a thread's stack and its guard page are two mappings).
Half of the smallest leaves room for the threads of everything else.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path

from evaljobs.errors import UsageError

#: Used when the machine says nothing (no /proc): generous, and far below any kernel's default.
FALLBACK_LIMIT = 4096


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (cgroup: no limit) reads as None


def thread_limit() -> int:
    """The widest ``--width`` this process may ask for (at least 1)."""
    limits = [_read_int("/proc/sys/kernel/threads-max"), _read_int("/sys/fs/cgroup/pids.max")]
    maps = _read_int("/proc/sys/vm/max_map_count")
    limits.append(maps // 2 if maps else None)
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:
        limits.append(soft)
    known = [n for n in limits if n]
    return max(1, min(known) // 2) if known else FALLBACK_LIMIT


def check_width(width: int, label: str = "--width") -> None:
    """Raise :class:`UsageError` (one line) unless ``width`` threads can be started here."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise UsageError(f"{label} must be a whole number of at least 1, not {width!r}")
    limit = thread_limit()
    if width > limit:
        raise UsageError(
            f"{label} {width} is more threads than this machine lets one process start "
            f"(at most {limit}: half its thread, process and memory-map limits); use a smaller width"
        )


def check_workers(threads: int, processes: int) -> None:
    """Raise :class:`UsageError` (one line) unless ``processes`` worker processes of ``threads`` threads each
    can be started here: ``evaljobs worker --processes 100000`` forked hundreds of processes before
    Dramatiq's own start-up failed with a traceback, each process counting against the same limits."""
    check_width(threads, "--threads")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise UsageError(f"--processes must be a whole number of at least 1, not {processes!r}")
    limit = thread_limit()
    if processes * (threads + 1) > limit:  # each process: its consumer threads and its main thread
        raise UsageError(
            f"--processes {processes} × --threads {threads} is more threads than this machine lets "
            f"start (at most {limit}: half its thread, process and memory-map limits); "
            f"use fewer processes or threads"
        )


def thread_start_failed(width: int, exc: BaseException, label: str = "--width") -> UsageError:
    """The one line for a thread the kernel refused anyway (other processes took what was left)."""
    return UsageError(f"{label} {width}: the machine refused to start another thread ({exc}); "
                      f"use a smaller width or stop other work")
