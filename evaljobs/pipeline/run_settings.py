"""What a run is submitted with and stores (:class:`RunSettings`, :class:`SubmitOptions`), apart from the
runtime that acts on it (:mod:`evaljobs.pipeline.runtime`: adapters, judges, provider calls).

Why a module of its own: a submit checks and stores these and runs no pair. On Redis the workers run the
pairs, and importing the runtime to read a dataclass would load the provider client, the evaluation and
the governor into the submitting command (issue 42, item 3).
"""
# No ``from __future__ import annotations`` here: typing turns a TypedDict's string annotations into
# ForwardRefs, each compiled from its text at import (start-up time, BENCHMARKS.md session 13).

from dataclasses import dataclass
from typing import Any, TypedDict

from evaljobs import config
from evaljobs.catalog.subset import Selection
from evaljobs.errors import suggest


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


__all__ = ["RunSettings", "SubmitOptions", "check_submit_options"]
