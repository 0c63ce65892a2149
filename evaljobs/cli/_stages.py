"""Progress for long commands that have no per-item events: a line per stage, and a ticking clock.

Why: `catalog convert` of a 20,000-sample file spends most of a minute writing YAML, `db upgrade`
may wait on a long ALTER, `recover` walks many runs — and a command that prints nothing for a
minute looks hung. Each stage says what it is doing when it starts and how long it took; on a
terminal the elapsed seconds tick on the stage's line while it runs. Everything goes to stderr,
so stdout stays the command's data.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, TextIO

__all__ = ["stage", "quiet_stage", "TICK_SECONDS"]

TICK_SECONDS = 0.5


@contextmanager
def stage(text: str, *, stream: TextIO | None = None, tty: bool | None = None) -> Iterator[None]:
    """``text…`` now, ``done in N s`` after; on a terminal the clock ticks meanwhile."""
    out = stream or sys.stderr
    live = out.isatty() if tty is None else tty
    started = time.monotonic()
    out.write(f"{text}…")
    out.flush()
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(TICK_SECONDS):
            out.write(f"\r{text}… {time.monotonic() - started:.0f} s")
            out.flush()

    ticker = threading.Thread(target=tick, name="evaljobs-stage", daemon=True) if live else None
    if ticker is not None:
        ticker.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        stop.set()
        if ticker is not None:
            ticker.join()
        elapsed = time.monotonic() - started
        end = f"done in {elapsed:.1f} s" if ok else f"stopped after {elapsed:.1f} s"
        out.write(f"\r{text}… {end}\n" if live else f" {end}\n")
        out.flush()


@contextmanager
def quiet_stage(text: str) -> Iterator[None]:  # noqa: ARG001 - the same signature as stage, for small work
    """Say nothing: the stand-in for :func:`stage` when the work is too small to report."""
    yield
