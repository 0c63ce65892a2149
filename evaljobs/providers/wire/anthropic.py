"""The Anthropic Messages API (``POST {base_url}/messages``, ``x-api-key``, ``anthropic-version``).

The conversation is kept in the OpenAI chat shape everywhere else; this module
translates it on the way out and the answer on the way back:

* system/developer messages → the top-level ``system`` string;
* an assistant message's ``tool_calls`` → ``tool_use`` blocks (several in one turn);
* consecutive ``tool`` messages → one user message of ``tool_result`` blocks
  (the API wants user and assistant turns to alternate);
* tools ``{"type": "function", "function": {name, description, parameters}}`` →
  ``{name, description, input_schema}``;
* ``stop_reason`` → the OpenAI ``finish_reason`` (end_turn → stop, tool_use →
  tool_calls, max_tokens → length); its ``anthropic-ratelimit-*`` headers → the
  ``x-ratelimit-*`` names the governor reads; its error types → ours
  (``rate_limit_error`` → RateLimited, ``overloaded_error``/``api_error`` →
  TransientError, the rest → PermanentError).

``max_tokens`` is required by the API; ``DEFAULT_MAX_TOKENS`` is sent when the
caller gives none.
"""
from __future__ import annotations

import json
import time
from datetime import datetime
from collections.abc import Callable
from typing import Any, Mapping

from evaljobs.providers.batch_items import (CANCELLED, ENDED, ERRORED, EXPIRED, OPEN, SUCCEEDED, BatchCall,
                                            BatchItem, BatchStatus, stamp)
from evaljobs.providers.completion import Completion
from evaljobs.network.errors import (
    PermanentError,
    ProviderError,
    RateLimited,
    TransientError,
    parse_retry_after,
)
from evaljobs.providers.wire._common import (
    cap,
    classify,
    count,
    join_url,
    provider_message,
    WireDefaults,
    rate_limit_headers,
    text_of,
)
from evaljobs.providers.wire.openai import parse_arguments

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
                "refusal": "content_filter", "pause_turn": "pause_turn"}
#: Error types worth sending again; every other type is a permanent failure.
TRANSIENT_TYPES = ("overloaded_error", "api_error", "timeout_error")
#: The HTTP status a batch result's error type stands for (a result line carries only the type).
_ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                 "not_found_error": 404, "rate_limit_error": 429, "overloaded_error": 529}


class AnthropicWire(WireDefaults):
    name = "anthropic"

    def url(self, base_url: str, model: str, api_version: str | None) -> str:
        return join_url(base_url, "/messages")

    def static_headers(self, api_version: str | None) -> dict[str, str]:
        return {"anthropic-version": api_version or API_VERSION}

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def body(self, model: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None,
             temperature: float | None, max_tokens: int | None, extra: dict[str, Any] | None,
             stream: bool) -> dict[str, Any]:
        system, turns = to_anthropic_messages(messages)
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens or DEFAULT_MAX_TOKENS,
                                "messages": turns}
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [to_anthropic_tool(tool) for tool in tools]
        if temperature is not None:
            body["temperature"] = temperature
        if stream:
            body["stream"] = True
        if extra:
            body.update(extra)
        return body

    def completion(self, data: Any, status: int, latency_ms: float, headers: dict[str, str]) -> Completion:
        if isinstance(data, dict) and data.get("type") == "error":
            raise _typed_error(status, data, headers)
        content = data.get("content") if isinstance(data, dict) else None
        if not isinstance(content, list):
            keys = sorted(data)[:8] if isinstance(data, dict) else type(data).__name__
            raise PermanentError(
                f"unexpected response: no 'content' list in the Messages API body (got {keys})", status=status
            )
        texts: list[str] = []
        calls = []
        for index, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                texts.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                name = block.get("name")
                if not isinstance(name, str) or not name:
                    raise PermanentError(f"unexpected response: content[{index}] tool_use has no name",
                                         status=status)
                given_id = block.get("id")
                call_id = given_id if isinstance(given_id, str) else f"toolu_{index}"
                calls.append(parse_arguments(call_id, name, block.get("input")))
        text = "".join(texts)
        raw_message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            raw_message["tool_calls"] = [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name,
                              "arguments": call.arguments["_raw"] if call.arguments_error else
                              json.dumps(call.arguments)}}
                for call in calls]
        given = data.get("usage")
        usage: dict[str, Any] = given if isinstance(given, dict) else {}
        stop = data.get("stop_reason")
        # input_tokens is the uncached part; cache reads and writes are reported beside it. The Completion
        # counts every prompt token in input_tokens, the cached parts apart (each has its own price).
        reads = count(usage.get("cache_read_input_tokens"))
        writes = count(usage.get("cache_creation_input_tokens"))
        found = usage.get("cache_creation")  # the writes by duration (5-minute and 1-hour prices differ)
        creation: dict[str, Any] = found if isinstance(found, dict) else {}
        return Completion(
            content=text, tool_calls=calls,
            input_tokens=count(usage.get("input_tokens")) + writes + reads,
            cache_read_tokens=reads, cache_write_tokens=writes,
            cache_write_1h_tokens=min(writes, count(creation.get("ephemeral_1h_input_tokens"))),
            output_tokens=count(usage.get("output_tokens")),
            finish_reason=STOP_REASONS.get(stop, stop) if isinstance(stop, str) else None,
            latency_ms=latency_ms, raw_message=raw_message, headers=headers,
            model=data.get("model") if isinstance(data.get("model"), str) else None)

    def error(self, status: int, headers: Mapping[str, str], payload: bytes) -> ProviderError:
        try:
            data = json.loads(payload)
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            return _typed_error(status, data, headers)
        return classify(status, headers, provider_message(payload))

    def limit_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """``retry-after`` and ``anthropic-ratelimit-*`` as they came, plus their ``x-ratelimit-*`` readings.

        The governor reads ``x-ratelimit-remaining-{requests,tokens}`` and
        ``x-ratelimit-reset-…`` (a duration); Anthropic sends the remaining count
        and an RFC 3339 reset time, converted here to seconds from now.
        """
        found = rate_limit_headers(headers)
        lowered = {k.lower(): v for k, v in headers.items() if k.lower().startswith("anthropic-ratelimit-")}
        found.update(lowered)
        for kind in ("requests", "tokens"):
            remaining = lowered.get(f"anthropic-ratelimit-{kind}-remaining")
            if remaining is not None:
                found[f"x-ratelimit-remaining-{kind}"] = remaining
                found[f"x-ratelimit-limit-{kind}"] = lowered.get(f"anthropic-ratelimit-{kind}-limit", "")
                seconds = _seconds_until(lowered.get(f"anthropic-ratelimit-{kind}-reset"))
                if seconds is not None:
                    found[f"x-ratelimit-reset-{kind}"] = f"{seconds:.3f}s"
        return found

    def stream_reader(self) -> "AnthropicStream":
        return AnthropicStream()

    seed_unsupported = "the Anthropic Messages API takes no seed"
    #: The Messages API requires ``max_tokens``.
    probe_max_tokens: int | None = 16

    # -- Message Batches: the requests in one POST, results as a JSONL file at ``results_url`` ----------

    has_batch_api = True
    #: A Message Batch carries no metadata: ``find`` matches a batch by the custom ids of its results.
    batch_keeps_key = False
    batches_path = "/messages/batches"

    def batch_submit(self, call: BatchCall, requests: list[tuple[str, dict[str, Any]]],
                     key: str) -> dict[str, Any]:
        """``POST /messages/batches`` with ``requests: [{custom_id, params}]`` (``key`` cannot be kept)."""
        lines = [{"custom_id": custom_id, "params": body} for custom_id, body in requests]
        return call("POST", self.batches_path, json={"requests": lines})

    def batch_page_params(self, after: str | None) -> dict[str, Any]:
        return {"limit": 100, **({"after_id": after} if after else {})}

    def batch_key(self, raw: dict[str, Any]) -> str | None:
        return None

    def batch_status(self, raw: dict[str, Any]) -> BatchStatus:
        counts = raw.get("request_counts") or {}
        total = sum(
            int(counts.get(k) or 0) for k in ("processing", "succeeded", "errored", "canceled", "expired")
        )
        failed = sum(int(counts.get(k) or 0) for k in ("errored", "canceled", "expired"))
        status = str(raw.get("processing_status"))
        return BatchStatus(id=str(raw.get("id")), state=ENDED if status == "ended" else OPEN,
                           provider_status=status, total=total,
                           done=total - int(counts.get("processing") or 0), failed=failed,
                           created_at=stamp(raw.get("created_at")), raw=raw)

    def batch_result_files(self, status: BatchStatus, url_of: Callable[[str], str]) -> list[tuple[str, str]]:
        """The one results file: at the batch's ``results_url``, else where the API keeps it."""
        return [("results", str(status.raw.get("results_url")
                                or url_of(f"{self.batches_path}/{status.id}/results")))]

    def batch_item(self, line: dict[str, Any]) -> BatchItem:
        custom_id = str(line.get("custom_id"))
        result = line.get("result") or {}
        kind = result.get("type")
        if kind == "succeeded":
            completion = self.completion(result.get("message"), 200, 0.0, {})
            return BatchItem(custom_id, SUCCEEDED, completion=completion)
        if kind == "errored":
            body = result.get("error") or {}
            error_type = str((body.get("error") or {}).get("type") or "api_error")
            typed = self.error(_ERROR_STATUS.get(error_type, 500), {}, json.dumps(body).encode())
            return BatchItem(custom_id, ERRORED, reason=typed.reason, error=typed)
        outcome = CANCELLED if kind == "canceled" else EXPIRED
        return BatchItem(
            custom_id, outcome, reason="batch_cancelled" if outcome == CANCELLED else "batch_expired"
        )


class AnthropicStream:
    """Folds the Messages event stream (message_start … message_stop) back into one message body."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, list[str]] = {}
        self.stopped = False
        self.error: dict[str, Any] | None = None

    def feed(self, event: str | None, data: str) -> bool:
        try:
            payload = json.loads(data)
        except ValueError as exc:
            raise PermanentError(f"malformed JSON in a streamed {event or 'event'} ({exc})") from None
        kind = payload.get("type") if isinstance(payload, dict) else None
        kind = kind or event
        if kind == "message_start":
            self.message = dict(payload.get("message") or {})
            self.message["content"] = []
        elif kind == "content_block_start":
            block = dict(payload.get("content_block") or {})
            self.blocks[int(payload.get("index", len(self.blocks)))] = block
            return block.get("type") == "tool_use" or bool(block.get("text"))
        elif kind == "content_block_delta":
            index = int(payload.get("index", 0))
            delta = payload.get("delta") or {}
            block = self.blocks.setdefault(index, {"type": "text", "text": ""})
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + str(delta.get("text", ""))
                return bool(delta.get("text"))
            if delta.get("type") == "input_json_delta":
                self.partial_json.setdefault(index, []).append(str(delta.get("partial_json", "")))
                return True
        elif kind == "message_delta":
            if self.message is None:
                self.message = {"content": []}
            delta = payload.get("delta") or {}
            if "stop_reason" in delta:
                self.message["stop_reason"] = delta["stop_reason"]
            usage = payload.get("usage") or {}
            merged = dict(self.message.get("usage") or {})
            merged.update({k: v for k, v in usage.items() if v is not None})
            self.message["usage"] = merged
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            self.error = payload
        return False

    def result(self) -> dict[str, Any]:
        if self.error is not None:
            return self.error
        if self.message is None or not self.stopped:
            raise TransientError("stream ended before message_stop; the answer is incomplete")
        content = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.get("type") == "tool_use" and index in self.partial_json:
                text = "".join(self.partial_json[index])
                try:
                    block["input"] = json.loads(text) if text.strip() else {}
                except ValueError:
                    block["input"] = text  # parse_arguments reports the bad JSON
            content.append(block)
        message = dict(self.message)
        message["content"] = content
        return message


def to_anthropic_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, alternating user/assistant messages of content blocks) from an OpenAI conversation."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})

    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(text_of(content))
        elif role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": str(message.get("tool_call_id") or ""),
                          "content": text_of(content)}])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if text_of(content):
                blocks.append({"type": "text", "text": text_of(content)})
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    try:
                        arguments = json.loads(arguments) if arguments.strip() else {}
                    except ValueError:
                        arguments = {"_raw": arguments}
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                               "input": arguments if isinstance(arguments, dict) else {}})
            add("assistant", blocks or [{"type": "text", "text": ""}])
        else:
            add("user", _user_blocks(content))
    return "\n\n".join(s for s in system if s), turns


def to_anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function") if tool.get("type") == "function" else None
    if not isinstance(function, dict):
        return tool  # already in the Anthropic shape (or a server tool): sent as given
    converted = {"name": function.get("name"),
                 "input_schema": function.get("parameters") or {"type": "object", "properties": {}}}
    if function.get("description"):
        converted["description"] = function["description"]
    return converted


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        blocks = [{"type": "text", "text": str(part.get("text", ""))} for part in content
                  if isinstance(part, dict) and part.get("type") in ("text", None)]
        return blocks or [{"type": "text", "text": text_of(content)}]
    return [{"type": "text", "text": text_of(content)}]


def _typed_error(status: int, data: dict[str, Any], headers: Mapping[str, str]) -> ProviderError:
    given = data.get("error")
    error = given if isinstance(given, dict) else {}
    kind = str(error.get("type") or "error")
    message = cap(f"{kind}: {error.get('message') or ''}".strip().rstrip(":"))
    if kind == "rate_limit_error" or status == 429:
        return RateLimited(f"HTTP {status} from provider: {message}", status=status,
                           retry_after=parse_retry_after(headers))
    if kind in TRANSIENT_TYPES or status == 408 or status >= 500:
        return TransientError(f"HTTP {status} from provider: {message}", status=status)
    return PermanentError(f"HTTP {status} from provider: {message}", status=status)


def _seconds_until(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, when.timestamp() - time.time())
