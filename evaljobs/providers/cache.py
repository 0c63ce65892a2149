"""The response cache (``evaljobs run --cache``): unchanged provider calls are not paid for twice.

A catalog is cheap to run on every agent change only if the pairs that did not
change cost nothing. :class:`CachingClient` wraps anything with a chat
client's ``complete(model, messages, …)`` and answers a call from the
database when the same request was answered successfully before:

* **Key**: sha256 of (provider, model, the canonical JSON request body exactly
  as the client sends it, the adapter version, and the epoch for epochs after
  the first). The epoch is in the key so that ``--epochs N --cache`` still makes
  N independent samples instead of one sample read back N times; a run made with
  ``--cache-across-epochs`` leaves it out (every epoch reuses one answer), and
  epoch 0 keys are the keys of a run without epochs. The per-call ``timeout`` and
  the governor's ``first`` hint are not part of the request, so not of the key.
  Bump the adapter's ``version`` when what it sends or how it reads answers
  changes, and every old entry stops matching.
* **Shared**: entries live where the :class:`CacheBackend` keeps them — the
  pipeline binds it to the database's ``cache`` table (``evaljobs.store``), so
  every worker on every machine shares them. Each lookup and write is its own
  short statement; nothing is held across the provider call. (This module
  does not import the store: the store is a higher layer.)
* **Errors are never cached**: only a ``Completion`` the client returned is
  written; any exception passes through untouched.
* **TTL**: an entry older than ``ttl`` seconds is ignored (default 7 days,
  ``EVALJOBS_CACHE_TTL`` via :attr:`evaljobs.config.Settings.cache_ttl`, e.g. ``3600``, ``12h`` or ``7d``);
  ``evaljobs cache clear [--older-than AGE]`` deletes entries.
* **Marked**: an answer from the cache is a :class:`CachedCompletion`
  (``cached=True``); the adapter marks a replay ``cached`` when every model turn
  came from the cache, and that flag travels to the result and the report.

The cache sits in front of the governor (:class:`evaljobs.providers.calls.ProviderCalls`
wraps the governed call path in it), so a hit takes no permit from the
provider's shared budget.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any, Iterator, NamedTuple, Protocol

from evaljobs.config import Settings, settings as current_settings
from evaljobs.errors import ConfigurationError
from evaljobs.providers.completion import Completion, RequestedToolCall
from evaljobs.providers.wire import request_body

ENV_TTL = "EVALJOBS_CACHE_TTL"
DEFAULT_TTL = 7 * 24 * 3600.0
#: Bumped when the stored value's shape changes.
FORMAT = 1

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


class CacheConfigError(ConfigurationError):
    """A TTL or age that cannot be read (one line naming the value)."""


def parse_duration(text: str | float | int, *, what: str = "duration") -> float:
    """Seconds from ``90``, ``90s``, ``30m``, ``12h``, ``7d`` or ``2w``."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _DURATION.match(str(text))
        if match is None:
            raise CacheConfigError(f"{what} {text!r} is not a duration: use seconds or a number with "
                                   "s, m, h, d or w (e.g. 12h, 7d)")
        value = float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]
    if value < 0:
        raise CacheConfigError(f"{what} {text!r} is negative")
    return value


def default_ttl(settings: Settings | None = None) -> float:
    """``$EVALJOBS_CACHE_TTL`` (:attr:`Settings.cache_ttl`) in seconds, else 7 days."""
    text = (settings or current_settings()).cache_ttl
    return parse_duration(text, what=ENV_TTL) if text else DEFAULT_TTL


class CacheBackend(Protocol):
    """Where cached answers live; the pipeline binds the store's cache table (any object with these)."""

    def get(self, key: str, ttl: float) -> str | None:
        """The value written under ``key`` less than ``ttl`` seconds ago, else None."""

    def put(self, key: str, value: str, *, provider: str, model: str) -> None:
        """Store (or refresh) ``value`` under ``key``."""

    def clear(self, older_than: float | None = None) -> int:
        """Delete entries older than ``older_than`` seconds (all with None); how many were deleted."""


class ResponseCache(NamedTuple):
    """The response cache of a run with ``--cache``: a backend and how long its answers stay valid."""

    backend: CacheBackend
    ttl: float = DEFAULT_TTL


@dataclass
class CachedCompletion(Completion):
    """A completion answered from the cache (no provider call was made for it)."""

    cached: bool = True


class Completer(Protocol):
    """Anything with a chat client's ``complete(model, messages, **kwargs)``."""

    def complete(self, model: str, messages: list[dict[str, Any]], **kwargs: Any) -> Completion: ...


#: The epoch of the pair being evaluated in this thread/task (see :func:`for_epoch`).
_epoch: ContextVar[int] = ContextVar("evaljobs_cache_epoch", default=0)


@contextmanager
def for_epoch(epoch: int) -> Iterator[None]:
    """Key the cache lookups made inside this block by ``epoch`` (0: the key of a run without epochs).

    A context variable rather than an argument: the cache sits under the adapter, which
    knows nothing of epochs, and a host adapter must not have to pass one through.
    """
    token = _epoch.set(int(epoch))
    try:
        yield
    finally:
        _epoch.reset(token)


def cache_key(provider: str, model: str, body: dict[str, Any], adapter_version: str = "",
              epoch: int = 0) -> str:
    """sha256 of (provider, model, canonical request body JSON, adapter version[, epoch]), as hex.

    The epoch is in the key only when it is not 0, so single-epoch runs keep their keys.
    """
    fields = {
        "format": FORMAT,
        "provider": provider,
        "model": model,
        "body": body,
        "adapter": adapter_version,
    }
    if epoch:
        fields["epoch"] = int(epoch)
    canonical = json.dumps(fields,
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _encode(completion: Completion) -> str:
    return json.dumps({
        "content": completion.content,
        "tool_calls": [asdict(call) for call in completion.tool_calls],
        "input_tokens": completion.input_tokens,
        "output_tokens": completion.output_tokens,
        "finish_reason": completion.finish_reason,
        "raw_message": completion.raw_message,
        "model": completion.model,
        "latency_ms": completion.latency_ms,
        # a batch's answers travel in this encoding too: what the provider billed comes with them
        **{name: value for name in _USAGE_PARTS if (value := getattr(completion, name))},
    }, ensure_ascii=False, separators=(",", ":"))


def _decode(text: str, latency_ms: float) -> CachedCompletion:
    data = json.loads(text)
    return CachedCompletion(
        content=data["content"],
        tool_calls=[RequestedToolCall(**call) for call in data["tool_calls"]],
        input_tokens=data["input_tokens"],
        output_tokens=data["output_tokens"],
        finish_reason=data["finish_reason"],
        latency_ms=latency_ms,
        raw_message=data["raw_message"],
        headers={},
        model=data.get("model"),
        **{name: data[name] for name in _USAGE_PARTS if name in data},
    )


#: The parts of a completion's usage, and who answered, that the encoding keeps when present.
_USAGE_PARTS = ("cache_read_tokens", "cache_write_tokens", "cache_write_1h_tokens", "reasoning_tokens",
                "system_fingerprint")


class CachingClient:
    """``client`` with a response cache (``backend``) in front; the same ``complete(...)``.

    ``client`` is a :class:`~evaljobs.providers.client.ChatClient` or anything with its
    ``complete(model, messages, **kwargs)`` (e.g. :class:`~evaljobs.providers.calls.GovernedCalls`); keyword
    arguments other than the request-body ones (``timeout``, ``first``) are passed
    through to it on a miss. ``hits``/``misses`` count this wrapper's lookups.
    """

    def __init__(self, client: Completer, provider_name: str, ttl: float | None = None, *,
                 backend: CacheBackend, adapter_version: str = ""):
        self.client = client
        self.backend = backend
        self.provider_name = provider_name
        self.ttl = default_ttl() if ttl is None else float(ttl)
        self.adapter_version = adapter_version
        self.hits = 0
        self.misses = 0

    def complete(self, model: str, messages: list[dict[str, Any]], *,
                 tools: list[dict[str, Any]] | None = None, temperature: float | None = None,
                 max_tokens: int | None = None, extra: dict[str, Any] | None = None,
                 **kwargs: Any) -> Completion:
        body = request_body(model, messages, tools=tools, temperature=temperature, max_tokens=max_tokens,
                            extra=extra)
        key = cache_key(self.provider_name, model, body, self.adapter_version, _epoch.get())
        started = time.perf_counter()
        found = self.backend.get(key, self.ttl) if self.ttl > 0 else None
        if found is not None:
            self.hits += 1
            return _decode(found, (time.perf_counter() - started) * 1000.0)
        self.misses += 1
        completion = self.client.complete(model, messages, tools=tools, temperature=temperature,
                                          max_tokens=max_tokens, extra=extra, **kwargs)
        if self.ttl > 0:
            self.backend.put(key, _encode(completion), provider=self.provider_name, model=model)
        return completion


def is_cached(completion: Completion) -> bool:
    return bool(getattr(completion, "cached", False))


__all__ = [
    "CacheBackend",
    "CachingClient",
    "CachedCompletion",
    "Completer",
    "ResponseCache",
    "cache_key",
    "request_body",
    "default_ttl",
    "for_epoch",
    "parse_duration",
    "is_cached",
    "CacheConfigError",
    "DEFAULT_TTL",
    "ENV_TTL",
]
