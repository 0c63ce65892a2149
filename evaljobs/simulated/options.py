"""``--simulate``/``mock-provider`` option strings: parsed and checked in one line each.

Kept apart from the server so the CLI can check ``evaljobs bench --simulate …``
without importing the server (start-up time), and the server validates its own
keyword arguments with the same rules.
"""
from __future__ import annotations

import math
from typing import Any

_OPTION_TYPES: dict[str, type] = {"host": str, "port": int, "latency": float, "jitter": float,
                                  "max_concurrent": int, "rpm": int, "error_rate": float, "seed": int,
                                  "retry_after": float, "stream_interval": float, "batch_delay": float,
                                  "batch_window": float}


def parse_simulate_options(text: str) -> dict[str, Any]:
    """``"latency=4.6,jitter=0.5,max_concurrent=8,rpm=600,error_rate=0.01"`` → keyword arguments.

    Raises a one-line ``ValueError`` naming the bad key or value.
    """
    options: dict[str, Any] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip().replace("-", "_"), value.strip()
        if not sep or not key:
            raise ValueError(f"simulate option {item!r} is not key=value "
                             f"(e.g. latency=4.6,max_concurrent=8)")
        if key not in _OPTION_TYPES:
            raise ValueError(f"unknown simulate option {key!r}; known: {', '.join(_OPTION_TYPES)}")
        kind = _OPTION_TYPES[key]
        if key in ("max_concurrent", "rpm", "batch_window") and value.lower() in ("", "none"):
            options[key] = None
            continue
        if not value:
            raise ValueError(f"simulate option {key} needs a value, e.g. {key}=1")
        try:
            options[key] = kind(value)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise ValueError(f"simulate option {key}={value!r} is not {noun}") from None
    check_options(**{k: v for k, v in options.items() if k not in ("host", "seed")})
    return options


def check_options(**options: Any) -> None:
    for key in ("latency", "jitter", "retry_after", "stream_interval", "batch_delay", "batch_window"):
        value = options.get(key)
        if value is not None and (not value >= 0 or math.isinf(value)):
            raise ValueError(f"simulate option {key}={value!r} must be a number of seconds >= 0")
    for key in ("max_concurrent", "rpm"):
        value = options.get(key)
        if value is not None and value < 1:
            raise ValueError(f"simulate option {key}={value!r} must be a positive integer (or none)")
    rate = options.get("error_rate")
    if rate is not None and not 0.0 <= rate <= 1.0:
        raise ValueError(f"simulate option error_rate={rate!r} must be between 0 and 1")
    port = options.get("port")
    if port is not None and not 0 <= port <= 65535:
        raise ValueError(f"simulate option port={port!r} must be between 0 and 65535")
