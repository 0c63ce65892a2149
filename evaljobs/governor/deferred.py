"""Releases sent later, in a round trip the worker makes anyway (the result event's publish).

Why: at zero latency a pair's release is a Redis round trip of its own right before the pair's
result is published (another one). A thread that turned deferral on (:meth:`Deferred.start`, the
pipeline does it per message) keeps its releases of Redis permits and sends them as raw ``EVALSHA``
commands in the publish's pipeline (:meth:`Deferred.take` / :meth:`Deferred.replies`).

A deferred release still frees its slot soon whatever the thread does next: before the thread's
next acquire (a judge call on the same deployment must not wait for its own pair's slot), at the
message's end (:meth:`Deferred.stop`), and at the latest ``DEFER_MAX`` seconds after the call, by
the governor's lease-renewing thread (a slow tool or scorer must not hold a slot it does not use).
A worker that dies with a release pending loses nothing: the lease expires, like any crashed
holder's.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from evaljobs.governor.budgets import _Outcome
from evaljobs.governor.permits import Permit

if TYPE_CHECKING:
    from evaljobs.governor.redis_store import _RedisStore

#: Seconds a deferred release may wait for a round trip to carry it before it is sent on its own.
DEFER_MAX = 0.05


class _Owner(Protocol):
    def _renewer_add(self, permit: Permit) -> None: ...

    def _renewer_discard(self, permit: Permit) -> None: ...

    def _release_now(self, permit: Permit, outcome: _Outcome) -> None: ...

    def _released(self, permit: Permit, answer: tuple[int, Any] | None) -> None: ...

    def _redis_store(self) -> "_RedisStore | None": ...

    def _store_failed(self, exc: BaseException) -> bool: ...


class Deferred:
    """The releases each thread deferred (thread-local), and how they are sent."""

    def __init__(self, owner: _Owner) -> None:
        self._owner = owner
        self._local = threading.local()
        self._lock = threading.Lock()

    def start(self) -> None:
        """This thread's releases of Redis permits wait for a round trip to carry them."""
        self.flush()
        self._local.on = True

    def stop(self) -> None:
        """Send what is left (on its own round trip) and release at once from now on."""
        self._local.on = False
        self.flush()

    def defer(self, permit: Permit, outcome: _Outcome) -> bool:
        """Keep ``permit``'s release for later; False when this thread does not defer (release now)."""
        if not getattr(self._local, "on", False) or permit.backend != "redis":
            return False
        with self._lock:
            permit._pending = outcome
            permit._renew_at = time.monotonic() + DEFER_MAX
        self._items().append(permit)
        self._owner._renewer_add(permit)  # the renewer sends it at _renew_at if nothing else did
        return True

    def pending(self) -> bool:
        """Whether this thread has releases waiting."""
        return bool(getattr(self._local, "items", None))

    def take(self) -> list[tuple[Permit, _Outcome]]:
        """This thread's pending releases, now the caller's to send (each is taken once)."""
        items, self._local.items = self._items(), []
        taken = []
        for permit in items:
            outcome = self._claim(permit)
            if outcome is not None:
                taken.append((permit, outcome))
        return taken

    def queue(self, pipe: Any) -> list[tuple[Permit, _Outcome]]:
        """Add this thread's pending releases to ``pipe`` as raw commands; hand its replies to
        :meth:`replies`.

        Returns what was queued (empty, with the releases sent on their own, when Redis is down).
        """
        taken = self.take()
        store = self._owner._redis_store()
        if store is None:
            for permit, outcome in taken:
                self._owner._release_now(permit, outcome)
            return []
        for permit, outcome in taken:
            pipe.execute_command(*store.release_command(permit, outcome))
        return taken

    def replies(self, taken: list[tuple[Permit, _Outcome]], replies: list[Any]) -> None:
        """The replies to :meth:`queue`'s commands (exceptions included); a NOSCRIPT release is sent again."""
        store = self._owner._redis_store()
        for (permit, outcome), reply in zip(taken, replies):
            if store is None:
                self._owner._released(permit, None)
                continue
            try:
                answer = store.release_reply(reply)
            except Exception as exc:  # noqa: BLE001 - Redis's errors: the lease expires by itself
                if not self._owner._store_failed(exc):
                    raise
                self._owner._released(permit, None)
                continue
            if answer is None:  # NOSCRIPT: the script is loaded now; send the release again
                self._owner._release_now(permit, outcome)
                continue
            self._owner._released(permit, answer)

    def flush(self) -> None:
        """Send this thread's pending releases now."""
        for permit, outcome in self.take():
            self._owner._release_now(permit, outcome)

    def due(self, permit: Permit) -> None:
        """The renewer's call: ``permit``'s release waited ``DEFER_MAX``; send it if nobody did."""
        outcome = self._claim(permit)
        if outcome is not None:
            self._owner._release_now(permit, outcome)

    def _claim(self, permit: Permit) -> _Outcome | None:
        with self._lock:
            outcome, permit._pending = permit._pending, None
        if outcome is not None:
            self._owner._renewer_discard(permit)
        return outcome

    def _items(self) -> list[Permit]:
        items = getattr(self._local, "items", None)
        if items is None:
            items = self._local.items = []
        return items
