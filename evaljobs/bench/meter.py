"""CPU seconds and peak memory of processes, and how busy the whole host was, read from /proc (Linux)."""
from __future__ import annotations

import os
import resource
from typing import Callable

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(path: str) -> list[str] | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _cpu_of(path: str) -> float:
    parts = _stat_fields(path)
    if parts is None:
        return 0.0
    return (int(parts[11]) + int(parts[12])) / _TICKS  # utime + stime


def host_cpu() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole host so far, from the first line of /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return (total - idle) / _TICKS, total / _TICKS


def group_pids(pgid: int) -> list[int]:
    """Every live process of process group ``pgid`` (the worker's main process and its children)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parts = _stat_fields(f"/proc/{entry}/stat")
            if parts is not None and int(parts[2]) == pgid:
                pids.append(int(entry))
    return pids


def _hwm_mb(pid: int | str) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _reset_hwm(pid: int | str) -> bool:
    """Reset the kernel's peak-RSS mark (``echo 5 > /proc/PID/clear_refs``) so the next peak is this
    cell's."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


class ProcessMeter:
    """CPU seconds and peak RSS of a set of processes between ``start()`` and ``stop()``.

    ``pids()`` is asked at both ends (a process group may gain children); ``exclude``
    names threads of this process whose CPU is not the workers' (the simulated provider).
    """

    def __init__(self, pids: Callable[[], list[int]] | None = None,
                 exclude_threads: Callable[[], list[int]] | None = None):
        self._pids = pids
        self._exclude = exclude_threads or (lambda: [])
        self._cpu0 = 0.0
        self._reset = False

    def _cpu(self) -> float:
        if self._pids is None:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            own = usage.ru_utime + usage.ru_stime
            return own - sum(_cpu_of(f"/proc/self/task/{tid}/stat") for tid in self._exclude())
        return sum(_cpu_of(f"/proc/{pid}/stat") for pid in self._pids())

    def start(self) -> None:
        targets = ["self"] if self._pids is None else self._pids()
        self._reset = all([_reset_hwm(pid) for pid in targets]) and bool(targets)
        self._cpu0 = self._cpu()

    def stop(self) -> tuple[float, float | None]:
        cpu = self._cpu() - self._cpu0
        if self._pids is None:
            peak = (
                _hwm_mb("self")
                if self._reset
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            )
        else:
            marks = [_hwm_mb(pid) for pid in self._pids()]
            peak = sum(m for m in marks if m is not None) if marks else None
        return round(max(0.0, cpu), 4), (round(peak, 1) if peak is not None else None)

