"""Progress of a run: a live bar on a terminal, one line per result in CI logs, and :func:`follow`.

Two sources feed a :class:`Progress`: run events (fast, but hints that can be
missed while disconnected) and a slow database poll (:meth:`Progress.update`
with :func:`evaljobs.store.progress` numbers, the truth). Each pair must count
once whichever source saw it first. Result events carry ``persisted``, the
run's count of persisted pairs right after their own commit; the barrier
counts under the run's row lock, so those numbers are 1, 2, … N in commit
order and a poll that read P pairs has counted exactly the events numbered
1…P. Progress therefore keeps the last poll's counts and adds only the events
numbered above it.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, TextIO

from evaljobs import clock as clocks
from evaljobs.pipeline import events
from evaljobs import store

#: Seconds between database polls when following a run (the fallback for missed events).
POLL_SECONDS = 5.0

_STATUSES = ("passed", "failed", "errored")


class Progress:
    """Fed run events (``progress(event)``) and polls (``progress.update(numbers)``).

    Counts each pair once, whichever source saw it first (see the module docstring).
    ``clock`` (seconds, monotonic) times the elapsed figure and the ETA; a test passes its own
    to check the estimate without waiting.
    """

    def __init__(self, expected: int, *, stream: TextIO | None = None, tty: bool | None = None,
                 done: int = 0, clock: Callable[[], float] = clocks.monotonic):
        self.expected = expected
        self.clock = clock
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        #: (scenario, model) as the events name them.
        self.seen: set[tuple[str | None, str | None]] = set()
        self.started = clock()
        self.base = done
        self._polled = done
        self._polled_counts = {status: 0 for status in _STATUSES}
        #: Events not (known to be) covered by the last poll: pair -> (persisted number or None, status).
        self._newer: dict[tuple[str | None, str | None], tuple[int | None, str]] = {}
        self._last_draw = 0.0
        self._finished = False
        self._notes: set[str] = set()
        #: Said once when a database read finds results no event announced (events are not reaching us).
        self.catchup_note: str | None = None
        self._lock = threading.Lock()  # in-process strategies call it from several worker threads

    # -- what it shows ---------------------------------------------------------------------
    @property
    def done(self) -> int:
        return self._polled + len(self._newer)

    @property
    def counts(self) -> dict[str, int]:
        counts = dict(self._polled_counts)
        for _, status in self._newer.values():
            counts[status] = counts.get(status, 0) + 1
        return counts

    # -- feeding ---------------------------------------------------------------------------
    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        with self._lock:
            if kind == "result":
                self._result(event)
            elif kind == "complete" and self.tty:
                self.draw(final=True)

    def _result(self, event: dict[str, Any]) -> None:
        pair = (event.get("scenario"), event.get("model"))
        if pair in self.seen:
            return  # the same event twice (e.g. in-process and through Redis)
        self.seen.add(pair)
        number = event.get("persisted")
        number = number if isinstance(number, int) else None
        status = event.get("status") or "errored"
        if number is None or number > self._polled:
            self._newer[pair] = (number, status)
        if self.tty:
            self.draw()
            return
        score = event.get("score") or 0.0
        fault = f"  {event['fault']}" if event.get("fault") else ""
        self._line(f"{status:<7} {pair[0]} × {pair[1]}  score {score:.2f}{fault}")

    def update(self, numbers: dict[str, int]) -> None:
        """Catch up with the database: ``numbers`` as returned by :func:`evaljobs.store.progress`.

        Events numbered at or below the poll's ``persisted`` are already in its counts;
        events without a number were received before this poll's read began (the caller
        reads after handling them), so their commits are in it too.
        """
        with self._lock:
            self._update(numbers)

    def _update(self, numbers: dict[str, int]) -> None:
        persisted = int(numbers.get("persisted", 0))
        if persisted < self._polled:
            return  # an older read than one already applied
        before = self.done
        self.expected = int(numbers.get("expected", self.expected))
        self._polled = persisted
        self._polled_counts = {status: int(numbers.get(status, 0)) for status in _STATUSES}
        self._newer = {pair: (n, s) for pair, (n, s) in self._newer.items()
                       if n is not None and n > persisted}
        caught_up = self.done > before and self.done > self.base + len(self.seen)
        if caught_up and self.catchup_note:
            self._say(self.catchup_note)
        if self.tty:
            self.draw()
        elif caught_up:
            self._line(f"{self.done - before} more result(s) read from the database")

    def note(self, text: str) -> None:
        """Say ``text`` once on its own line (e.g. why nothing moves); the bar resumes below it."""
        with self._lock:
            self._say(text)
            if self.tty:
                self.draw()

    def _say(self, text: str) -> None:
        if text in self._notes or self._finished:
            return
        self._notes.add(text)
        if self.tty and self._last_draw:
            self.stream.write("\n")
        self.stream.write(f"note: {text}\n")
        self.stream.flush()
        self._last_draw = 0.0

    # -- drawing ---------------------------------------------------------------------------
    def _line(self, text: str) -> None:
        width = len(str(self.expected))
        self.stream.write(f"[{self.done:>{width}}/{self.expected}] {text}\n")
        self.stream.flush()

    def draw(self, final: bool = False) -> None:
        if self._finished:
            return
        now = self.clock()
        complete = self.done >= self.expected
        if not final and not complete and now - self._last_draw < 0.05:
            return
        self._last_draw = now
        elapsed = now - self.started
        fraction = min(1.0, self.done / self.expected) if self.expected else 1.0
        bar = "#" * int(fraction * 30)
        fresh = self.done - self.base
        if complete:
            eta = "done"
        elif fresh > 0:
            eta = f"ETA {elapsed * (self.expected - self.done) / fresh:4.1f}s"
        else:  # nothing has finished since we started watching: no rate, so no estimate
            eta = "waiting for the first result"
        c = self.counts
        self.stream.write(f"\r[{bar:<30}] {self.done}/{self.expected}  ✓{c['passed']} ✗{c['failed']} "
                          f"!{c['errored']}  {elapsed:5.1f}s  {eta} ")
        if final or complete:
            self.stream.write("\n")
            self._finished = True
        self.stream.flush()


def follow(run_id: str, *, progress: Progress | None = None,
           on_event: Callable[[dict[str, Any]], None] | None = None, poll: float = POLL_SECONDS,
           timeout: float | None = None, idle: Callable[[], str | None] | None = None) -> store.RunInfo:
    """Follow a run until its report exists (or it is cancelled, or ``timeout`` passes); returns it.

    Woken by the run's events; every ``poll`` seconds (and on ``complete``) it reads
    the run and its progress numbers from the database, which also catches events
    missed while disconnected. Every read is by primary key or the per-run index.
    ``idle`` is asked, at a read that found no new result, why nothing moves (e.g. no
    worker consumes the queue); what it returns is shown once as a note.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    last_done = -1
    with events.Subscription(run_id) as subscription:  # subscribe first: no event falls before the read
        while True:
            run = store.get_run(run_id)
            if progress is not None:
                progress.update(store.progress(run_id))
                if idle is not None and progress.done == last_done and run.report is None:
                    reason = idle()
                    if reason:
                        progress.note(reason)
                last_done = progress.done
            if run.report is not None or run.status in (store.CANCELLED, store.INTERRUPTED):
                # an interrupted run waits for `recover`: say so (RunInfo.gate), do not wait for ever
                return run
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return run
            window = poll if remaining is None else min(poll, remaining)
            until = time.monotonic() + window
            while True:
                left = until - time.monotonic()
                if left <= 0:
                    break
                event = subscription.get(timeout=left)
                if event is None:
                    continue
                if progress is not None:
                    progress(event)
                if on_event is not None:
                    on_event(event)
                if event.get("type") == "complete":
                    break
                if event.get("type") == "storage_failed":
                    # The run cannot move until space is freed: stop here, one line, the run left recoverable.
                    raise store.StorageFailed(str(event.get("reason") or "the database refused a write"))
