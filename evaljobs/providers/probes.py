"""One minimal real call per model (``evaljobs providers check``), apart from the configuration checks a
submit makes (:mod:`evaljobs.providers.preflight`).

Why a module of its own: every submit checks that its models can be called, without a call; only the
probe needs the provider client (httpx), and a Redis submit makes no call (issue 42, item 3).
"""
from __future__ import annotations

import time
from typing import NamedTuple

from evaljobs.catalog.modelspec import ModelSpec, ProvidersConfig, parse_model_spec
from evaljobs.network.errors import ProviderError
from evaljobs.providers.endpoints import client_for
from evaljobs.providers.preflight import provider_problems
from evaljobs.providers.wire import wire_format


class Probe(NamedTuple):
    """The outcome of one minimal call: ``error`` is None when it answered."""

    model: str
    latency_ms: float | None = None
    ttft_ms: float | None = None
    answer: str = ""
    error: str | None = None


#: The whole prompt of a probe: short to send, short to answer.
PROBE_PROMPT = "Reply with the single word: ok"


def probe(providers: ProvidersConfig, model: str | ModelSpec, *, timeout: float = 30.0) -> Probe:
    """One minimal real call to ``model`` (a few tokens); the exact error when it fails."""
    spec = model if isinstance(model, ModelSpec) else parse_model_spec(model, providers)
    found = provider_problems(providers.get(spec.provider), source=providers.source)
    if found:
        return Probe(spec.spec, error=found[0])
    started = time.perf_counter()
    try:
        client = client_for(providers, spec.provider)
        # No max_tokens for OpenAI-style APIs (reasoning models refuse it); Anthropic requires one.
        completion = client.complete(spec.model, [{"role": "user", "content": PROBE_PROMPT}], timeout=timeout,
                                     max_tokens=wire_format(client.wire).probe_max_tokens)
    except ProviderError as exc:
        return Probe(spec.spec, latency_ms=(time.perf_counter() - started) * 1000.0,
                     error=f"{type(exc).__name__}: {exc.reason}")
    return Probe(spec.spec, latency_ms=completion.latency_ms, ttft_ms=completion.ttft_ms,
                 answer=" ".join(completion.content.split())[:60])


def probe_models(providers: ProvidersConfig) -> tuple[list[str], list[str]]:
    """(models to probe, notes) when none is named: the first priced model of each usable provider."""
    models, notes = [], []
    for name in providers.names:
        config = providers.get(name)
        if provider_problems(config, source=providers.source):
            continue
        exact = [m for m in config.prices if not any(c in m for c in "*?[")]
        if name == "sim":
            exact = ["sim"]
        if exact:
            models.append(f"{name}/{exact[0]}")
        else:
            notes.append(f"{name}: no model to try (its prices name none); pass -m {name}/MODEL")
    return models, notes


__all__ = ["PROBE_PROMPT", "Probe", "probe", "probe_models"]
