"""Pre-flight checks: can every model of a run be called at all, before the run exists?

A run whose models cannot be reached (unknown provider, a ``file://`` base URL,
an API-key variable nobody exported, an unsupported wire format) used to be
found out pair by pair, after the run was created: every pair errored. These
checks read only configuration and the environment (no network), so they cost
nothing and run before ``run``, ``rerun`` and ``bench`` create anything.
``probe`` (:mod:`evaljobs.providers.probes`) is the other half: one minimal real call per model
(``evaljobs providers check``).
"""
from __future__ import annotations

from typing import Iterable, Mapping
from urllib.parse import urlsplit

from evaljobs.errors import UsageError
from evaljobs.catalog.modelspec import (
    SIM_URL_ENV,
    WIRE_FORMATS,
    ModelSpec,
    ModelSpecError,
    ProviderConfig,
    ProvidersConfig,
    parse_model_spec,
)
from evaljobs.config import secret, settings
from evaljobs.providers.wire import wire_format


class _Environment(Mapping[str, str]):
    """What the checks read, through configuration: keys via ``config.secret``, the sim URL via settings."""

    def __getitem__(self, name: str) -> str:
        value = settings().sim_url if name == SIM_URL_ENV else secret(name)
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


class ProviderProblems(UsageError):
    """Models whose providers cannot be called; ``problems`` holds one line each (the CLI prints each)."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        count = len(self.problems)
        super().__init__(f"{count} provider problem{'s' if count != 1 else ''}: " + "; ".join(self.problems))


def problems(providers: ProvidersConfig, models: Iterable[str | ModelSpec], *,
             environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per problem that would stop a call to one of ``models``; empty when all can be called.

    A problem shared by several models of one provider is reported once, naming them.
    """
    env = _Environment() if environ is None else environ
    found: dict[str, list[str]] = {}
    for model in models:
        try:
            spec = model if isinstance(model, ModelSpec) else parse_model_spec(model, providers)
            config = providers.get(spec.provider)
        except ModelSpecError as exc:
            found.setdefault(str(exc), [])
            continue
        for problem in provider_problems(config, env, providers.source):
            found.setdefault(problem, []).append(spec.spec)
    lines = []
    for problem, specs in found.items():
        who = f"{', '.join(dict.fromkeys(specs))}: " if specs else ""
        lines.append(f"{who}{problem}")
    return lines


def require_callable(providers: ProvidersConfig, models: Iterable[str | ModelSpec]) -> None:
    """Raise :class:`ProviderProblems` (a line per :func:`problems` line) unless every model can be called."""
    found = problems(providers, models)
    if found:
        raise ProviderProblems(found)


def provider_problems(config: ProviderConfig, environ: Mapping[str, str] | None = None,
                      source: str = "") -> list[str]:
    """What is wrong with one provider entry (its wire format, base URL, key variable).

    ``environ`` is for tests; by default keys come from ``config.secret`` and the simulated
    provider's URL from the settings.
    """
    environ = _Environment() if environ is None else environ
    where = f"provider '{config.name}'"
    fix = f"in {source}" if source and source != "<built-in>" else "in a providers file (--providers FILE)"
    out = []
    wire = wire_format(config.api) if config.api in WIRE_FORMATS else None
    if wire is None:
        out.append(f"{where} uses wire format {config.api!r}, which evaljobs does not speak; "
                   f"set api to one of {', '.join(WIRE_FORMATS)} {fix}")
    base_url = config.base_url
    if base_url is None and config.name == "sim":
        base_url = environ.get(SIM_URL_ENV) or None  # None: started in-process, always reachable
        where_url = f"${SIM_URL_ENV}"
    else:
        where_url = "base_url"
    if base_url is None and config.name != "sim":
        example = wire.example_base_url if wire else "https://HOST/v1"
        out.append(f"{where} has no base_url; set one {fix}, e.g. base_url: {example}")
    elif base_url is not None:
        problem = url_problem(base_url)
        if problem:
            out.append(f"{where} {where_url} {base_url!r} {problem}")
        elif wire and (lacking := wire.endpoint_problem(base_url, config.api_version, fix)):
            out.append(f"{where} {lacking}")
    if config.api_key_env and not environ.get(config.api_key_env) and not config.header_credential:
        out.append(f"{where} needs its API key in ${config.api_key_env}, which is not set; export it, "
                   f"or name another variable with api_key_env {fix}")
    return out


def describe(providers: ProvidersConfig) -> list[dict]:
    """One row per provider (``evaljobs providers list``): wire format, base URL, key variable and
    whether it is set (never the key), streaming, prices, origin and whether it is ready to call."""
    rows = []
    for name in providers.names:
        entry = providers.get(name)
        key = "-" if not entry.api_key_env else ("set" if secret(entry.api_key_env) else "missing")
        if key != "set" and entry.header_credential:
            key = f"header:{entry.header_credential}"  # the credential is sent as that header
        rows.append({
            "name": name,
            "api": entry.api,
            "base_url": entry.base_url or ("(in-process)" if name == "sim" else "(not set)"),
            "api_key_env": entry.api_key_env,
            "key": key,
            "stream": entry.stream,
            "prices": len(entry.prices),
            "checked": entry.checked,
            "origin": "preset" if entry.origin == "preset" else "file",
            "ready": not provider_problems(entry, source=providers.source),
        })
    return rows


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a provider's base URL (None when it can)."""
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https"):
        shown = f"'{parts.scheme}://'" if parts.scheme else "no scheme"
        return f"must be an http:// or https:// URL, not {shown}"
    if not parts.hostname:
        return "has no host"
    return None
