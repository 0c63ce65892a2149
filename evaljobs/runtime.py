"""Per-process evaluation runtime: providers, adapters and judges, built once and reused.

Workers evaluate thousands of pairs; loading the providers config or an
adapter per message would be waste, so they are cached here by the values
that identify them (the run's adapter reference, the providers file).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from .adapters import Adapter, load_adapter
from .evaluate import ProviderJudge
from .modelspec import ModelSpec, ProvidersConfig, load_providers, parse_model_spec
from .retry import RetryPolicy

_lock = threading.Lock()
_providers: dict[str | None, ProvidersConfig] = {}
_adapters: dict[tuple[str | None, str | None], Adapter] = {}
_specs: dict[str, ModelSpec] = {}


def providers(path: str | None = None) -> ProvidersConfig:
    path = path or os.environ.get("EVALJOBS_PROVIDERS") or None
    with _lock:
        if path not in _providers:
            _providers[path] = load_providers(path)
        return _providers[path]


def adapter(reference: str | None, providers_path: str | None = None) -> Adapter:
    key = (reference, providers_path)
    with _lock:
        found = _adapters.get(key)
    if found is None:
        found = load_adapter(reference, providers(providers_path))
        with _lock:
            _adapters.setdefault(key, found)
    return found


def model_spec(text: str) -> ModelSpec:
    spec = _specs.get(text)
    if spec is None:
        spec = parse_model_spec(text, providers())
        _specs[text] = spec
    return spec


@dataclass(frozen=True)
class RunSettings:
    """What a run asks of every worker that evaluates it (stored in ``Run.options``)."""

    adapter: str | None = None
    judge_model: str | None = None
    judge_cap: int | None = None
    time_limit: float | None = None

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> "RunSettings":
        options = options or {}
        return cls(adapter=options.get("adapter"), judge_model=options.get("judge_model"),
                   judge_cap=options.get("judge_cap"), time_limit=options.get("time_limit"))

    def to_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def judge_for(settings: RunSettings, allow=None) -> ProviderJudge:
    return ProviderJudge(providers(), default_model=settings.judge_model, allow=allow)


def policy(settings: RunSettings | None = None) -> RetryPolicy:
    base = RetryPolicy.from_env()
    if settings and settings.time_limit:
        from dataclasses import replace

        return replace(base, time_limit=float(settings.time_limit))
    return base
