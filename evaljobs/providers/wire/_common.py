"""Pieces every wire format shares: URL joining, error classification, SSE framing, small coercions."""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from evaljobs.network.errors import (
    PermanentError,
    ProviderError,
    RateLimited,
    TransientError,
    parse_retry_after,
)
from evaljobs.redact import redact_text

def request_body(model: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                 temperature: float | None = None, max_tokens: int | None = None,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A chat request as every wire format receives it (OpenAI's chat body, as it happens), and what the
    response cache keys on: one key for the same request whatever format carries it."""
    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
    if temperature is not None:
        body["temperature"] = temperature
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if extra:
        body.update(extra)
    return body


class WireDefaults:
    """What most formats answer alike (a format subclasses this and overrides what differs): a seed is
    sent, the probe leaves ``max_tokens`` out, any well-formed base URL will do, batch paths sit under
    the base URL, and there is no batch API until the format says so."""

    seed_unsupported = ""
    probe_max_tokens: int | None = None
    example_base_url = "https://HOST/v1"
    has_batch_api = False

    def endpoint_problem(self, base_url: str, api_version: str | None, fix: str) -> str | None:
        return None

    def batch_url(self, base_url: str, path: str, api_version: str | None) -> str:
        return join_url(base_url, path)


#: How much of a provider's own error message is kept in a reason.
PROVIDER_MESSAGE_CAP = 200


def join_url(base_url: str, path: str, query: Mapping[str, str] | None = None) -> str:
    """``base_url`` + ``path``, keeping a query string of the base URL at the end where it belongs.

    ``https://h/openai/deployments/d?api-version=X`` + ``/chat/completions`` is
    ``https://h/openai/deployments/d/chat/completions?api-version=X``; ``query``
    adds parameters the base URL does not already carry.
    """
    parts = urlsplit(base_url.strip())
    root = parts.path.rstrip("/")
    if path and root.endswith(path):  # a full endpoint URL (an Azure deployment's …/chat/completions?…)
        path = ""
    pairs = [p for p in parts.query.split("&") if p] if parts.query else []
    present = {p.split("=", 1)[0] for p in pairs}
    for key, value in (query or {}).items():
        if key not in present and value is not None:
            pairs.append(f"{key}={value}")
    return urlunsplit((parts.scheme, parts.netloc, root + path, "&".join(pairs),
                       parts.fragment))


def classify(status: int, headers: Mapping[str, str], message: str) -> ProviderError:
    """The typed error for a non-2xx answer: 429 rate-limited, 408/5xx transient, other 4xx permanent."""
    if status == 429:
        return RateLimited(f"HTTP 429 from provider: {message}", retry_after=parse_retry_after(headers))
    if status == 408 or status >= 500:
        return TransientError(f"HTTP {status} from provider: {message}", status=status)
    if status >= 400:
        return PermanentError(f"HTTP {status} from provider: {message}", status=status)
    location = headers.get("location")
    hint = f" to {location}" if location else ""
    return PermanentError(f"unexpected HTTP {status}{hint} from provider; check the base URL", status=status)


def provider_message(payload: bytes) -> str:
    """The provider's own error message, from the usual JSON shapes or the raw text, cut short."""
    try:
        data = json.loads(payload)
    except ValueError:
        data = None
    text = error_text(data) if isinstance(data, dict) else ""
    if not text:
        text = payload[: PROVIDER_MESSAGE_CAP * 4].decode("utf-8", "replace")
    return cap(text)


def cap(text: str) -> str:
    """One line, cut short — scrubbed of every configured secret first, so a cut never leaves a
    secret's first half behind where the whole would have been recognised."""
    text = " ".join(redact_text(text).split()) or "no error message"
    if len(text) > PROVIDER_MESSAGE_CAP:
        text = text[: PROVIDER_MESSAGE_CAP - 1] + "…"
    return text


def error_text(data: dict[str, Any]) -> str:
    error = data.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error.get("code") or "")
    if isinstance(error, str):
        return error
    for key in ("message", "detail"):
        if isinstance(data.get(key), str):
            return data[key]
    return ""


def rate_limit_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The ``x-ratelimit-*`` and ``retry-after*`` headers, lower-cased (what the governor reads)."""
    return {k.lower(): v for k, v in headers.items()
            if k.lower().startswith("x-ratelimit-") or k.lower().startswith("retry-after")}


def text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


#: The most tokens one answer may report: a trillion, a thousand times any context window. A larger
#: figure (10^30 was seen) is not usage, and storing it failed the result's insert, so the pair's
#: message was retried out and the run never completed: such an answer is refused as a provider error.
MAX_TOKENS = 10**12


def count(value: Any) -> int:
    """A token count from a usage field: 0 when absent or not a number; out of range is a provider error."""
    try:
        number = int(value)
    except OverflowError:  # an infinite float
        raise PermanentError(
            f"the provider reported a token count of {value!r}: not a usage figure"
        ) from None
    except (TypeError, ValueError):
        return 0
    if number > MAX_TOKENS:
        raise PermanentError(
            f"the provider reported {number:.3g} tokens for one answer (more than {MAX_TOKENS:.0e}): "
            "not a usage figure, the answer is refused"
        )
    return max(0, number)


def sse_events(lines: Iterator[bytes]) -> Iterator[tuple[str | None, str]]:
    """``(event, data)`` for each Server-Sent Event in an iterator of lines (without line ends).

    Follows the SSE rules that matter here: ``event:`` and ``data:`` fields, several
    ``data:`` lines joined by newlines, comments (``:``) ignored, a blank line ends an event.
    """
    event: str | None = None
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        yield event, "\n".join(data)
