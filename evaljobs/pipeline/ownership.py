"""This process's in-process runs: their leases taken, renewed while it lives, given up when it stops.

A run whose pairs live in this process's memory (the embedded broker, or an in-process strategy) is
this process's to finish; ``recover`` elsewhere must leave it alone while this process lives
(:mod:`evaljobs.store.leases`). One keeper thread a process renews every lease it holds every
:data:`~evaljobs.store.leases.RENEW_SECONDS`; it stops when no lease is held.
"""
from __future__ import annotations

import logging
import threading
from typing import Iterable

from evaljobs import store
from evaljobs.errors import UsageError

logger = logging.getLogger("evaljobs.ownership")


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

    def _renew(self) -> None:
        while True:
            with self._lock:
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


def check(run_id: str) -> None:
    """Raise :class:`RunOwned` if another live process evaluates ``run_id`` in its memory."""
    holder = store.leases.live_holder(run_id)
    if holder is not None:
        raise refusal(run_id, holder)


__all__ = ["RunOwned", "check", "hold", "release"]
