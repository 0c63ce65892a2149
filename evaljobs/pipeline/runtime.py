"""Per-process evaluation runtime: providers, adapters and judges, built once and reused.

Workers evaluate thousands of pairs; loading the providers config or an
adapter per message would be waste, so they are cached here by the values
that identify them (the run's adapter reference, the providers file).
"""
from __future__ import annotations  # (the TypedDict, whose annotations must be types, is in run_settings)

import threading
from dataclasses import replace
from typing import Any

from evaljobs import config
from evaljobs.pipeline import context, on_demand
from evaljobs.pipeline.run_providers import providers, stored_providers
from evaljobs.evaluation.adapters import Adapter, load_adapter
from evaljobs.evaluation.judge import ProviderJudge
from evaljobs.providers import ResponseCache, default_ttl
from evaljobs.providers import ProviderCalls
from evaljobs.store import cache as store_cache
from evaljobs.catalog.modelspec import (ModelSpec, ProvidersConfig, parse_model_spec)
from evaljobs.evaluation.retry import RetryPolicy
from evaljobs.pipeline.run_settings import (RunSettings, SubmitOptions,  # noqa: F401 - re-exported
                                            check_submit_options)

_lock = threading.Lock()
#: Keyed by id() of the providers config: every config used here is kept for the process's life
#: (:mod:`evaljobs.pipeline.run_providers`), so an id is never reused for another.
_adapters: dict[tuple[str | None, int, bool, Any, tuple[str, ...]], Adapter] = {}
_specs: dict[tuple, ModelSpec] = {}


def run_providers(settings: "RunSettings") -> ProvidersConfig:
    """The providers a run's pairs use: the definition stored with the run when it was submitted with a
    providers file (so a worker started without ``EVALJOBS_PROVIDERS`` knows them), else this process's."""
    return stored_providers(settings.providers)


def adapter(reference: str | None, providers_path: str | None = None, *, cache: bool = False,
            batch: tuple[str, ...] = (), providers_config: ProvidersConfig | None = None) -> Adapter:
    """The run's adapter; ``cache`` puts the response cache in front of its provider calls; the
    calls to the providers named in ``batch`` go through their batch APIs (a batch run).

    ``providers_config``: the run's providers (:func:`run_providers`), else the file in force now.
    """
    # Keyed by the providers in use, so a changed EVALJOBS_PROVIDERS (or another run's stored
    # definition) never reuses an adapter built from another config; and by the worker context, so
    # replaced settings never leave calls on a closed governor (nor on another than the one the
    # crash counter prefetches from).
    providers_path = providers_path or config.settings().providers_path
    chosen = providers_config if providers_config is not None else providers(providers_path)
    key = (reference, id(chosen), bool(cache), context.current(), tuple(batch))
    with _lock:
        found = _adapters.get(key)
    if found is None:
        found = load_adapter(reference, chosen, calls=calls(bool(cache), tuple(batch)))
        with _lock:
            _adapters.setdefault(key, found)
    return found


def model_spec(text: str, providers_config: ProvidersConfig | None = None) -> ModelSpec:
    chosen = providers_config if providers_config is not None else providers()
    key = (text, id(chosen))
    spec = _specs.get(key)
    if spec is None:
        spec = parse_model_spec(text, chosen)
        _specs[key] = spec
    return spec


def judge_for(settings: RunSettings, allow=None, release=None) -> ProviderJudge:
    """The run's judge, on the providers the run was submitted with (:func:`run_providers`), as its pairs."""
    return ProviderJudge(run_providers(settings), default_model=settings.judge_model, allow=allow,
                         release=release,
                         calls=calls(bool(settings.cache), settings.batch_judge or (), kind="judge"))


def calls(cache: bool = False, batch: tuple[str, ...] = (), kind: str = "") -> ProviderCalls:
    """How this process's provider calls are made: governed by the worker context, and answered
    from the store's response cache for a run with ``--cache``; a batch run's calls to the
    providers in ``batch`` through their batch APIs (:mod:`evaljobs.pipeline.batching`)."""
    lane = None
    if batch:
        lane = on_demand.batching.StoreLane()  # only batch runs load batching
    return ProviderCalls(governance=context.current(),
                         cache=ResponseCache(store_cache, default_ttl()) if cache else None,
                         batch=lane, batch_providers=frozenset(batch), batch_kind=kind)


def policy(settings: RunSettings | None = None) -> RetryPolicy:
    """The retry policy of a run: the limits stored with it (``settings``), this process's for the rest."""
    base = RetryPolicy.from_settings()
    if settings is None:
        return base
    stored = {o.name: o.kind(getattr(settings, o.name)) for o in config.RUN_LIMITS
              if o.stored and getattr(settings, o.name) is not None}
    return replace(base, **stored) if stored else base


# -- the provider governor and lanes: this process's worker context (evaljobs.pipeline.context) ----


def set_default_lane(lane: str) -> None:
    """The governor lane this process's provider calls use (a pool's ``--lane``)."""
    context.current().set_default_lane(lane)


def lane() -> str:
    return context.current().lane()


def permit_wait() -> float:
    """How long the first call of a pair waits for a permit (queued pairs: short; in-process: long)."""
    return context.current().permit_wait()


def set_permit_wait(seconds: float | None) -> None:
    context.current().set_permit_wait(seconds)


def governor():
    """The process's governor, or None when the settings turn it off (see ``WorkerContext.governor``)."""
    return context.current().governor()


def budget_for(providers_config: ProvidersConfig, spec: ModelSpec) -> str:
    """The governor budget of a deployment, configured from its provider entry on first use."""
    return context.current().budget_for(providers_config, spec)
