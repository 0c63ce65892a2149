"""The OpenAI chat-completions wire format (``POST {base_url}/chat/completions``, Bearer key).

Spoken by OpenAI and every OpenAI-compatible server (vLLM, Ollama, Groq, Together,
OpenRouter, DeepSeek, Mistral, Fireworks, Gemini's compatibility endpoint, the
simulated provider). Streaming is ``stream: true`` with ``data:`` chunks ending in
``data: [DONE]``; ``stream_options.include_usage`` asks for the token counts in a last chunk.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from evaljobs.providers.completion import Completion, RequestedToolCall
from evaljobs.providers.errors import PermanentError, ProviderError, TransientError
from evaljobs.providers.wire._common import (
    classify,
    count,
    error_text,
    join_url,
    provider_message,
    rate_limit_headers,
    text_of,
)


def request_body(model: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                 temperature: float | None = None, max_tokens: int | None = None,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON body of a chat completion request (also what the response cache keys on)."""
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


class OpenAIWire:
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
