"""The OpenAI chat-completions wire format (``POST {base_url}/chat/completions``, Bearer key).

Spoken by OpenAI and every OpenAI-compatible server (vLLM, Ollama, Groq, Together,
OpenRouter, DeepSeek, Mistral, Fireworks, Gemini's compatibility endpoint, the
simulated provider). Streaming is ``stream: true`` with ``data:`` chunks ending in
``data: [DONE]``; ``stream_options.include_usage`` asks for the token counts in a last chunk.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Mapping

from evaljobs.providers.batch_items import (CANCELLED, ENDED, ERRORED, EXPIRED, OPEN, SUCCEEDED, BatchCall,
                                            BatchItem, BatchStatus, number)
from evaljobs.providers.completion import Completion, RequestedToolCall
from evaljobs.network.errors import PermanentError, ProviderError, TransientError
from evaljobs.providers.wire._common import (
    classify,
    count,
    error_text,
    join_url,
    WireDefaults,
    provider_message,
    rate_limit_headers,
    request_body,
    text_of,
)


#: A batch's states while it is still open (the rest have ended).
_OPEN = ("validating", "in_progress", "finalizing", "cancelling")


class OpenAIWire(WireDefaults):
    name = "openai"

    def url(self, base_url: str, model: str, api_version: str | None) -> str:
        return join_url(base_url, "/chat/completions")

    def static_headers(self, api_version: str | None) -> dict[str, str]:
        return {}

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}

    def body(self, model: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None,
             temperature: float | None, max_tokens: int | None, extra: dict[str, Any] | None,
             stream: bool) -> dict[str, Any]:
        body = request_body(model, messages, tools=tools, temperature=temperature, max_tokens=max_tokens,
                            extra=extra)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def completion(self, data: Any, status: int, latency_ms: float, headers: dict[str, str]) -> Completion:
        return parse_completion(data, status, latency_ms, headers)

    def error(self, status: int, headers: Mapping[str, str], payload: bytes) -> ProviderError:
        return classify(status, headers, provider_message(payload))

    def limit_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        return rate_limit_headers(headers)

    def stream_reader(self) -> "OpenAIStream":
        return OpenAIStream()

    # -- the Batch API: a JSONL file uploaded, a batch of it created, output and error files read back --

    has_batch_api = True
    #: A batch carries our key in its metadata (``find`` matches on it, without reading results).
    batch_keeps_key = True
    #: Where the batches are listed and created (``/batches/{id}``, ``…/cancel`` under it).
    batches_path = "/batches"
    #: The endpoint a batch's lines are sent to (the line's ``url``; the batch's ``endpoint``).
    batch_endpoint = "/v1/chat/completions"

    def batch_submit(self, call: BatchCall, requests: list[tuple[str, dict[str, Any]]],
                     key: str) -> dict[str, Any]:
        """``POST /files`` (one JSONL line per request, purpose ``batch``), then ``POST /batches`` of it
        with ``metadata: {"evaljobs_key": key}``; the created batch as the provider answered."""
        lines = "".join(json.dumps({"custom_id": custom_id, "method": "POST", "url": self.batch_endpoint,
                                    "body": body}) + "\n" for custom_id, body in requests)
        file = call("POST", "/files", data={"purpose": "batch"},
                    files={"file": (f"evaljobs-{key}.jsonl", lines.encode(), "application/jsonl")})
        return call("POST", "/batches", json={"input_file_id": file["id"], "endpoint": self.batch_endpoint,
                                              "completion_window": "24h", "metadata": {"evaljobs_key": key}})

    def batch_page_params(self, after: str | None) -> dict[str, Any]:
        return {"limit": 100, **({"after": after} if after else {})}

    def batch_key(self, raw: dict[str, Any]) -> str | None:
        return (raw.get("metadata") or {}).get("evaljobs_key")

    def batch_status(self, raw: dict[str, Any]) -> BatchStatus:
        counts = raw.get("request_counts") or {}
        status = str(raw.get("status"))
        completed, failed = int(counts.get("completed") or 0), int(counts.get("failed") or 0)
        return BatchStatus(id=str(raw.get("id")), state=OPEN if status in _OPEN else ENDED,
                           provider_status=status, total=int(counts.get("total") or 0),
                           done=completed + failed, failed=failed, created_at=number(raw.get("created_at")),
                           raw=raw)

    def batch_result_files(self, status: BatchStatus, url_of: Callable[[str], str]) -> list[tuple[str, str]]:
        """``(what, url)`` of the output file and the error file, those the batch has."""
        return [(name.split("_")[0], url_of(f"/files/{status.raw[name]}/content"))
                for name in ("output_file_id", "error_file_id") if status.raw.get(name)]

    def batch_item(self, line: dict[str, Any]) -> BatchItem:
        custom_id = str(line.get("custom_id"))
        response, error = line.get("response"), line.get("error")
        if isinstance(response, dict) and response.get("status_code") == 200:
            completion = self.completion(response.get("body"), 200, 0.0, {})
            return BatchItem(custom_id, SUCCEEDED, completion=completion)
        if isinstance(response, dict):
            status = int(response.get("status_code") or 500)
            typed = self.error(status, {}, json.dumps(response.get("body")).encode())
            return BatchItem(custom_id, ERRORED, reason=typed.reason, error=typed)
        code = str((error or {}).get("code") or "batch_error")
        outcome = {"batch_expired": EXPIRED, "batch_cancelled": CANCELLED}.get(code, ERRORED)
        reason = f"{code}: {(error or {}).get('message') or ''}".rstrip(": ")
        return BatchItem(custom_id, outcome, reason=reason,
                         error=None if outcome != ERRORED else PermanentError(reason))


class OpenAIStream:
    """Folds ``chat.completion.chunk`` deltas back into one ``chat.completion`` body."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.fingerprint: str | None = None
        self.done = False
        self.error: dict[str, Any] | None = None

    def feed(self, event: str | None, data: str) -> bool:
        if data.strip() == "[DONE]":
            self.done = True
            return False
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise PermanentError(f"malformed JSON in a streamed chunk ({exc})") from None
        if not isinstance(chunk, dict):
            return False
        if chunk.get("error"):
            self.error = chunk
            return False
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        if isinstance(chunk.get("system_fingerprint"), str):
            self.fingerprint = chunk["system_fingerprint"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        first = False
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
                first = True
            for part in delta.get("tool_calls") or []:
                index = part.get("index", len(self.calls))
                call = self.calls.setdefault(index, {"id": None, "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                if part.get("id"):
                    call["id"] = part["id"]
                function = part.get("function") or {}
                if function.get("name"):
                    call["function"]["name"] += function["name"]
                if function.get("arguments"):
                    call["function"]["arguments"] += function["arguments"]
                first = True
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return first

    def result(self) -> dict[str, Any]:
        if self.error is not None:
            return self.error
        if not self.done and self.finish is None:
            raise TransientError("stream ended without a finish_reason or [DONE]; the answer is incomplete")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        data: dict[str, Any] = {"choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
                                "usage": self.usage or {}}
        if self.model:
            data["model"] = self.model
        if self.fingerprint:
            data["system_fingerprint"] = self.fingerprint
        return data


def parse_completion(data: Any, status: int, latency_ms: float, headers: dict[str, str]) -> Completion:
    if isinstance(data, dict) and "choices" not in data and data.get("error"):
        raise PermanentError(f"provider returned an error with HTTP {status}: {error_text(data)}",
                             status=status)
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or not isinstance(message, dict):
        keys = sorted(data)[:8] if isinstance(data, dict) else type(data).__name__
        raise PermanentError(f"unexpected response: no choices[0].message in the JSON body (got {keys})",
                             status=status)
    raw_calls = message.get("tool_calls") or []
    tool_calls = [_parse_tool_call(i, raw, status) for i, raw in enumerate(raw_calls)]
    raw_message: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if tool_calls:
        raw_message["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": _raw_arguments(raw)}}
            for call, raw in zip(tool_calls, raw_calls)
        ]
    given_usage = data.get("usage")
    usage = given_usage if isinstance(given_usage, dict) else {}
    input_tokens = count(usage.get("prompt_tokens", usage.get("input_tokens")))
    prompt_details = _mapping(usage.get("prompt_tokens_details") or usage.get("input_tokens_details"))
    output_details = _mapping(usage.get("completion_tokens_details") or usage.get("output_tokens_details"))
    fingerprint = data.get("system_fingerprint")
    return Completion(
        content=text_of(message.get("content")),
        tool_calls=tool_calls,
        input_tokens=input_tokens,
        output_tokens=count(usage.get("completion_tokens", usage.get("output_tokens"))),
        # cached_tokens are counted inside prompt_tokens (billed at the cached-input price)
        cache_read_tokens=min(input_tokens, count(prompt_details.get("cached_tokens"))),
        reasoning_tokens=(count(output_details["reasoning_tokens"])
                          if output_details.get("reasoning_tokens") is not None else None),
        system_fingerprint=fingerprint if isinstance(fingerprint, str) else None,
        finish_reason=choice.get("finish_reason"),
        latency_ms=latency_ms,
        raw_message=raw_message,
        headers=headers,
        model=data.get("model") if isinstance(data.get("model"), str) else None,
    )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_arguments(call_id: str, name: str, arguments: Any) -> RequestedToolCall:
    """A tool call from its arguments: a JSON object string (or an object some servers send)."""
    if isinstance(arguments, dict):
        return RequestedToolCall(call_id, name, arguments)
    text = arguments if isinstance(arguments, str) else ""
    if not text.strip():
        return RequestedToolCall(call_id, name, {})
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        return RequestedToolCall(call_id, name, {"_raw": text},
                                 arguments_error=f"invalid JSON arguments: {exc}")
    if not isinstance(parsed, dict):
        kind = type(parsed).__name__
        return RequestedToolCall(call_id, name, {"_raw": text},
                                 arguments_error=f"arguments are a JSON {kind}, not an object")
    return RequestedToolCall(call_id, name, parsed)


def _parse_tool_call(index: int, raw: Any, status: int) -> RequestedToolCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(name, str) or not name:
        raise PermanentError(f"unexpected response: tool_calls[{index}] has no function name", status=status)
    call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"call_{index}"
    return parse_arguments(call_id, name, function.get("arguments"))


def _raw_arguments(raw: dict[str, Any]) -> str:
    arguments = raw["function"].get("arguments")
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {})
