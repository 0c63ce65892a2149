"""The governor itself: admission with waiting, releases, the Redis-down fallback, stats."""
from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from evaljobs.network import walls
from evaljobs.catalog.modelspec import ModelSpec, ProvidersConfig
from evaljobs.governor.budgets import (
    LANES,
    POLL_MAX,
    POLL_MIN,
    SLEEP_CAP,
    BudgetConfig,
    Busy,
    Learned,
    LearnedStore,
    _Answer,
    _check_budget,
    _DEFAULT_CONFIG,
    _Outcome,
    budget_key,
    start_of,
)
from evaljobs.governor.deferred import Deferred
from evaljobs.governor.local_store import _LocalStore
from evaljobs.governor.permits import Permit, _Renewer

if TYPE_CHECKING:
    from evaljobs.governor.redis_store import _RedisStore

log = logging.getLogger("evaljobs.governor")

#: What a store may raise that means "unreachable, use the local fallback": OSError, and Redis's own
#: errors once a governor with Redis exists (:func:`_redis_store`; the in-process default never
#: imports the Redis client: start-up time).
_STORE_ERRORS: tuple[type[BaseException], ...] = (OSError,)

#: The backend of a permit for an ``unbounded`` budget: no store holds it.
UNBOUNDED = "unbounded"

#: Seconds between two saves of a growing limit to the learned store (a decrease is saved at once).
SAVE_EVERY = 1.0


@dataclass
class Prefetch:
    """A permit asked for ahead of the call, in another client's round trip (:meth:`Governor.prefetch`).

    ``command``: the raw Redis command to send; its reply goes to :meth:`Governor.prefetched`.
    """

    budget: str
    lane: str
    lease_id: str
    config: BudgetConfig
    start: Learned
    started: float
    seen: int
    command: tuple[Any, ...]
    store: Any = None
    answer: _Answer | None = None
    permit: Permit | None = None


class Governor:
    """Shared provider budgets. Thread-safe; create one per process and share it.

    ``redis_url`` None: a local, per-process governor only. ``clock`` (tests):
    seconds as a float; it replaces the Redis server clock in the scripts (so all
    governors sharing a budget must share it) and times the local store.
    ``reconnect_after``: seconds on the local fallback before Redis is tried again.
    ``learned``: where what a budget learned (its limit after 429s) is also kept, so the next
    run starts there even without Redis (the pipeline binds the run's database).
    """

    def __init__(self, redis_url: str | None, *, namespace: str = "evaljobs:gov",
                 clock: Callable[[], float] | None = None, reconnect_after: float = 30.0,
                 learned: LearnedStore | None = None):
        self._local = _LocalStore(clock or time.monotonic)
        #: Where what a budget learned is kept beyond this process besides Redis (the database).
        self._learned_store = learned
        self._starts: dict[str, Learned | None] = {}
        self._saved: dict[str, Learned] = {}
        self._unsaved: dict[str, Learned] = {}
        self._last_save: dict[str, float] = {}
        self._redis = _redis_store(redis_url, namespace, clock) if redis_url else None
        self._configs: dict[str, BudgetConfig] = {}
        #: Deployment budgets configured by :meth:`budget_for`, by budget key.
        self._deployments: dict[str, BudgetConfig] = {}
        self._reconnect_after = reconnect_after
        self._lock = threading.Lock()
        self._down_until: float | None = None
        self._renewer = _Renewer()
        # Slots freed in this process so far, per budget (releases, a grown limit, cancelled waits).
        # A waiter told it is `ahead` slots from its turn sleeps until that many more were freed here:
        # only the waiter whose turn came is woken, not every waiting thread (a herd of Redis round
        # trips on each release delays the one that matters). Releases in other processes are seen
        # at the next poll.
        self._wakeup = threading.Lock()
        self._freed: dict[str, int] = {}
        self._sleepers: dict[str, list[tuple[int, int, threading.Event]]] = {}
        self._sleeper_ids = itertools.count()
        #: This thread's prefetched permit or place in line (:meth:`prefetch`), for its next acquire.
        self._early = threading.local()
        #: Releases this thread keeps for a round trip the worker makes anyway (:mod:`~.deferred`).
        self.deferred = Deferred(self)

    def __repr__(self) -> str:
        where = self._redis.location if self._redis else "local"
        return f"<Governor {where} backend={self.backend}>"

    @property
    def backend(self) -> str:
        """Where new permits come from now: ``"redis"``, or ``"local"`` (no Redis, or it is down)."""
        return self._current().name

    def configure(self, budget: str, config: BudgetConfig) -> None:
        """Set how ``budget`` behaves in this process (sent with every call: Redis needs no setup)."""
        _check_budget(budget)
        if not isinstance(config, BudgetConfig):
            raise TypeError(f"configure({budget!r}, ...) needs a BudgetConfig, not {type(config).__name__}")
        with self._lock:
            self._configs[budget] = config

    def budget_for(self, providers: ProvidersConfig, spec: ModelSpec) -> str:
        """The budget of ``spec``'s deployment, configured from its provider entry on first use.

        Why here: every caller of the governor (the model under test, the judge) needs a
        deployment's budget name *and* its configuration in force, and building a
        ``BudgetConfig`` per call is waste; this keeps one per budget for this governor.
        """
        config = providers.get(spec.provider)
        budget = budget_key(config.name, spec.model, config.governor)
        wanted = BudgetConfig.from_dict(config.governor,
                                        source=f"{providers.source}: provider '{config.name}' governor")
        if self._deployments.get(budget) != wanted:
            self.configure(budget, wanted)
            self._deployments[budget] = wanted
        return budget

    def config(self, budget: str) -> BudgetConfig:
        """The configuration of ``budget`` (defaults when it was never configured)."""
        return self._configs.get(budget) or _DEFAULT_CONFIG

    def acquire(self, budget: str, lane: str = "bulk", *, max_wait: float = 2.0, tokens: int = 0,
                keep_alive: bool = True) -> Permit:
        """A permit for one call against ``budget``, waiting at most ``max_wait`` seconds, else ``Busy``.

        ``tokens``: the call's expected tokens, for a ``tpm`` window (0: the moving average).
        ``keep_alive``: renew the lease in the background until the permit is released.
        """
        _check_budget(budget)
        if lane not in LANES:
            raise ValueError(f"governor lane must be one of {', '.join(LANES)}, not {lane!r}")
        if not isinstance(max_wait, (int, float)) or not max_wait >= 0:
            raise ValueError(f"governor max_wait must be a number of seconds >= 0, not {max_wait!r}")
        config = self.config(budget)
        if config.unbounded:  # nothing to enforce: a permit that touches no store
            return Permit(
                self, UNBOUNDED, budget, lane, uuid.uuid4().hex, time.time(), 0, int(tokens), config, 0.0
            )
        self.deferred.flush()  # this thread's earlier calls free their slots before it takes another
        early = self._take_early(budget, lane) if not tokens else None
        if early is not None and early.permit is not None:  # granted in the message's first round trip
            if not keep_alive:
                self._renewer.discard(early.permit)
            return early.permit
        start = early.start if early else start_of(config, self._learned(budget))
        lease_id = early.lease_id if early else uuid.uuid4().hex
        started = early.started if early else time.monotonic()
        # Never past the pair's deadline (the caller's thread), whatever max_wait says.
        deadline = started + walls.remaining(float(max_wait))
        backoff = POLL_MIN
        queued_in: _RedisStore | _LocalStore | None = None
        permit: Permit | None = None
        try:
            while True:
                waited_ms = (time.monotonic() - started) * 1000.0
                if early is not None:  # a place in line taken in the message's first round trip
                    store, answer, seen, early = early.store, early.answer, early.seen, None
                    assert answer is not None  # prefetched() keeps a prefetch only once answered
                else:
                    with self._wakeup:
                        seen = self._freed.get(budget, 0)
                    store, answer = self._attempt(
                        budget, lane, lease_id, config, int(tokens), waited_ms, start
                    )
                if queued_in is not None and queued_in is not store:
                    self._cancel(queued_in, budget, lane, lease_id)
                    queued_in = None
                if answer.granted:
                    permit = Permit(self, store.name, budget, lane, lease_id, answer.now, answer.epoch,
                                    answer.tokens, config, waited_ms / 1000.0, start)
                    if keep_alive:
                        self._renewer.add(permit)
                    return permit
                queued_in = store
                remaining = deadline - time.monotonic()
                exact = answer.reason != "limit"  # a pause or a window ends at a known time
                if remaining <= 0 or (exact and answer.retry_in > remaining):
                    raise Busy(budget, answer.retry_in, answer.reason)
                if exact:
                    pause, turn = answer.retry_in, 1
                else:
                    # Poll (for releases in other processes) often at the head of the line (about
                    # four times per expected wait), and about twice per expected wait further back.
                    turn = max(1, answer.ahead)
                    pause = backoff * (0.5 + random.random())
                    if turn > 1:
                        pause = max(pause, min(answer.retry_in / 2, SLEEP_CAP))
                    else:
                        pause = min(pause, max(POLL_MIN, answer.retry_in / 4))
                    backoff = min(backoff * 2, POLL_MAX)
                self._sleep(budget, seen + turn, max(0.0, min(pause, remaining, SLEEP_CAP)))
        finally:
            if permit is None and queued_in is not None:
                self._cancel(queued_in, budget, lane, lease_id)
                self._wake(budget)

    def prefetch(self, budget: str, lane: str = "bulk") -> Prefetch | None:
        """Ask for this thread's next permit of ``budget`` in a round trip another client makes anyway.

        Why: at zero latency a pair's Redis round trips are a large share of its cost; the worker's
        first one (the crash counter's) can carry the permit's acquire. Returns None when there is
        nothing to ask Redis (an unbounded budget, no Redis, Redis down). The caller sends
        ``command`` on a client of the governor's Redis and hands the reply to :meth:`prefetched`;
        the thread's next :meth:`acquire` of ``budget`` in ``lane`` (without ``tokens``) then starts
        from it; :meth:`drop_prefetch` gives back one that was not used.
        """
        _check_budget(budget)
        config = self.config(budget)
        store = self._current()
        if config.unbounded or lane not in LANES or store is not self._redis or self._redis is None:
            return None
        start = start_of(config, self._learned(budget))
        lease_id = uuid.uuid4().hex
        with self._wakeup:
            seen = self._freed.get(budget, 0)
        command = self._redis.acquire_command(budget, lane, lease_id, config, 0, start)
        return Prefetch(budget, lane, lease_id, config, start, time.monotonic(), seen, command)

    def prefetched(self, prefetch: Prefetch, reply: Any) -> None:
        """The reply to ``prefetch.command``: keep the permit (or place in line) for this thread."""
        self.drop_prefetch()
        store = self._redis
        if store is None:
            return
        try:
            answer = store.acquire_reply(reply)
        except _STORE_ERRORS as exc:
            self._redis_failed(exc)
            return
        if answer is None:  # NOSCRIPT: the script is loaded now; the acquire asks again
            return
        self._redis_ok()
        prefetch.store, prefetch.answer = store, answer
        if answer.granted:
            prefetch.permit = Permit(
                self,
                store.name,
                prefetch.budget,
                prefetch.lane,
                prefetch.lease_id,
                answer.now,
                answer.epoch,
                answer.tokens,
                prefetch.config,
                0.0,
                prefetch.start,
            )
            self._renewer.add(prefetch.permit)
        self._early.value = prefetch

    def drop_prefetch(self) -> None:
        """Give back this thread's prefetched permit (or place in line) if no acquire used it."""
        early = getattr(self._early, "value", None)
        if early is None:
            return
        self._early.value = None
        if early.permit is not None:
            early.permit.release(failed=True)  # unused: neither grows nor shrinks the limit
        elif early.store is not None:
            self._cancel(early.store, early.budget, early.lane, early.lease_id)
            self._wake(early.budget)

    def _take_early(self, budget: str, lane: str) -> Prefetch | None:
        early = getattr(self._early, "value", None)
        if early is None or early.budget != budget or early.lane != lane:
            return None
        self._early.value = None
        return early

    def stats(self) -> list[dict[str, Any]]:
        """One row per known budget (a set in Redis, never a key scan).

        Keys: budget, backend, limit, in_flight (and by lane), waiting, admitted,
        rate_limited, mean_wait_ms, max_wait_ms, paused_for (seconds).
        """
        store = self._current()
        if store is self._redis:
            try:
                rows = store.stats()
            except _STORE_ERRORS as exc:
                self._redis_failed(exc)
            else:
                self._redis_ok()
                return rows
        return self._local.stats()

    def close(self) -> None:
        """Keep what was learned, stop the lease renewer and close Redis (held permits then expire)."""
        for budget in list(self._unsaved):
            self._save(budget, force=True)
        self._renewer.stop()
        if self._redis is not None:
            self._redis.close()

    # -- internals

    def _current(self) -> _RedisStore | _LocalStore:
        if self._redis is None:
            return self._local
        with self._lock:
            if self._down_until is not None and time.monotonic() < self._down_until:
                return self._local
        return self._redis

    def _learned(self, budget: str) -> Learned | None:
        """What ``budget`` learned in an earlier run (read once per process from the learned store)."""
        if budget in self._starts:
            return self._starts[budget]
        learned = None
        if self._learned_store is not None:
            try:
                learned = self._learned_store.load(budget)
            except Exception as exc:  # noqa: BLE001 - best effort: start as if nothing was learned
                log.warning("governor: could not read what budget %r learned (%s: %s); starting afresh",
                            budget, type(exc).__name__, exc)
        with self._lock:
            self._starts.setdefault(budget, learned)
            if learned is not None:
                self._saved.setdefault(budget, learned)
            return self._starts[budget]

    def _learn(self, budget: str, state: Learned, config: BudgetConfig) -> None:
        """Note the state after a release; a decrease is kept at once, growth at most once a second.

        A budget that learned nothing (at its ceiling, no capacity seen) writes nothing: no database
        write on a provider call's path, and a later, higher ceiling is not capped by a stale row.
        """
        if self._learned_store is None:
            return
        with self._lock:
            saved = self._saved.get(budget)
            if saved is None and state.hold == 0 and state.limit >= config.ceiling:
                return
            if saved == state:
                self._unsaved.pop(budget, None)
                return
            self._unsaved[budget] = state
            urgent = saved is None or state.limit < saved.limit or state.hold != saved.hold
            due = time.monotonic() - self._last_save.get(budget, -SAVE_EVERY) >= SAVE_EVERY
        if urgent or due:
            self._save(budget)

    def _save(self, budget: str, *, force: bool = False) -> None:
        with self._lock:
            state = self._unsaved.pop(budget, None)
            if state is None:
                return
            self._saved[budget] = state
            self._last_save[budget] = time.monotonic()
        try:
            self._learned_store.save(budget, state)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - best effort: Redis (if any) still has it
            log.warning("governor: could not keep what budget %r learned (%s: %s)", budget,
                        type(exc).__name__, exc)

    def _attempt(self, budget: str, lane: str, lease_id: str, config: BudgetConfig, tokens: int,
                 waited_ms: float, start: Learned) -> tuple[_RedisStore | _LocalStore, _Answer]:
        store = self._current()
        if store is self._redis:
            try:
                answer = store.try_acquire(budget, lane, lease_id, config, tokens, waited_ms, start)
            except _STORE_ERRORS as exc:
                self._redis_failed(exc)
            else:
                self._redis_ok()
                return store, answer
        return self._local, self._local.try_acquire(budget, lane, lease_id, config, tokens, waited_ms, start)

    def _cancel(self, store: _RedisStore | _LocalStore, budget: str, lane: str, lease_id: str) -> None:
        try:
            store.cancel_wait(budget, lane, lease_id)
        except _STORE_ERRORS as exc:  # the queue entry expires within WAITER_TTL anyway
            self._redis_failed(exc)

    def _on_permit_store(self, permit: Permit, operation: Callable[[Any], Any]) -> Any:
        """``operation(store)`` on the store holding ``permit``'s lease; None when that store is down."""
        if permit.backend == UNBOUNDED:
            return None
        if permit.backend == "local":
            return operation(self._local)
        if self._current() is not self._redis:
            return None  # Redis is down: the lease expires there by itself
        try:
            return operation(self._redis)
        except _STORE_ERRORS as exc:
            self._redis_failed(exc)
            return None

    def _release(self, permit: Permit, outcome: _Outcome) -> None:
        if permit.backend == UNBOUNDED:
            return
        if not self.deferred.defer(permit, outcome):
            self._release_now(permit, outcome)

    def _release_now(self, permit: Permit, outcome: _Outcome) -> None:
        self._renewer.discard(permit)
        self._released(permit, self._on_permit_store(permit, lambda store: store.release(permit, outcome)))

    def _released(self, permit: Permit, answer: tuple[int, Learned] | None) -> None:
        """After a release (``answer``: what the store said; None when it could not be told)."""
        freed = answer[0] if answer else 0
        self._wake(permit.budget, max(1, freed))  # unknown (store down): wake the next waiter anyway
        if answer:
            self._learn(permit.budget, answer[1], permit._config)

    def _due(self, permit: Permit) -> None:
        self.deferred.due(permit)

    def _renewer_add(self, permit: Permit) -> None:
        self._renewer.add(permit)

    def _renewer_discard(self, permit: Permit) -> None:
        self._renewer.discard(permit)

    def _redis_store(self) -> "_RedisStore | None":
        return self._redis if self._redis is not None and self._current() is self._redis else None

    def _store_failed(self, exc: BaseException) -> bool:
        if not isinstance(exc, _STORE_ERRORS):
            return False
        self._redis_failed(exc)
        return True

    def _wake(self, budget: str, slots: int = 1) -> None:
        """``slots`` of ``budget`` were freed in this process: wake the waiters whose turn that is."""
        with self._wakeup:
            freed = self._freed[budget] = self._freed.get(budget, 0) + slots
            sleepers = self._sleepers.get(budget)
            while sleepers and sleepers[0][0] <= freed:
                heapq.heappop(sleepers)[2].set()

    def _sleep(self, budget: str, until_freed: int, timeout: float) -> None:
        """Sleep until ``until_freed`` slots of ``budget`` were freed in this process, or ``timeout`` s."""
        with self._wakeup:
            if self._freed.get(budget, 0) >= until_freed:
                return
            entry = (until_freed, next(self._sleeper_ids), threading.Event())
            heapq.heappush(self._sleepers.setdefault(budget, []), entry)
        if not entry[2].wait(timeout):
            with self._wakeup:
                sleepers = self._sleepers.get(budget, [])
                if entry in sleepers:
                    sleepers.remove(entry)
                    heapq.heapify(sleepers)

    def _renew(self, permit: Permit) -> None:
        permit._renew_at = time.monotonic() + permit._config.lease_seconds / 2
        self._on_permit_store(permit, lambda store: store.renew(permit))

    def _redis_failed(self, exc: BaseException) -> None:
        with self._lock:
            first = self._down_until is None
            self._down_until = time.monotonic() + self._reconnect_after
        if first:
            log.warning("governor: Redis at %s unavailable (%s: %s); using a local per-process governor, "
                        "retrying Redis every %gs", self._redis.location if self._redis else "?",
                        type(exc).__name__, exc, self._reconnect_after)

    def _redis_ok(self) -> None:
        if self._down_until is None:
            return
        with self._lock:
            was_down, self._down_until = self._down_until is not None, None
        if was_down:
            log.info("governor: Redis at %s is back; budgets are shared again",
                     self._redis.location if self._redis else "?")


def _redis_store(url: str, namespace: str, clock: Callable[[], float] | None) -> "_RedisStore":
    """The Redis store, its client imported now, and Redis's errors added to :data:`_STORE_ERRORS`."""
    global _STORE_ERRORS
    import redis.exceptions

    # start-up time: Redis only for a Redis-shared governor
    from evaljobs.governor.redis_store import _RedisStore

    _STORE_ERRORS = (redis.exceptions.RedisError, OSError)
    return _RedisStore(url, namespace, clock)
