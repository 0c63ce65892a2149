"""The timeline of one conversation: every provider call's timing, and its raw request and response when kept.

The timing of each turn is always kept (a few numbers a turn). The raw bodies are kept only when the
``store_transcripts`` setting (``EVALJOBS_STORE_TRANSCRIPTS``, ``evaljobs run --trace-content``) asks:
they repeat the whole conversation on every turn and may hold what a prompt or tool returned. Kept
bodies are scrubbed of the provider's API key, its configured header values and any bearer token
before they leave this module, and each is cut at :data:`BODY_CAP` characters.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from evaljobs.redact import redact_text, register_secret

#: Characters kept of one request or response body (a note says how much was cut).
BODY_CAP = 65536
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}")


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` without the given secrets, bearer tokens and URL passwords: the one redaction
    (``evaljobs.redact``), which scrubs every registered secret in each of its forms (raw, URL-encoded,
    JSON-escaped, base64)."""
    for secret in secrets:
        register_secret(secret)
    return redact_text(_BEARER.sub("Bearer ***", text))


def encode(body: Any, secrets: Iterable[str | None]) -> str | None:
    """A request or response body as text (JSON pretty-printed when it is JSON), scrubbed and capped."""
    if body is None:
        return None
    if isinstance(body, (bytes, bytearray)):
        text = bytes(body).decode("utf-8", errors="replace")
        try:
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    elif isinstance(body, str):
        text = body
    else:
        text = json.dumps(body, indent=2, ensure_ascii=False, default=str)
    text = scrub(text, secrets)
    if len(text) > BODY_CAP:
        text = text[:BODY_CAP] + f"\n…[{len(text) - BODY_CAP:,} more characters not kept]"
    return text


def turn_entry(turn: int, at_ms: float, completion: Any, *, keep_content: bool,
               secrets: Iterable[str | None] = ()) -> dict[str, Any]:
    """One provider call of the conversation: when it started (ms from the conversation's start), how long
    it took, tokens, why it stopped, whether the response cache answered; the bodies when ``keep_content``."""
    entry: dict[str, Any] = {
        "turn": turn, "at_ms": round(at_ms, 1), "ms": round(float(completion.latency_ms or 0.0), 1),
        "input_tokens": completion.input_tokens, "output_tokens": completion.output_tokens,
        "finish_reason": completion.finish_reason, "cached": bool(getattr(completion, "cached", False)),
        "tools": []}
    if completion.ttft_ms is not None:
        entry["ttft_ms"] = round(float(completion.ttft_ms), 1)
    for part in ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens"):
        if getattr(completion, part, None):  # the prompt cache's part of the input, reasoning's of the output
            entry[part] = getattr(completion, part)
    if getattr(completion, "model", None):  # the model version the provider says answered
        entry["model"] = completion.model
    if keep_content:
        secrets = list(secrets)
        entry["request"] = encode(getattr(completion, "request_body", None), secrets)
        entry["response"] = encode(getattr(completion, "response_body", None), secrets)
    return entry


__all__ = ["BODY_CAP", "encode", "scrub", "turn_entry"]
