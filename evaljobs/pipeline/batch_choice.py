"""What every run asks of the batch lane: which providers' calls it sends through batch APIs (decided
when it is submitted), and the sender the actors bind, through which :mod:`evaljobs.pipeline.batching`
continues its work.

Apart from :mod:`~evaljobs.pipeline.batching` so that a run that batches nothing (``--batch`` not given,
every provider ``batch: off`` or not on the bulk lane) does not load it, and with it the provider batch
clients and the store's batch tables (start-up time, issue 42): ``batching`` names these too.
"""
from __future__ import annotations

from typing import Protocol

from evaljobs import config
from evaljobs.catalog.modelspec import ProvidersConfig, parse_model_spec
from evaljobs.errors import UsageError
from evaljobs.providers import batch_wires


class Sender(Protocol):
    """How :mod:`evaljobs.pipeline.batching` continues its work: the actors' messages (bound by
    :func:`bind_sender`)."""

    def collect(self, run_id: str, provider: str, model: str, delay: float) -> None: ...

    def poll(self, key: str, delay: float) -> None: ...

    def evaluate(self, run_id: str, pairs: list[tuple[str, str, int]]) -> None: ...


_sender: Sender | None = None


def bind_sender(sender: Sender) -> None:
    global _sender
    _sender = sender


def sender() -> Sender:
    if _sender is None:
        raise RuntimeError("batch runs need the evaljobs actors declared on a broker")
    return _sender


def choose(providers: ProvidersConfig, models: list[str], requested: bool, strategy: str, *,
           plain: bool) -> tuple[str, ...]:
    """The providers a new run batches (:func:`batch_providers`), or a one-line :class:`UsageError` when
    ``--batch`` finds none, or the run cannot wait on the queue (``plain``: the built-in adapter, no
    cache)."""
    if not requested and all(
        providers.get(parse_model_spec(m, providers).provider).batch == "off" for m in models
    ):
        return ()
    chosen = batch_providers(providers, models, requested=requested, lane=config.settings().lane)
    if requested and not chosen:
        names = ", ".join(dict.fromkeys(parse_model_spec(m, providers).provider for m in models))
        raise UsageError(f"--batch: none of the models' providers ({names}) has a batch API (the openai, "
                         "azure and anthropic wire formats do, unless the entry says batch_api: false); "
                         "run without --batch")
    if chosen and (strategy != "fanout" or not plain):
        raise UsageError(
            "--batch (or a provider with batch: true) needs --strategy fanout, the built-in adapter "
            "and no --cache: its pairs wait for their batches on the queue"
        )
    return chosen


def choose_judge(providers: ProvidersConfig, judges: list[str], requested: bool, models: list[str],
                 batched: tuple[str, ...]) -> tuple[str, ...]:
    """``--batch-judge``: the judge models' providers whose judge calls go through batch APIs (the
    judge's call parks like a model turn; the pair is graded when its batch answered), or a one-line
    :class:`UsageError`. Every model's calls must be batched too (``batched``, already checked by
    :func:`choose`): a pair that waited for its judge is evaluated again, and its model's turns must
    come from its batches, not be paid for a second time."""
    if not requested:
        return ()
    if any(parse_model_spec(m, providers).provider not in batched for m in models):
        raise UsageError("--batch-judge needs every model's calls batched too (--batch, providers with a "
                         "batch API): a pair that waited for its judge is evaluated again, its model's "
                         "turns from its batches")
    chosen = batch_providers(providers, judges, requested=True, lane=None)
    if not chosen:
        raise UsageError("--batch-judge: no judge model of this run has a provider with a batch API (the "
                         "openai, azure and anthropic wire formats do)")
    return chosen


def batch_providers(providers: ProvidersConfig, models: list[str], *, requested: bool,
                    lane: str | None) -> tuple[str, ...]:
    """The providers of ``models`` whose calls a run sends through batch APIs: with ``--batch`` every
    one with a batch API; otherwise those whose entry says ``batch: true``, or ``auto`` on the bulk lane.
    A provider whose wire format has a batch API but whose endpoint serves none (``batch_api: false``:
    Ollama, vLLM, … in the presets) is called one call at a time, as the docs say."""
    chosen = []
    for spec in models:
        name = parse_model_spec(spec, providers).provider
        entry = providers.get(name)
        if entry.api not in batch_wires() or not entry.batch_api:
            continue
        if requested or entry.batch == "on" or (entry.batch == "auto" and lane == "bulk"):
            chosen.append(name)
    return tuple(dict.fromkeys(chosen))


__all__ = ["Sender", "batch_providers", "bind_sender", "choose", "choose_judge", "sender"]
