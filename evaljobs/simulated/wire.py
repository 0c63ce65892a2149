"""The simulated provider's two wire formats: OpenAI chat completions and Anthropic Messages, plain and
streamed.

The answer logic works on OpenAI-shaped messages; an Anthropic request is
translated into that shape on the way in (``from_anthropic``), and every answer
is rendered in the format it was asked in: a JSON body, OpenAI ``data:`` chunks
ending in ``data: [DONE]``, or Anthropic's ``message_start … message_stop``
event stream. ``SERVER_WIRES`` holds each format's side of it (a ``ServerWire``): the server asks it,
never a format's name. The shapes follow the official SDKs' own types (``openai.types.chat``,
``anthropic.types``), and the tests run both SDKs against this server.
"""
from __future__ import annotations

import json
import time
from typing import Any, Protocol

from evaljobs.simulated.answers import completion_body

#: Anthropic error ``type`` for an HTTP status (what its API sends).
ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                         404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                         500: "api_error", 529: "overloaded_error"}
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
#: Characters of text per streamed delta.
CHUNK_CHARS = 16


class RequestError(ValueError):
    """A request body the API would refuse with HTTP 400 (one line)."""


# -- requests -----------------------------------------------------------------------------


def from_openai(payload: Any) -> tuple[str, list[dict[str, Any]], Any]:
    """(model, messages, tools) of a chat-completions body."""
    if not isinstance(payload, dict):
        raise RequestError("request body must be a JSON object")
    model, messages = payload.get("model"), payload.get("messages")
    if not isinstance(model, str) or not isinstance(messages, list) or not all(
            isinstance(m, dict) for m in messages):
        raise RequestError("request body must be JSON with a string 'model' and a list of message objects "
                           "'messages'")
    return model, messages, payload.get("tools")


def from_anthropic(payload: Any) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(model, OpenAI-shaped messages, OpenAI-shaped tools) of a Messages API body."""
    if not isinstance(payload, dict):
        raise RequestError("request body must be a JSON object")
    model, turns = payload.get("model"), payload.get("messages")
    if (
        not isinstance(model, str)
        or not isinstance(turns, list)
        or not all(isinstance(m, dict) for m in turns)
    ):
        raise RequestError("request body must be JSON with a string 'model' and a list of message objects "
                           "'messages'")
    max_tokens = payload.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError("max_tokens: Field required (a positive integer)")
    messages: list[dict[str, Any]] = []
    system = payload.get("system")
    if system:
        messages.append({"role": "system", "content": _blocks_text(system)})
    for number, turn in enumerate(turns):
        role, content = turn.get("role"), turn.get("content")
        if role not in ("user", "assistant"):
            raise RequestError(f"messages.{number}.role: Input should be 'user' or 'assistant'")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise RequestError(f"messages.{number}.content: Input should be a string or a list of blocks")
        if role == "assistant":
            text = "".join(
                b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
            )
            calls = [{"id": b.get("id"), "type": "function",
                      "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
                     for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            continue
        texts = []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                if not block.get("tool_use_id"):
                    raise RequestError(f"messages.{number}: tool_result block needs a tool_use_id")
                messages.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                                 "content": _blocks_text(block.get("content"))})
            elif block.get("type") == "text":
                texts.append(str(block.get("text", "")))
        if texts:
            messages.append({"role": "user", "content": "".join(texts)})
    tools = payload.get("tools")
    converted = None
    if isinstance(tools, list):
        converted = [
            {
                "type": "function",
                "function": {
                    "name": t.get("name"),
                    "description": t.get("description", ""),
                    "parameters": t.get("input_schema") or {},
                },
            }
            for t in tools
            if isinstance(t, dict)
        ]
    return model, messages, converted


def _blocks_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


# -- answers ------------------------------------------------------------------------------


def openai_error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    kind = ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_body(model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
                   output_tokens: int) -> dict[str, Any]:
    return {"id": f"msg_sim_{sequence}", "type": "message", "role": "assistant", "model": model,
            "content": _anthropic_blocks(message), "stop_reason": _STOP_REASONS.get(finish, "end_turn"),
            "stop_sequence": None, "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


def _anthropic_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        blocks.append({"type": "tool_use", "id": "toolu_" + str(call["id"]), "name": call["function"]["name"],
                       "input": json.loads(call["function"]["arguments"] or "{}")})
    return blocks


def openai_chunks(model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
                  output_tokens: int, include_usage: bool) -> list[bytes]:
    """The ``data:`` events of a streamed chat completion, ``[DONE]`` last."""
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"id": f"chatcmpl-sim-{sequence}", "object": "chat.completion.chunk", "created": created,
                "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    events = [chunk({"role": "assistant", "content": ""})]
    for piece in _pieces(message.get("content") or ""):
        events.append(chunk({"content": piece}))
    for index, call in enumerate(message.get("tool_calls") or []):
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        for piece in _pieces(call["function"]["arguments"]):
            events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    events.append(chunk({}, finish))
    if include_usage:
        last = chunk({})
        last["choices"] = []
        last["usage"] = {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                         "total_tokens": input_tokens + output_tokens}
        events.append(last)
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def anthropic_events(model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
                     output_tokens: int) -> list[bytes]:
    """The Messages API event stream: message_start, content blocks with their deltas, message_delta, stop."""
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_sim_{sequence}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1},
                },
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(_anthropic_blocks(message)):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            for piece in _pieces(block["text"]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                       "delta": {"type": "text_delta", "text": piece}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": dict(block, input={})}))
            for piece in _pieces(json.dumps(block["input"])):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        },
                    )
                )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": _STOP_REASONS.get(finish, "end_turn"),
                                               "stop_sequence": None},
                                     "usage": {"output_tokens": output_tokens}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]


def _pieces(text: str) -> list[str]:
    return [text[i:i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]


# -- one server side per wire format ------------------------------------------------------------


class ServerWire(Protocol):
    """What the simulated server asks of a wire format (the server's half of ``providers.wire``)."""

    #: The ``api:`` name it serves (Azure OpenAI is served as ``openai``: the same bodies).
    name: str
    #: A header every request must carry (the API answers 400 without it), or None.
    required_header: str | None
    #: The id prefix of a batch.
    batch_prefix: str
    #: Whether an ended batch's answers are written to output and error files (OpenAI's Files API)
    #: rather than served as one results file on demand (Anthropic's).
    writes_result_files: bool

    def read(self, payload: Any) -> tuple[str, list[dict[str, Any]], Any]: ...

    def error(self, status: int, message: str) -> dict[str, Any]: ...

    def body(self, model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
             output_tokens: int) -> dict[str, Any]: ...

    def events(self, model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
               output_tokens: int, include_usage: bool) -> list[bytes]: ...

    def limit_headers(self, rpm: int, remaining: int, reset_in: float) -> dict[str, str]: ...


class OpenAIServer:
    name = "openai"
    required_header: str | None = None
    batch_prefix = "batch_sim"
    writes_result_files = True

    def read(self, payload: Any) -> tuple[str, list[dict[str, Any]], Any]:
        return from_openai(payload)

    def error(self, status: int, message: str) -> dict[str, Any]:
        kind = "rate_limit_exceeded" if status == 429 else (
            "server_error" if status >= 500 else "invalid_request_error")
        return openai_error(message, kind)

    def body(self, model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
             output_tokens: int) -> dict[str, Any]:
        return completion_body(model, sequence, message, finish, input_tokens, output_tokens)

    def events(self, model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
               output_tokens: int, include_usage: bool) -> list[bytes]:
        return openai_chunks(model, sequence, message, finish, input_tokens, output_tokens, include_usage)

    def limit_headers(self, rpm: int, remaining: int, reset_in: float) -> dict[str, str]:
        return {"x-ratelimit-limit-requests": str(rpm), "x-ratelimit-remaining-requests": str(remaining)}


class AnthropicServer:
    name = "anthropic"
    required_header: str | None = "anthropic-version"
    batch_prefix = "msgbatch_sim"
    writes_result_files = False

    def read(self, payload: Any) -> tuple[str, list[dict[str, Any]], Any]:
        return from_anthropic(payload)

    def error(self, status: int, message: str) -> dict[str, Any]:
        return anthropic_error(status, message)

    def body(self, model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
             output_tokens: int) -> dict[str, Any]:
        return anthropic_body(model, sequence, message, finish, input_tokens, output_tokens)

    def events(self, model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
               output_tokens: int, include_usage: bool) -> list[bytes]:
        return anthropic_events(model, sequence, message, finish, input_tokens, output_tokens)

    def limit_headers(self, rpm: int, remaining: int, reset_in: float) -> dict[str, str]:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + reset_in))
        return {"anthropic-ratelimit-requests-limit": str(rpm),
                "anthropic-ratelimit-requests-remaining": str(remaining),
                "anthropic-ratelimit-requests-reset": stamp}


#: The server side of every wire format in ``evaljobs.providers.wire`` (``WIRE_FORMATS``), by its name.
SERVER_WIRES: dict[str, ServerWire] = {"openai": OpenAIServer(), "anthropic": AnthropicServer(),
                                       "azure": OpenAIServer()}


def server_wire(name: str) -> ServerWire:
    """The server side of the wire format ``name``; ``KeyError`` when there is none."""
    return SERVER_WIRES[name]
