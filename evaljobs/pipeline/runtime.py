"""Per-process evaluation runtime: providers, adapters and judges, built once and reused.

Workers evaluate thousands of pairs; loading the providers config or an
adapter per message would be waste, so they are cached here by the values
that identify them (the run's adapter reference, the providers file).
"""
# No ``from __future__ import annotations`` here: typing turns a TypedDict's string annotations into
# ForwardRefs, each compiled from its text at import (start-up time, BENCHMARKS.md session 13).

import threading
from dataclasses import dataclass, replace
from typing import Any, TypedDict

from evaljobs import config
from evaljobs.pipeline import context, on_demand
from evaljobs.pipeline.run_providers import providers, stored_providers
from evaljobs.evaluation.adapters import Adapter, load_adapter
from evaljobs.evaluation.judge import ProviderJudge
from evaljobs.providers import ResponseCache, default_ttl
from evaljobs.providers import ProviderCalls
from evaljobs.store import cache as store_cache
from evaljobs.catalog.modelspec import (ModelSpec, ProvidersConfig, parse_model_spec)
from evaljobs.catalog.subset import Selection
from evaljobs.errors import suggest
from evaljobs.evaluation.retry import RetryPolicy

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


@dataclass(frozen=True)
class RunSettings:
    """What a run asks of every worker that evaluates it (stored in ``Run.options``)."""

    adapter: str | None = None
    judge_model: str | None = None
    judge_cap: int | None = None
    time_limit: float | None = None
    cache: bool | None = None
    #: ``--cache-across-epochs``: the response cache key leaves the epoch out (epochs share answers).
    cache_across_epochs: bool | None = None
    #: Fan-out pairs per message (None: one); set at submit from ``Settings.pairs_per_message``.
    pairs_per_message: int | None = None
    #: A batch run: the providers whose calls go through their batch APIs (``--batch``, ``batch:``).
    batch: tuple[str, ...] | None = None
    #: ``--batch-judge``: the providers whose judge calls go through their batch APIs.
    batch_judge: tuple[str, ...] | None = None
    #: The providers file the run was submitted with (``{"source", "definition"}``, variable names only;
    #: :func:`evaljobs.catalog.modelspec.storable_definition`); None: the worker's own providers.
    providers: dict[str, Any] | None = None
    #: The submitter's retry settings (``EVALJOBS_MAX_RETRIES``, ``_MIN_BACKOFF``, ``_MAX_BACKOFF``,
    #: ``_MAX_RATE_LIMIT_WAITS``), stored like ``time_limit`` so every worker applies the limits the run
    #: was submitted with; None (a run stored before they travelled): the worker's own.
    max_retries: int | None = None
    min_backoff: float | None = None
    max_backoff: float | None = None
    max_rate_limit_waits: int | None = None

    def __post_init__(self) -> None:
        for option in config.RUN_OPTIONS:  # --time-limit / submit(time_limit=): as EVALJOBS_TIME_LIMIT
            value = getattr(self, option.name) if option.stored else None
            if value is not None:
                option.check(value)

    @classmethod
    def limits_of(cls, settings: config.Settings, time_limit: float | None = None) -> dict[str, Any]:
        """The per-pair limits a run submitted under ``settings`` stores (``time_limit``: a flag's, first).

        What defines a run travels with it: a worker started with another environment applies these,
        never its own (issue 29); the worker's own settings say how it works (threads, permit waits),
        not what a pair of the run may spend.
        """
        flags = {"time_limit": time_limit}
        return {o.name: config.resolve(o.name, flags, settings) for o in config.RUN_LIMITS if o.stored}

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> "RunSettings":
        """The run settings stored in a run's options (``Run.options``): each stored run option, a switch
        off or an empty list as unset (None)."""
        options = options or {}
        return cls(**{o.name: _stored(o, options.get(o.name)) for o in config.RUN_OPTIONS if o.stored})

    def to_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


class SubmitOptions(TypedDict, total=False):
    """What a run is submitted with besides its catalog, models and strategy: the keyword options of
    :meth:`evaljobs.Session.submit`, which :meth:`~evaljobs.Session.run` (and the pytest plugin's
    ``evaljobs_run``) pass on as ``**options``.

    Why a ``TypedDict``: ``run(**options: Unpack[SubmitOptions])`` lets mypy refuse a misspelled or
    mistyped option where ``**options: Any`` let it past; :func:`check_submit_options` refuses it at
    run time, before a catalog is read. ``tests/pipeline/test_run_options.py`` keeps it in step with
    ``submit``'s signature and with ``evaljobs.config.RUN_OPTIONS``.

    ``adapter``: a host adapter (``module:callable`` or an entry-point name) makes the model calls.
    ``judge_model``, ``judge_cap``: the judge of judged criteria, and a cap on its calls.
    ``time_limit``: seconds per pair (default: the settings').
    ``cache``: answer repeated provider calls from the shared response cache
    (``evaljobs.providers.cache``).
    ``epochs``: evaluate each scenario × model pair that many times, each epoch a pair of its own
    (default: the catalog's ``defaults: epochs:``, else 1). With ``cache``, each epoch has its
    own cache entries unless ``cache_across_epochs``.
    ``selection``: run only some scenarios (:mod:`evaljobs.catalog.subset`); the run records it and an
    empty selection is a one-line error before anything is created.
    ``reuse``: a run id, a prefix or ``latest``: its unchanged pairs are copied instead of evaluated
    (:mod:`evaljobs.pipeline.reuse`).
    ``allow_self_judge``: let a model under test be a judge model too (refused otherwise: a model
    grading its own answers is not a verdict); the run and its report record it.
    ``batch``, ``batch_judge``: the model's, the judge's calls via batch APIs (:mod:`.pipeline.batching`).
    """

    adapter: str | None
    judge_model: str | None
    judge_cap: int | None
    time_limit: float | None
    cache: bool
    epochs: int | None
    cache_across_epochs: bool
    selection: Selection | None
    reuse: str | None
    allow_self_judge: bool
    batch: bool
    batch_judge: bool


def check_submit_options(options: dict[str, Any], caller: str) -> None:
    """Raise ``TypeError`` (one line: the option, a close match, the valid ones) for a key that is not a
    :class:`SubmitOptions` option, as a misspelled keyword argument would."""
    known = SubmitOptions.__annotations__
    for name in options:
        if name not in known:
            raise TypeError(f"{caller}() got an unexpected option {name!r}{suggest(name, known)}; "
                            "its options are: " + ", ".join(known))


def _stored(option: config.RunOption, value: Any) -> Any:
    """A stored run option's value as :class:`RunSettings` holds it: off and empty are unset."""
    if option.kind is bool:
        return value or None
    if option.kind is tuple:
        return tuple(value) if value else None
    return value


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
