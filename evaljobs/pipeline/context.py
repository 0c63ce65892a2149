"""The worker context: what a process binds once and hands to every provider call it makes.

Provider calls (the model under test, the LLM judge) need the governor, the
lane, how long a conversation's first call may wait for a permit, and each
deployment's budget. The providers layer must not look these up itself (it
sits below the pipeline), so the pipeline binds them here, from
:class:`~evaljobs.config.Settings`, and hands this object down as the
``Governance`` of :mod:`evaljobs.providers.calls` (its four methods).

One context per process and settings: :func:`current` builds it from the
process's settings on first use and again when they are replaced
(:func:`evaljobs.config.configure`); :func:`evaljobs.pipeline.broker.configure`
keeps it on the broker binding. The permit wait is per thread, because it is
chosen per message (a queued pair waits briefly and goes back to the queue; a
pair evaluated in place waits long).
"""
from __future__ import annotations

import threading

from evaljobs import config
from evaljobs.catalog.modelspec import ModelSpec, ProvidersConfig
from evaljobs.config import Settings
from evaljobs.pipeline import events
from evaljobs import store
from evaljobs.governor import LANES, Governor, Learned, budget_key

DEFAULT_LANE = "bulk"


class WorkerContext:
    """The governor, lane and permit wait of this process's provider calls (a ``Governance``)."""

    def __init__(self, settings: Settings, *, default_lane: str = DEFAULT_LANE) -> None:
        self.settings = settings
        self._default_lane = _check_lane(default_lane)
        self._lock = threading.Lock()
        self._governor: Governor | None = None
        self._governor_url: str | None = None
        self._waits = threading.local()

    # -- the Governance protocol (evaljobs.providers.calls) --------------------------------------

    def governor(self) -> Governor | None:
        """The process's governor, or None when the settings turn it off.

        Its state lives in Redis when one is known (``governor_url``, else the broker's Redis),
        so every worker on every machine shares one budget per deployment; otherwise it is local
        to this process. A broker bound to another Redis later gets a governor of its own.
        """
        if not self.settings.governor:
            return None
        url = self.settings.governor_url or _broker_redis_url(self.settings)
        with self._lock:
            if self._governor is None or self._governor_url != url:
                if self._governor is not None:
                    self._governor.close()
                self._governor = Governor(url, learned=DatabaseLearned())
                self._governor_url = url
            return self._governor

    def existing_governor(self) -> Governor | None:
        """The governor if one was made (never makes one: for callers on every result's path)."""
        return self._governor

    def shares_broker_redis(self) -> bool:
        """Whether the governor's Redis is the broker's (one round trip can then serve both)."""
        url = self.settings.governor_url
        return not url or url == _broker_redis_url(self.settings)

    def budget_for(self, providers: ProvidersConfig, spec: ModelSpec) -> str:
        """The governor budget of ``spec``'s deployment, configured from its provider entry on first use."""
        governor = self.governor()
        if governor is None:
            entry = providers.get(spec.provider)
            return budget_key(entry.name, spec.model, entry.governor)
        return governor.budget_for(providers, spec)

    def lane(self) -> str:
        """The lane of this process's provider calls: the settings' ``lane``, else the default."""
        return self.settings.lane or self._default_lane

    def permit_wait(self) -> float:
        """How long this thread's first call of a pair waits for a permit (seconds)."""
        return getattr(self._waits, "value", None) or self.settings.permit_wait

    # -- set by the pipeline -------------------------------------------------------------------------

    def set_default_lane(self, lane: str) -> None:
        """The lane this process's calls use unless the settings name one (a pool's ``--lane``)."""
        self._default_lane = _check_lane(lane)

    @property
    def default_lane(self) -> str:
        return self._default_lane

    def set_permit_wait(self, seconds: float | None) -> None:
        """This thread's permit wait for the message it is processing (None: the settings' wait)."""
        self._waits.value = seconds

    def close(self) -> None:
        """Close the governor (its held permits then expire)."""
        with self._lock:
            governor, self._governor = self._governor, None
        if governor is not None:
            governor.close()


class DatabaseLearned:
    """The governor's ``LearnedStore`` on the run's database (:mod:`evaljobs.store.governor_limits`).

    So what a budget learned outlives the process even without Redis: the next run starts there.
    """

    def load(self, budget: str) -> Learned | None:
        values = store.governor_limits.load(budget)
        if values is None:
            return None
        return Learned(limit=values["limit"], ssthresh=values["ssthresh"], hold=values["hold"],
                       plateau=values["plateau"])

    def save(self, budget: str, learned: Learned) -> None:
        store.governor_limits.save(budget, limit=learned.limit, ssthresh=learned.ssthresh, hold=learned.hold,
                                   plateau=learned.plateau)


def _check_lane(lane: str) -> str:
    if lane not in LANES:
        raise ValueError(f"lane must be 'interactive' or 'bulk', not {lane!r}")
    return lane


def _broker_redis_url(settings: Settings) -> str | None:
    bound = events.redis_url()
    if bound:
        return bound
    return settings.state_redis


_lock = threading.Lock()
_current: WorkerContext | None = None


def current() -> WorkerContext:
    """This process's context, for its current settings (rebuilt when the settings are replaced)."""
    global _current
    settings = config.settings()
    context = _current
    if context is not None and context.settings is settings:
        return context
    with _lock:
        old = current = _current
        if current is None or current.settings is not settings:
            lane = old.default_lane if old else DEFAULT_LANE
            current = _current = WorkerContext(settings, default_lane=lane)
            if old is not None:
                old.close()
        return current


__all__ = ["WorkerContext", "DatabaseLearned", "current", "DEFAULT_LANE"]
