"""Model specs (``provider/model[@label]``) and the providers configuration.

Domain code: no Dramatiq, peewee or httpx here. The providers config names the
environment variable that holds each API key, never the key itself, so a
config file can be committed and a snapshot of it can be stored with a run.
"""
from __future__ import annotations

import datetime
import fnmatch
import functools
import importlib.resources
import json
import math
import os
import re
from urllib.parse import urlsplit
from dataclasses import dataclass, field
from typing import Any

import yaml

from evaljobs.catalog.allowance import Allowance, entry_variables
from evaljobs.catalog.pricing import Price, Usage, cache_saving, cost_of, parse_price
from evaljobs.config import run_option, secret, settings
from evaljobs.errors import ConfigurationError, UsageError, suggest

#: Environment variable naming a providers file, used when no path is given.
PROVIDERS_ENV = "EVALJOBS_PROVIDERS"
#: Environment variable pointing the ``sim`` provider at a shared simulated provider.
SIM_URL_ENV = "EVALJOBS_SIM_URL"

_PROVIDER_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_ENV_REF = re.compile(r"\$\{([^}]*)\}")
_PROVIDER_KEYS = ("api", "base_url", "api_key_env", "api_version", "stream", "prices", "checked", "timeout",
                  "max_retries", "max_retry_after", "headers", "governor",
                  "batch", "batch_api", "batch_prices")
#: The longest ``Retry-After`` (seconds) a pair waits for unless its provider entry says otherwise
#: (``max_retry_after``); a longer one ends the pair ``errored`` (rate limited) at once.
DEFAULT_MAX_RETRY_AFTER = 300.0
#: Wire formats a provider entry may name with ``api:`` (modules under ``evaljobs/providers/wire/``).
WIRE_FORMATS = ("openai", "anthropic", "azure")
#: The presets' data file (package data): base URL, key variable, wire format and prices per provider.
PRESETS_FILE = "data/providers.yaml"


class ModelSpecError(UsageError):
    """A model spec or providers config that cannot be used (one line: names the value and the fix)."""


class ProviderNotAllowed(ModelSpecError):
    """A run's stored provider entry that would send this worker's secrets where its operator did not
    allow (:mod:`evaljobs.catalog.allowance`)."""


@dataclass(frozen=True)
class ProviderConfig:
    """How to reach one provider (its wire format, URL, key variable), and what its tokens cost."""

    name: str
    base_url: str | None
    api_key_env: str | None = None
    #: model name, glob pattern (``gpt-4o-*``) or ``"*"`` -> its :class:`Price` (USD per million tokens of
    #: input, output, and where known cache reads and cache writes).
    prices: dict[str, Price] = field(default_factory=dict)
    #: The wire format (``openai``, ``anthropic``, ``azure``).
    api: str = "openai"
    #: Azure's ``api-version`` query parameter, or Anthropic's ``anthropic-version`` header.
    api_version: str | None = None
    #: Stream answers (SSE) and record the time to the first token.
    stream: bool = False
    #: When the prices were last compared with the provider's price page (ISO date), if known.
    checked: str | None = None
    #: Where the entry comes from: ``preset`` or the providers file that set or changed it.
    origin: str = "preset"
    timeout: float = 60.0
    #: Retries after a transient fault for this provider's pairs (None: ``EVALJOBS_MAX_RETRIES``).
    max_retries: int | None = None
    #: The longest ``Retry-After`` a pair waits for (seconds); beyond it the pair errors, rate limited.
    max_retry_after: float = DEFAULT_MAX_RETRY_AFTER
    #: Opaque to this module: read by the governor (initial, ceiling, rpm, tpm, bulk_reserve, budget_key).
    governor: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    #: ``batch:`` — ``on`` (every run of its models goes through its batch API), ``auto`` (runs on the
    #: bulk lane, and ``--batch`` runs, do), ``off`` (only ``--batch`` runs do).
    batch: str = "off"
    #: ``batch_api:`` — whether the endpoint serves its wire format's batch API (``false``: an
    #: OpenAI-compatible server such as Ollama or vLLM with none, so ``--batch`` calls it one by one).
    batch_api: bool = True
    #: Batch prices per model, like ``prices``; a model without one pays half its listed price.
    batch_prices: dict[str, Price] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A price given as [input, output] (or any form a providers file takes) is read as a Price.
        for name in ("prices", "batch_prices"):
            given = getattr(self, name)
            if any(not isinstance(value, Price) for value in given.values()):
                read = {model: value if isinstance(value, Price) else parse_price(value)
                        for model, value in given.items()}
                object.__setattr__(self, name, read)

    def batch_price(self, model: str) -> Price | None:
        """The model's batch price (``batch_prices``), else half its listed price — cache prices too:
        a batch discount composes with prompt caching."""
        own = _lookup(self.batch_prices, model) if self.batch_prices else None
        if own is not None:
            return own
        listed = self.price(model)
        return None if listed is None else listed.halved()

    def price(self, model: str) -> Price | None:
        """Per-million-token prices: the exact model, else the longest matching pattern, else ``"*"``.

        Patterns let one entry cover dated snapshots (``gpt-4o-mini-2024-07-18``).
        None when nothing matches: an unknown price is not a price of zero.

        Kept per model (a pair asks twice: its cost and its cache saving; a pattern match sorted the
        patterns and tried each): the entry is frozen, and another entry (``dataclasses.replace``) keeps
        its own.
        """
        kept: dict[str, Price | None] | None = self.__dict__.get("_prices_found")
        if kept is None:
            kept = {}
            object.__setattr__(self, "_prices_found", kept)
        found = kept.get(model, _NOT_LOOKED_UP)
        if found is _NOT_LOOKED_UP:
            found = _lookup(self.prices, model)
            if len(kept) < 1024:
                kept[model] = found
        return found  # type: ignore[return-value]

    def cost(self, model: str, usage: Usage | int, output_tokens: int = 0, *,
             batch: bool = False) -> float | None:
        """USD cost of ``usage`` (or of ``usage`` input and ``output_tokens`` output tokens, none cached) at
        the batch price with ``batch``; None when a price it needs is unknown (no tokens used: 0). The one
        definition of a call's cost: :func:`evaljobs.catalog.pricing.cost_of`."""
        if not isinstance(usage, Usage):
            usage = Usage(int(usage), int(output_tokens))
        return cost_of(usage, self.batch_price(model) if batch else self.price(model))

    def cache_saving(self, model: str, usage: Usage, *, batch: bool = False) -> float | None:
        """What prompt caching saved on ``usage`` (:func:`~evaljobs.catalog.pricing.cache_saving`)."""
        return cache_saving(usage, self.batch_price(model) if batch else self.price(model))

    @property
    def api_key(self) -> str | None:
        """The key from the environment variable the config names (``None`` if unset or keyless)."""
        return secret(self.api_key_env) if self.api_key_env else None

    @property
    def header_credential(self) -> str | None:
        """The name of a ``headers:`` entry that carries the credential (then no key variable is needed)."""
        return next((name for name in self.headers if is_credential_header(name)), None)


#: Header names that carry a credential: the wire formats' own (``authorization``, Azure's ``api-key``,
#: Anthropic's ``x-api-key``) and a gateway's by their usual endings (``x-portkey-api-key``,
#: ``cf-aig-authorization``, ``x-gateway-token``).
_CREDENTIAL_HEADER = re.compile(r"(?i)(?:.*[-_])?(?:authorization|api[-_]?key|access[-_]?key|secret|token)")


def is_credential_header(name: str) -> bool:
    """Whether a ``headers:`` entry named ``name`` is a credential: sent in place of the key variable's
    auth header, enough for pre-flight, and scrubbed like a key wherever it could be shown."""
    return bool(_CREDENTIAL_HEADER.fullmatch(name.strip()))


@dataclass(frozen=True)
class ProvidersConfig:
    providers: dict[str, ProviderConfig]
    source: str = "<built-in>"
    #: The providers file's default judge model (``judge_model: provider/model``) for llm_judge criteria.
    judge_model: str | None = None
    #: The file's mapping as written (``${VAR}`` and ``api_key_env`` names, never their values): what
    #: a run stores so that every worker uses the definition it was submitted with. None: built-ins only.
    definition: dict[str, Any] | None = None
    #: Entries of a run's stored definition this worker does not honour: name -> the one-line reason
    #: (:mod:`evaljobs.catalog.allowance`); a pair of such a provider errors with it, before any request.
    refused: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> ProviderConfig:
        if name in self.refused:
            raise ProviderNotAllowed(self.refused[name])
        try:
            return self.providers[name]
        except (KeyError, TypeError):
            raise ModelSpecError(
                f"unknown provider {name!r} (known: {', '.join(sorted(self.providers))}); "
                f"add it to a providers file and pass it with --providers FILE") from None

    def __contains__(self, name: object) -> bool:
        return name in self.providers or name in self.refused

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted({*self.providers, *self.refused}))

    def allowance(self, urls: tuple[str, ...] = (), variables: tuple[str, ...] = ()) -> Allowance:
        """What a run's stored definition may use on a process whose own providers these are: their base
        URLs and the variables they read, with the operator's allow-lists ``urls`` and ``variables``."""
        entries = (self.definition or {}).get("providers") or {}
        pairs = [(name, entry.base_url) for entry in self.providers.values()
                 for name in entry_variables(entries.get(entry.name), entry.api_key_env, _ENV_REF)]
        return Allowance.of(pairs, urls, variables)


def builtin_providers() -> dict[str, ProviderConfig]:
    """The presets every config starts from (``evaljobs/data/providers.yaml``).

    ``sim`` has no base URL: it honours ``EVALJOBS_SIM_URL`` at call time or starts
    the simulated provider in-process (see ``providers.endpoints.simulated_provider_url``).
    """
    return dict(_presets())


@functools.lru_cache(maxsize=1)
def _presets() -> tuple[tuple[str, ProviderConfig], ...]:
    source = f"evaljobs/{PRESETS_FILE}"
    text = importlib.resources.files("evaljobs").joinpath(PRESETS_FILE).read_text(encoding="utf-8")
    # Our own bundled file, read by every command that resolves a model: libyaml's parser when
    # PyYAML has it (10x faster than the pure-Python one, the same values; start-up time).
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    return tuple((str(name), _provider_entry(source, name, entry, None, origin="preset"))
                 for name, entry in data.items())


def load_providers(path: str | os.PathLike | None = None) -> ProvidersConfig:
    """The built-in providers, overridden/extended by ``path`` (or ``$EVALJOBS_PROVIDERS``,
    ``Settings.providers_path``).

    An entry for a built-in name is merged field by field (``prices`` model by
    model), so ``openai: {base_url: http://proxy/v1}`` keeps the key variable and prices.
    """
    path = path if path is not None else settings().providers_path
    providers = builtin_providers()
    if path is None:
        return ProvidersConfig(providers=providers, source="<built-in>")
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ModelSpecError(f"{source}: cannot read providers file: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ModelSpecError(f"{where}: YAML syntax error: {problem}") from None
    return providers_from_definition(data, source)


def providers_from_definition(data: Any, source: str, allowance: Allowance | None = None) -> ProvidersConfig:
    """The built-in providers extended by ``data``, a providers file's mapping (``source`` names it).

    What :func:`load_providers` does after reading the file; a worker calls it on the definition
    stored with a run (``Run.options["providers"]``), so it needs no copy of the file. With ``allowance``
    (a definition someone else wrote), an entry that reads a variable or sends one where ``allowance``
    does not allow is refused (``ProvidersConfig.refused``), its variables left unread.
    """
    providers = builtin_providers()
    if data is None:
        return ProvidersConfig(providers=providers, source=source, definition={})
    if not isinstance(data, dict):
        raise ModelSpecError(f"{source}: expected a mapping with a 'providers' key, got {_kind(data)}")
    unknown = [k for k in data if k not in ("providers", "judge_model")]
    if unknown:
        raise ModelSpecError(f"{source}: unknown top-level key {_show(unknown[0])}; "
                             f"the file holds only 'providers: {{name: {{base_url: ...}}}}' "
                             f"and an optional default 'judge_model: provider/model'")
    judge_model = data.get("judge_model")
    if judge_model is not None and (not isinstance(judge_model, str) or "/" not in judge_model):
        raise ModelSpecError(f"{source}: judge_model must be a model spec like 'openai/gpt-4o-mini', "
                             f"not {_show(judge_model)}")
    entries = data.get("providers") or {}
    if not isinstance(entries, dict):
        raise ModelSpecError(f"{source}: 'providers' must be a mapping of name -> settings, "
                             f"got {_kind(entries)}")
    refused: dict[str, str] = {}
    for name, entry in entries.items():
        base = providers.get(str(name))
        if allowance is not None:
            where = f"provider {str(name)!r} of {source}"
            variables = entry_variables(entry, base.api_key_env if base else None, _ENV_REF)
            reason = allowance.refusal(where, variables, None)  # before any variable is read
            if reason is None:
                built = _provider_entry(source, name, entry, base, origin=source)
                reason = allowance.refusal(where, variables, built.base_url or "") if variables else None
            if reason is not None:
                providers.pop(str(name), None)
                refused[str(name)] = reason
                continue
            providers[str(name)] = built
            continue
        providers[str(name)] = _provider_entry(source, name, entry, base, origin=source)
    return ProvidersConfig(providers=providers, source=source, judge_model=judge_model, definition=data,
                           refused=refused)


def storable_definition(config: ProvidersConfig) -> dict[str, Any] | None:
    """What a run stores of ``config``: its source and definition (None: built-ins, nothing to store).

    A definition holds variable names, never their values (``api_key`` is refused when the file
    is read; keys and headers come from ``${VAR}``); a password written into a ``base_url`` would
    be the one secret in it, so such a file is refused here, in one line, before a run exists.
    """
    if config.definition is None:
        return None
    for name, entry in (config.definition.get("providers") or {}).items():
        url = (entry or {}).get("base_url") if isinstance(entry, dict) else None
        if isinstance(url, str) and "${" not in url and urlsplit(url).password:
            raise ModelSpecError(f"{config.source}: provider {name!r}: base_url has a password written in "
                                 "it; put it in a variable "
                                 "(base_url: https://user:${PROXY_PASSWORD}@host/v1): the providers "
                                 "definition is stored with each run, and secrets never are")
    # As JSON, the way the run's options are stored: YAML's dates (`checked: 2025-08-15`) as the ISO
    # text the file reader accepts too.
    plain = json.loads(json.dumps(config.definition, default=_iso_or_text))
    return {"source": config.source, "definition": plain}


def _iso_or_text(value: Any) -> str:
    return value.isoformat() if isinstance(value, (datetime.date, datetime.datetime)) else str(value)


def _provider_entry(source: str, name: Any, entry: Any, base: ProviderConfig | None, *,
                    origin: str) -> ProviderConfig:
    if not isinstance(name, str) or not _PROVIDER_NAME.fullmatch(name):
        raise ModelSpecError(f"{source}: provider name {_show(name)} must match [A-Za-z0-9_.-]+ "
                             f"(no '/' or '@': they separate provider, model and label)")
    where = f"{source}: provider '{name}'"
    if entry is None:
        entry = {}
    if not isinstance(entry, dict):
        raise ModelSpecError(f"{where}: expected a mapping of settings, got {_kind(entry)}")
    if "api_key" in entry:
        raise ModelSpecError(f"{where}: 'api_key' is not allowed (never put secrets in this file); "
                             f"set 'api_key_env' to the name of the environment variable that holds the key")
    for key in entry:
        if key not in _PROVIDER_KEYS:
            raise ModelSpecError(f"{where}: unknown key {_show(key)}{_suggest(key, _PROVIDER_KEYS)}")

    base_url = base.base_url if base else None
    if "base_url" in entry:
        base_url = entry["base_url"]
        if base_url is not None:
            if not isinstance(base_url, str) or not base_url.strip():
                raise ModelSpecError(f"{where}: base_url must be a URL string, not {_show(base_url)}")
            base_url = _expand(where, "base_url", base_url)
    elif base is None:
        raise ModelSpecError(f"{where}: missing 'base_url' (the API root, e.g. http://127.0.0.1:8000/v1)")

    api = base.api if base else "openai"
    if "api" in entry:
        api = entry["api"]
        if api not in WIRE_FORMATS:
            raise ModelSpecError(
                f"{where}: api {_show(api)} is not a supported wire format; "
                f"use one of {', '.join(WIRE_FORMATS)}{_suggest(api, WIRE_FORMATS, noun='value')}"
            )

    api_version = base.api_version if base else None
    if "api_version" in entry:
        api_version = entry["api_version"]
        if api_version is not None and not (isinstance(api_version, str) and api_version.strip()):
            raise ModelSpecError(f"{where}: api_version must be a string like \"2024-10-21\", "
                                 f"not {_show(api_version)}")

    stream = base.stream if base else False
    if "stream" in entry:
        stream = entry["stream"]
        if not isinstance(stream, bool):
            raise ModelSpecError(f"{where}: stream must be true or false, not {_show(stream)}")

    checked = base.checked if base else None
    if "checked" in entry:
        raw_checked = entry["checked"]
        try:
            checked = datetime.date.fromisoformat(str(raw_checked)).isoformat() if raw_checked else None
        except ValueError:
            raise ModelSpecError(
                f"{where}: checked must be a date like 2025-08-15 (when the prices were "
                f"last compared with the provider's page), not {_show(raw_checked)}"
            ) from None

    api_key_env = base.api_key_env if base else None
    if "api_key_env" in entry:
        api_key_env = entry["api_key_env"]
        if api_key_env is not None and (not isinstance(api_key_env, str)
                                        or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env)):
            raise ModelSpecError(f"{where}: api_key_env must be an environment variable name "
                                 f"like OPENAI_API_KEY, not {_show(api_key_env)}")

    prices = _prices(where, entry, "prices", base.prices if base else {})

    timeout = base.timeout if base else 60.0
    if "timeout" in entry:
        timeout = entry["timeout"]
        if not _is_number(timeout) or timeout <= 0:
            raise ModelSpecError(f"{where}: timeout must be a positive number of seconds, "
                                 f"not {_show(timeout)}")
        timeout = float(timeout)

    max_retries = base.max_retries if base else None
    if "max_retries" in entry:
        max_retries = entry["max_retries"]
        if max_retries is not None:  # the run option's own bounds (it overrides EVALJOBS_MAX_RETRIES)
            try:
                run_option("max_retries").check(max_retries, "max_retries")
            except ConfigurationError as exc:
                raise ModelSpecError(f"{where}: {exc}") from None
            max_retries = int(max_retries)

    max_retry_after = base.max_retry_after if base else DEFAULT_MAX_RETRY_AFTER
    if "max_retry_after" in entry:
        max_retry_after = entry["max_retry_after"]
        if not _is_number(max_retry_after) or max_retry_after < 0:
            raise ModelSpecError(f"{where}: max_retry_after must be a number of seconds >= 0, "
                                 f"not {_show(max_retry_after)}")
        max_retry_after = float(max_retry_after)

    headers = dict(base.headers) if base else {}
    if "headers" in entry and entry["headers"] is not None:
        raw = entry["headers"]
        if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in raw.items()):
            raise ModelSpecError(f"{where}: headers must map header name -> string value")
        headers.update({k: _expand(where, f"header {k!r}", v) for k, v in raw.items()})

    batch = base.batch if base else "off"
    if "batch" in entry:
        raw_batch = entry["batch"]
        if raw_batch not in (True, False, "auto"):
            raise ModelSpecError(f"{where}: batch must be true, false or auto, not {_show(raw_batch)}")
        batch = {True: "on", False: "off"}.get(raw_batch, "auto")
    batch_api = base.batch_api if base else True
    if "batch_api" in entry:
        batch_api = entry["batch_api"]
        if not isinstance(batch_api, bool):
            raise ModelSpecError(f"{where}: batch_api must be true or false (whether the endpoint serves a "
                                 f"batch API), not {_show(batch_api)}")
    batch_prices = _prices(where, entry, "batch_prices", base.batch_prices if base else {})

    governor = dict(base.governor) if base else {}
    if "governor" in entry and entry["governor"] is not None:
        if not isinstance(entry["governor"], dict):
            raise ModelSpecError(f"{where}: governor must be a mapping (initial, ceiling, rpm, tpm, ...)")
        governor.update(entry["governor"])

    return ProviderConfig(name=name, base_url=base_url, api_key_env=api_key_env, prices=prices,
                          timeout=timeout, max_retries=max_retries, max_retry_after=max_retry_after,
                          governor=governor, headers=headers,
                          api=api, api_version=api_version, stream=stream, checked=checked, origin=origin,
                          batch=batch, batch_api=batch_api, batch_prices=batch_prices)


def _prices(where: str, entry: dict[str, Any], key: str, inherited: dict[str, Any]) -> dict[str, Any]:
    """``inherited`` prices with the entry's ``key`` (``prices`` or ``batch_prices``) laid over them."""
    prices = dict(inherited)
    raw = entry.get(key)
    if raw is not None:
        if not isinstance(raw, dict):
            raise ModelSpecError(f"{where}: {key} must map model -> [input, output] USD per million tokens "
                                 f"(or {{input, output, cached_input, cache_write}})")
        for model, pair in raw.items():
            prices[str(model)] = _price_pair(where, model, pair)
    return prices


def _price_pair(where: str, model: Any, pair: Any) -> Price:
    try:
        return parse_price(pair)
    except ValueError as exc:
        raise ModelSpecError(f"{where}: price for {_show(model)} must be [input, output] USD per million "
                             f"tokens or {{input, output, cached_input, cache_write}} ({exc}), "
                             f"not {_show(pair)}") from None


_NOT_LOOKED_UP = object()


def _lookup(prices: dict[str, Price], model: str) -> Price | None:
    """The exact model's price, else the longest matching pattern's, else ``"*"``'s, else None."""
    if model in prices:
        return prices[model]
    patterns = sorted((p for p in prices if p != "*" and any(c in p for c in "*?[")), key=len, reverse=True)
    for pattern in patterns:
        if fnmatch.fnmatchcase(model, pattern):
            return prices[pattern]
    return prices.get("*")


def _expand(where: str, what: str, value: str) -> str:
    def replace(match: re.Match) -> str:
        name = match.group(1)
        value = secret(name)
        if value is None:
            raise ModelSpecError(f"{where}: {what} uses ${{{name}}} but the environment variable "
                                 f"{name!r} is not set; export it or write the value literally")
        return value

    return _ENV_REF.sub(replace, value)


@dataclass(frozen=True)
class ModelSpec:
    """One model under test. ``spec`` is the canonical string that identifies it in results."""

    provider: str
    model: str
    label: str | None = None

    @property
    def spec(self) -> str:
        base = f"{self.provider}/{self.model}"
        return f"{base}@{self.label}" if self.label else base

    @property
    def display(self) -> str:
        return self.label or f"{self.provider}/{self.model}"

    def __str__(self) -> str:
        return self.spec


_INFERRED = (("gpt-*", "openai"), ("o1*", "openai"), ("o3*", "openai"), ("o4*", "openai"),
             ("claude-*", "anthropic"))


def parse_model_spec(text: str, providers: ProvidersConfig | None = None) -> ModelSpec:
    """Parse ``provider/model[@label]``, inferring the provider of bare well-known names.

    The provider ends at the FIRST ``/`` (model names may contain ``/``, as in
    ``vllm/meta-llama/Llama-3-8B``); the label starts at the LAST ``@``.
    """
    if not isinstance(text, str):
        raise ModelSpecError(f"model spec must be a string like 'openai/gpt-4o-mini', not {_show(text)}")
    if not text:
        raise ModelSpecError("empty model spec; write provider/model, e.g. openai/gpt-4o-mini")
    if any(ch.isspace() for ch in text):
        raise ModelSpecError(f"model spec {text!r} contains whitespace; write provider/model[@label] "
                             f"without spaces")
    base, label = text, None
    if "@" in text:
        base, label = text.rsplit("@", 1)
        if not label:
            raise ModelSpecError(f"model spec {text!r} has an empty label after '@'; "
                                 f"drop the '@' or write provider/model@label")
    if "/" in base:
        provider, model = base.split("/", 1)
        if not provider:
            raise ModelSpecError(f"model spec {text!r} has an empty provider; write provider/model")
        if not model:
            raise ModelSpecError(f"model spec {text!r} has an empty model name; write provider/model")
        if not _PROVIDER_NAME.fullmatch(provider):
            raise ModelSpecError(f"model spec {text!r}: provider {provider!r} must match [A-Za-z0-9_.-]+")
    else:
        if not base:
            raise ModelSpecError(f"model spec {text!r} has an empty model name; write provider/model@label")
        model = base
        inferred = _infer_provider(base)
        if inferred is None:
            raise ModelSpecError(f"cannot tell the provider of model spec {text!r}; write it as "
                                 f"provider/model (e.g. vllm/{base} or ollama/{base})")
        provider = inferred
    if providers is not None and provider not in providers:
        raise ModelSpecError(f"model spec {text!r}: unknown provider {provider!r} "
                             f"(known: {', '.join(providers.names)}); "
                             f"add it to a providers file and pass it with --providers FILE")
    return ModelSpec(provider=provider, model=model, label=label)


def _infer_provider(model: str) -> str | None:
    for pattern, provider in _INFERRED:
        if fnmatch.fnmatchcase(model, pattern):
            return provider
    if ":" in model:
        name, _, tag = model.partition(":")
        if name and tag:
            return "ollama"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _kind(value: Any) -> str:
    kinds: dict[type, str] = {dict: "a mapping", list: "a list", str: "a string"}
    return kinds.get(type(value), type(value).__name__)


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _suggest(key: Any, valid: tuple[str, ...] | list[str], *, noun: str = "key") -> str:
    return suggest(key, valid) or (f" (valid {noun}s: {', '.join(valid)})" if noun == "key" else "")
