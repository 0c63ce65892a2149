"""Where a provider entry's calls go: its base URL and the shared HTTP client for it.

A provider entry with no ``base_url`` named ``sim`` means the built-in simulated
provider: ``EVALJOBS_SIM_URL`` (:attr:`~evaljobs.config.Settings.sim_url`)
points at a shared one (``evaljobs mock-provider``), otherwise one is started
in-process on a free loopback port, once per process.
"""
from __future__ import annotations

import threading

from evaljobs import simulated
from evaljobs.catalog.modelspec import ProvidersConfig
from evaljobs.config import Settings, settings as current_settings
from evaljobs.errors import UsageError
from evaljobs.providers.client import ChatClient, get_client


class EndpointError(UsageError):
    """A provider entry that names no endpoint (one line, names the provider)."""


_sim_lock = threading.Lock()
_sim_url: str | None = None


def simulated_provider_url(settings: Settings | None = None) -> str:
    """The URL of the built-in simulated provider for this process (started on first use)."""
    global _sim_url
    settings = settings or current_settings()
    if settings.sim_url:
        return settings.sim_url
    with _sim_lock:
        if _sim_url is None:
            # the simulator's server loads here: a run against real providers never loads it
            provider = simulated.SimulatedProvider(latency=settings.sim_latency, jitter=settings.sim_jitter)
            provider.start()
            _sim_url = provider.url
        return _sim_url


def base_url_for(providers: ProvidersConfig, provider_name: str) -> str:
    """The entry's ``base_url``; the simulated provider for a ``sim`` entry without one."""
    config = providers.get(provider_name)
    if config.base_url:
        return config.base_url
    if provider_name == "sim":
        return simulated_provider_url()
    raise EndpointError(f"provider '{provider_name}' has no base_url; set one in the providers config")


def client_for(providers: ProvidersConfig, provider_name: str) -> ChatClient:
    """The process's shared client for the provider entry ``provider_name``."""
    config = providers.get(provider_name)
    return get_client(base_url_for(providers, provider_name), api_key_env=config.api_key_env,
                      timeout=config.timeout, headers=config.headers or None, wire=config.api,
                      api_version=config.api_version, stream=config.stream)


__all__ = ["EndpointError", "base_url_for", "client_for", "simulated_provider_url"]
