"""Every provider call goes through here: the governor's permit (and the response cache) around the client.

Why one place: the model under test and the LLM judge must both count against
their deployment's shared budget, and the lane (interactive/bulk) and the
permit wait policy must be the same for every caller.

What governs a call is handed in, never looked up: the pipeline binds a
:class:`Governance` (the process's governor, lane, permit wait and budgets)
and, for a run with ``--cache``, a :class:`~evaljobs.providers.cache.ResponseCache`
into one :class:`ProviderCalls`, and gives that to the adapter and the judge.
So this layer imports nothing from the pipeline or the store.
"""
from __future__ import annotations

import json
import time
from typing import Any, NamedTuple, Protocol

from evaljobs import telemetry
from evaljobs.catalog.modelspec import ModelSpec, ProvidersConfig
from evaljobs.governor import Governor
from evaljobs.providers.attempts import outcome_of
from evaljobs.providers.batched import BatchingClient, BatchLane
from evaljobs.providers.cache import CachingClient, Completer, ResponseCache
from evaljobs.providers.client import Completion
from evaljobs.providers.endpoints import client_for
from evaljobs.network.errors import ProviderError, RateLimited

#: How long the first call of a conversation may wait for a permit before the
#: pair is handed back to the queue (nothing is lost yet). Later turns wait
#: longer: giving up mid-conversation would throw away the turns already paid for.
FIRST_CALL_WAIT = 2.0
LATER_CALL_WAIT = 120.0


class Governance(Protocol):
    """The process's provider governance, as the pipeline binds it."""

    def governor(self) -> Governor | None:
        """The governor, or None when it is off."""

    def budget_for(self, providers: ProvidersConfig, spec: ModelSpec) -> str:
        """The governor budget of ``spec``'s deployment (configured on first use)."""

    def lane(self) -> str:
        """``interactive`` or ``bulk``."""

    def permit_wait(self) -> float:
        """Seconds the first call of a pair may wait for a permit."""


def complete(providers: ProvidersConfig, spec: ModelSpec, messages: list[dict[str, Any]], *,
             governance: Governance | None = None, first: bool = True, **kwargs: Any) -> Completion:
    """``client.complete`` under a governor permit for ``spec``'s budget (when a governor is bound and on)."""
    client = client_for(providers, spec.provider)
    governor = governance.governor() if governance is not None else None
    if governance is None or governor is None:
        return _call(client, spec, messages, kwargs)
    budget = governance.budget_for(providers, spec)
    if governor.config(budget).unbounded:  # nothing to enforce: no permit, no Redis round trip
        return _call(client, spec, messages, kwargs)
    max_wait = governance.permit_wait() if first else LATER_CALL_WAIT
    with governor.acquire(budget, governance.lane(), max_wait=max_wait) as permit:
        try:
            completion = _call(client, spec, messages, kwargs)
        except RateLimited as exc:
            # A Retry-After past the provider's max_retry_after is never waited for (the pair errors,
            # rate limited), so it does not pause the budget either: the deployment's other pairs
            # would sit out the provider's day in hand-backs. The 429 still narrows the width.
            wait = exc.retry_after
            honoured = wait is not None and wait <= providers.get(spec.provider).max_retry_after
            permit.release(rate_limited=True, retry_after=wait if honoured else None)
            raise
        permit.release(tokens=completion.input_tokens + completion.output_tokens,
                       latency=completion.latency_ms / 1000.0, headers=completion.headers)
    return completion


def _call(client: Any, spec: ModelSpec, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> Completion:
    """One provider request, reported to the process's observers and traced (when anything watches)."""
    if not telemetry.watched():
        return client.complete(spec.model, messages, **kwargs)
    # OpenTelemetry's GenAI semantic conventions (span name "{operation} {model}").
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": spec.provider,
                                  "gen_ai.request.model": spec.model}
    for option, key in (("temperature", "gen_ai.request.temperature"),
                        ("max_tokens", "gen_ai.request.max_tokens")):
        if kwargs.get(option) is not None:
            attributes[key] = kwargs[option]
    with telemetry.span(f"chat {spec.model}", attributes) as span:
        if telemetry.trace_content():
            span.set_attribute("gen_ai.input.messages", json.dumps(messages, ensure_ascii=False, default=str))
        started = time.perf_counter()
        try:
            completion = client.complete(spec.model, messages, **kwargs)
        except ProviderError as exc:
            outcome = outcome_of(exc)
            telemetry.provider_call(telemetry.ProviderCall(spec.provider, spec.model, outcome,
                                                           time.perf_counter() - started))
            span.set_attribute("error.type", outcome)
            span.record_error(exc)
            raise
        telemetry.provider_call(telemetry.ProviderCall(
            spec.provider, spec.model, "ok", completion.latency_ms / 1000.0,
            None if completion.ttft_ms is None else completion.ttft_ms / 1000.0,
            completion.input_tokens, completion.output_tokens))
        span.set_attribute("gen_ai.usage.input_tokens", completion.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", completion.output_tokens)
        if completion.model:
            span.set_attribute("gen_ai.response.model", completion.model)
        if completion.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [completion.finish_reason])
        if telemetry.trace_content():
            span.set_attribute("gen_ai.output.messages",
                               json.dumps([completion.raw_message], ensure_ascii=False, default=str))
    return completion


class GovernedCalls:
    """The governed call path (:func:`complete`) for one deployment, as a client.

    Wrapping this (not the raw client) puts the cache in front of the governor:
    a hit takes no permit from the deployment's shared budget.
    """

    def __init__(self, providers: ProvidersConfig, spec: ModelSpec, governance: Governance | None = None):
        self.providers = providers
        self.spec = spec
        self.governance = governance

    def complete(self, model: str, messages: list[dict[str, Any]], **kwargs: Any) -> Completion:
        return complete(self.providers, self.spec, messages, governance=self.governance, **kwargs)


class ProviderCalls(NamedTuple):
    """How this process calls providers: the governance and response cache the pipeline bound.

    The default (nothing bound) calls the provider directly: no permit, no cache.
    """

    governance: Governance | None = None
    #: The response cache of a run with ``--cache``; None: every call goes to the provider.
    cache: ResponseCache | None = None
    #: A batch run's lane, and the providers whose calls go through their batch APIs (the others,
    #: and every judge call, are made one by one).
    batch: BatchLane | None = None
    batch_providers: frozenset[str] = frozenset()
    #: ``judge`` for the judge's calls of a run with ``--batch-judge`` (their own custom ids).
    batch_kind: str = ""

    def client(self, providers: ProvidersConfig, spec: ModelSpec, version: str = "") -> Completer:
        """A client for ``spec``'s calls: ``complete(model, messages, first=..., **kwargs)``.

        ``version`` (the adapter's or judge's) is part of the response-cache key.
        """
        if self.batch is not None and spec.provider in self.batch_providers:
            return BatchingClient(self.batch, spec.provider, self.batch_kind)
        governed = GovernedCalls(providers, spec, self.governance)
        if self.cache is None:
            return governed
        # In front of the governor: a cached answer takes no permit from the shared budget.
        return CachingClient(governed, spec.provider, self.cache.ttl, backend=self.cache.backend,
                             adapter_version=version)


__all__ = ["FIRST_CALL_WAIT", "LATER_CALL_WAIT", "Governance", "GovernedCalls", "ProviderCalls", "complete",
           "outcome_of"]
