"""This process's in-process runs: their leases taken, renewed while it lives, given up when it stops.

A run whose pairs live in this process's memory (the embedded broker, or an in-process strategy) is
this process's to finish; ``recover`` elsewhere must leave it alone while this process lives
(:mod:`evaljobs.store.leases`). One keeper thread a process renews every lease it holds every
:data:`~evaljobs.store.leases.RENEW_SECONDS`; it stops when no lease is held.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from evaljobs import store
from evaljobs.errors import Interrupted, UsageError
from evaljobs.pipeline.strategy_names import QUEUED

logger = logging.getLogger("evaljobs.ownership")

#: How long (ms) a pair already in hand may take to land when a run is interrupted; past it the
#: process exits without it (the pair is missing, and ``recover`` evaluates it again).
STOP_GRACE_MS = 1000


class RunOwned(UsageError):
    """A run another live process is evaluating: nothing was done to it (exit 2)."""


def refusal(run_id: str, holder: store.leases.Holder) -> RunOwned:
    return RunOwned(f"run {run_id} is being evaluated by {holder.describe()}: recover takes it over only "
                    "once that process has ended (wait for its report, or stop it first)")


class _Keeper:
    def __init__(self) -> None:
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def hold(self, run_id: str) -> None:
        """Take ``run_id``'s lease for this process, or raise :class:`RunOwned` naming its live holder."""
        holder = store.leases.claim(run_id)
        if holder is not None:
            raise refusal(run_id, holder)
        with self._lock:
            self._held.add(run_id)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._renew, name="evaljobs-leases", daemon=True)
                self._thread.start()

    def release(self, run_ids: Iterable[str]) -> None:
        ids = [run_id for run_id in run_ids]
        with self._lock:
            ids = [run_id for run_id in ids if run_id in self._held]
            self._held.difference_update(ids)
            self._wake.notify_all()
        if ids:
            try:
                store.leases.release(ids)
            except store.StoreError as exc:  # the lease lapses by itself; a stop must not fail on it
                logger.debug("cannot give up the leases of %s: %s", ", ".join(ids), exc)

    def held(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._held)

    def _renew(self) -> None:
        while True:
            with self._lock:
                if self._held:  # a release while the last round renewed: its notify is gone, end now
                    self._wake.wait(store.leases.RENEW_SECONDS)
                held = set(self._held)
                if not held:
                    self._thread = None
                    return
            try:
                store.leases.renew(held)
            except Exception as exc:  # noqa: BLE001 - a database outage: the next round tries again
                logger.debug("cannot renew the leases of %d runs: %s", len(held), store.redact(str(exc)))


_keeper = _Keeper()


def hold(run_id: str) -> None:
    """This process evaluates ``run_id`` in memory: lease it (or :class:`RunOwned`)."""
    _keeper.hold(run_id)


def release(run_ids: Iterable[str]) -> None:
    """This process no longer evaluates ``run_ids``: give up their leases."""
    _keeper.release(run_ids)


class Held(list[str]):
    """The runs one ``Session`` evaluates in this process's memory: their leases, given up as each ends.

    A run is given up as soon as nothing of it is left here — it finished (its report), failed inside
    the call that evaluated it, or was interrupted (once marked so) — not when the session closes: a
    program that keeps its session open would otherwise make ``recover`` elsewhere refuse the run, and
    its ``evaljobs-leases`` thread renew the lease, for as long as it lives.
    """

    def take(self, run_id: str) -> None:
        hold(run_id)
        self.append(run_id)

    def give_up(self, run_id: str | None) -> None:
        if run_id is not None and run_id in self:
            self[:] = [other for other in self if other != run_id]
            release([run_id])

    def give_up_all(self) -> None:
        ids, self[:] = list(self), []
        release(ids)

    def finished(self, info: store.RunInfo) -> store.RunInfo:
        """``info`` once followed: a run with its report is given up."""
        if info.report is not None:
            self.give_up(info.id)
        return info

    def evaluate(self, run_id: str, inline: Callable[[], store.RunInfo]) -> store.RunInfo:
        """Run ``inline`` (an in-process run to its end), then give ``run_id`` up. An interrupt (SIGINT,
        or a closed output: :class:`BrokenPipeError`) leaves that to :func:`interrupt`, once it marked it."""
        try:
            info = inline()
        except (KeyboardInterrupt, BrokenPipeError):
            raise
        except BaseException:
            self.give_up(run_id)  # its pairs were settled or abandoned inside the call: `recover` resumes it
            raise
        self.give_up(run_id)
        return info


def held() -> frozenset[str]:
    """The runs whose leases this process holds (what its ``evaljobs-leases`` thread renews).

    Empty once every in-process run this process took has ended or been given up: a lease held past
    that is renewed for as long as the process lives (tests/conftest.py fails a test that leaves one).
    """
    return _keeper.held()


def check(run_id: str) -> None:
    """Raise :class:`RunOwned` if another live process evaluates ``run_id`` in its memory."""
    holder = store.leases.live_holder(run_id)
    if holder is not None:
        raise refusal(run_id, holder)


__all__ = ["Held", "RunOwned", "check", "held", "hold", "release"]


def interrupt(run_id: str | None, *, remote: bool, stop: Callable[[], None],
              held: Held | None = None) -> Interrupted:
    """Stop taking new pairs of ``run_id``, keep what finished, and say how to go on (one line).

    The run's pairs are done by this process when its strategy is in-process or its broker is the
    in-process one: ``stop`` stops them (a pair in hand gets :data:`STOP_GRACE_MS` to land), and the
    run is marked ``interrupted`` for ``recover`` to resume. On a ``remote`` broker (Redis, RabbitMQ) the
    workers elsewhere go on with a queued run: only the following stops, and the line says how to
    follow again. ``run_id`` None: interrupted before the run existed. Once marked, the run is given up
    from ``held`` (nothing of it is left in this process: ``recover`` resumes it).
    """
    if run_id is None:
        return Interrupted("interrupted before a run was created: nothing to resume")
    info = store.get_run(run_id)
    if remote and info.strategy in QUEUED:
        return Interrupted(f"stopped following run {run_id} ({info.persisted}/{info.expected} pairs so far); "
                           f"its workers go on: `evaljobs watch {run_id}`")
    stop()
    store.interrupt(run_id)
    if held is not None:
        held.give_up(run_id)
    info = store.get_run(run_id)
    if info.status != store.INTERRUPTED:  # its last pair landed while it stopped: it is finished
        return Interrupted(f"interrupted: run {run_id} finished anyway ({info.status}): "
                           f"`evaljobs show {run_id}`")
    return Interrupted(store.resume_line(info))
