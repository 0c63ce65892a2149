"""Progress display for a run: a live bar on a terminal, one line per result in CI logs."""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    """Fed run events; counts each pair once even if an event arrives twice."""

    def __init__(self, expected: int, *, stream: TextIO | None = None, tty: bool | None = None,
                 done: int = 0):
        self.expected = expected
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.seen: set[tuple[str, str]] = set()
        self.counts = {"passed": 0, "failed": 0, "errored": 0}
        self.base = done
        self.done = done
        self.started = time.monotonic()
        self._last_draw = 0.0

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("type") == "result":
            pair = (event.get("scenario"), event.get("model"))
            if pair in self.seen:
                return
            self.seen.add(pair)
            status = event.get("status", "errored")
            self.counts[status] = self.counts.get(status, 0) + 1
            self.done = self.base + len(self.seen)
            if self.tty:
                self.draw()
            else:
                score = event.get("score") or 0.0
                fault = f"  {event['fault']}" if event.get("fault") else ""
                width = len(str(self.expected))
                self.stream.write(f"[{self.done:>{width}}/{self.expected}] {status:<7} {pair[0]} × {pair[1]}"
                                  f"  score {score:.2f}{fault}\n")
                self.stream.flush()
        elif event.get("type") == "complete" and self.tty:
            self.draw(final=True)

    def draw(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last_draw < 0.05 and self.done < self.expected:
            return
        self._last_draw = now
        elapsed = now - self.started
        fraction = self.done / self.expected if self.expected else 1.0
        bar = "#" * int(fraction * 30)
        eta = (elapsed / fraction - elapsed) if 0 < fraction < 1 else 0.0
        c = self.counts
        self.stream.write(f"\r[{bar:<30}] {self.done}/{self.expected}  ✓{c['passed']} ✗{c['failed']} "
                          f"!{c['errored']}  {elapsed:5.1f}s  ETA {eta:4.1f}s ")
        if final or self.done >= self.expected:
            self.stream.write("\n")
        self.stream.flush()
