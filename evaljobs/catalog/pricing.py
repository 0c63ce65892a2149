"""What tokens cost, as providers bill them: uncached input, cache reads, cache writes, output.

Domain code: no network, no store. Providers report prompt caching in two shapes — OpenAI counts
``prompt_tokens_details.cached_tokens`` inside ``prompt_tokens``; Anthropic reports
``cache_read_input_tokens`` and ``cache_creation_input_tokens`` beside ``input_tokens`` — and the wire
formats read both into one :class:`Usage` whose ``input_tokens`` is every prompt token (cached or not),
of which ``cache_read_tokens`` and ``cache_write_tokens`` are parts. :func:`cost_of` prices each part at
its own price; :func:`cache_saving` is what the same tokens would have cost with no caching, minus that
(negative when cache writes cost more than they saved). Both are the one definition of their figure.

Unknown is not zero (invariant 15): cached tokens with no cache price known make the cost unknown
(None), never the full input price and never free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

#: The keys of a price written as a mapping, in the order of the list form.
PRICE_KEYS = ("input", "output", "cached_input", "cache_write", "cache_write_1h")


class Price(NamedTuple):
    """USD per million tokens. ``cached_input`` is the cache-read (cache hit) price, ``cache_write`` the
    price of writing the cache (Anthropic's 5-minute writes), ``cache_write_1h`` of its 1-hour writes;
    None: not known (a call that used that kind of token has an unknown cost)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    cache_write_1h: float | None = None

    def halved(self) -> "Price":
        """The same price at half (a batch API's discount, which composes with the cache prices)."""
        def half(value: float | None) -> float | None:
            return None if value is None else value / 2
        return Price(self.input / 2, self.output / 2, half(self.cached_input), half(self.cache_write),
                     half(self.cache_write_1h))


@dataclass(frozen=True)
class Usage:
    """The tokens of one or more calls. ``input_tokens`` counts every prompt token; ``cache_read_tokens``
    and ``cache_write_tokens`` (of which ``cache_write_1h_tokens`` were 1-hour writes) are parts of it.
    ``reasoning_tokens`` are part of ``output_tokens`` (None: the provider did not say)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    reasoning_tokens: int | None = None

    def __add__(self, other: "Usage") -> "Usage":
        reasoning = (None if self.reasoning_tokens is None and other.reasoning_tokens is None
                     else (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0))
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cache_read_tokens + other.cache_read_tokens,
                     self.cache_write_tokens + other.cache_write_tokens,
                     self.cache_write_1h_tokens + other.cache_write_1h_tokens, reasoning)

    @property
    def uncached_input_tokens(self) -> int:
        """Prompt tokens billed at the plain input price."""
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    @property
    def any(self) -> bool:
        return bool(self.input_tokens or self.output_tokens)

    def without_caching(self) -> "Usage":
        """The same tokens as if nothing had been read from or written to a cache."""
        return Usage(self.input_tokens, self.output_tokens, reasoning_tokens=self.reasoning_tokens)


def cost_of(usage: Usage, price: Price | None) -> float | None:
    """USD for ``usage`` at ``price``: uncached input + cache reads + cache writes + output, each at its
    own price. None when a price it needs is unknown; 0 for no tokens at all."""
    if not usage.any and not usage.cache_read_tokens and not usage.cache_write_tokens:
        return 0.0
    if price is None:
        return None
    total = usage.uncached_input_tokens * price.input + usage.output_tokens * price.output
    if usage.cache_read_tokens:
        if price.cached_input is None:
            return None
        total += usage.cache_read_tokens * price.cached_input
    writes_5m = usage.cache_write_tokens - usage.cache_write_1h_tokens
    if writes_5m > 0:
        if price.cache_write is None:
            return None
        total += writes_5m * price.cache_write
    if usage.cache_write_1h_tokens:
        if price.cache_write_1h is None:
            return None
        total += usage.cache_write_1h_tokens * price.cache_write_1h
    return total / 1_000_000


def cache_saving(usage: Usage, price: Price | None) -> float | None:
    """What prompt caching saved on ``usage`` at ``price``: its cost with no caching minus its cost
    (0 when nothing was cached; None when either cost is unknown)."""
    if not usage.cache_read_tokens and not usage.cache_write_tokens:
        return 0.0
    paid, uncached = cost_of(usage, price), cost_of(usage.without_caching(), price)
    if paid is None or uncached is None:
        return None
    return uncached - paid


def parse_price(value: Any) -> Price:
    """A price as a providers file writes it: ``[input, output]`` (optionally ``[…, cached_input,
    cache_write, cache_write_1h]``) or a mapping of :data:`PRICE_KEYS`; ValueError says what is wrong."""
    if isinstance(value, dict):
        unknown = [k for k in value if k not in PRICE_KEYS]
        if unknown or "input" not in value or "output" not in value:
            raise ValueError(f"a price mapping has input and output (and optionally cached_input, "
                             f"cache_write, cache_write_1h){f', not {unknown[0]!r}' if unknown else ''}")
        numbers = [value.get(key) for key in PRICE_KEYS]
    elif isinstance(value, (list, tuple)) and 2 <= len(value) <= len(PRICE_KEYS):
        numbers = list(value) + [None] * (len(PRICE_KEYS) - len(value))
    else:
        raise ValueError("expected [input, output] USD per million tokens or a mapping "
                         "{input, output, cached_input, cache_write}")
    for number in numbers:
        if number is not None and not (_is_number(number) and number >= 0):
            raise ValueError("every price is a number >= 0 (USD per million tokens)")
    input_price, output_price, *cache = (None if n is None else float(n) for n in numbers)
    assert input_price is not None and output_price is not None
    return Price(input_price, output_price, *cache)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


__all__ = ["PRICE_KEYS", "Price", "Usage", "cache_saving", "cost_of", "parse_price"]
