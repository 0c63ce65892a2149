"""Answers: what the simulated provider says to one chat request, in the OpenAI message shape.

Pure functions of the request (model, messages, tools) and the attempt number,
so the same catalog gets the same answers in any order; the server turns an
``Answer`` into the bytes of whichever wire format was asked for.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from evaljobs.simulated.judge import judge_answer
from evaljobs.simulated.directives import (
    ACTIONS,
    STEP_ACTIONS,
    Directive,
    DirectiveError,
    strip_directives,
    text_of,
)

_PROMPT_CAP = 200


@dataclass
class Answer:
    """What to send back for one chat request."""

    status: int = 200
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    message: str = ""
    retry_after: float | None = None
    fault: str | None = None  # malformed | truncate | reset | huge
    huge_bytes: int = 0
    #: ``Retry-After`` as an HTTP date (``[sim: ratelimit DATE]``), sent instead of seconds.
    retry_after_date: str | None = None
    #: The prompt tokens the answer reports (``[sim: usage N]``), whatever the prompt was.
    prompt_tokens: int | None = None



def plan(directives: list[Directive], model: str, messages: list[dict[str, Any]], payload: dict[str, Any],
          attempt: int, default_retry_after: float) -> tuple[float, Answer]:
    """(extra latency, answer) for one request: fault directives first, then the step for this turn."""
    extra_sleep = 0.0
    fault: Answer | None = None
    reported: int | None = None
    for directive in directives:
        if directive.action not in ACTIONS:
            raise DirectiveError(f"unknown sim directive action {directive.action!r} in {directive.where}; "
                                 f"known: {', '.join(ACTIONS)}")
        if directive.action in STEP_ACTIONS:
            continue
        candidate = _fault(directive, messages, attempt, default_retry_after)
        if directive.action == "sleep":
            extra_sleep += _number(directive, directive.args, minimum=0.0)
        elif directive.action == "usage":
            usage = directive.args.strip()
            if not usage.isdigit():
                raise DirectiveError(
                    f"sim directive 'usage {directive.args}' in {directive.where}: "
                    f"expected 'usage N' (the prompt tokens to report), e.g. 'usage 3000000000'"
                )
            reported = int(usage)
        elif fault is None and candidate is not None:
            fault = candidate
    if fault is not None:
        return extra_sleep, fault
    answer = _step_answer(directives, model, messages, payload)
    answer.prompt_tokens = reported
    return extra_sleep, answer


def _fault(directive: Directive, messages: list[dict[str, Any]], attempt: int,
           default_retry_after: float) -> Answer | None:
    action, args = directive.action, directive.args
    if action == "status":
        code_text, _, message = args.partition(" ")
        code = _status_code(directive, code_text)
        retry_after = default_retry_after if code == 429 else None
        return Answer(status=code, message=message.strip() or f"simulated HTTP {code}",
                       retry_after=retry_after)
    if action == "ratelimit":
        # an HTTP date: [sim: ratelimit Fri, 01 Jan 2099 …]
        if args.strip() and not args.strip()[0].isdigit():
            return Answer(status=429, message="simulated rate limit", retry_after_date=args.strip())
        seconds = _number(directive, args, minimum=0.0)
        return Answer(status=429, message="simulated rate limit", retry_after=seconds)
    if action == "fail-first":
        parts = args.split()
        if len(parts) != 2 or not parts[0].isdigit():
            raise DirectiveError(f"sim directive 'fail-first {args}' in {directive.where}: "
                                 f"expected 'fail-first N CODE', e.g. 'fail-first 2 500'")
        if attempt > int(parts[0]):
            return None
        code = _status_code(directive, parts[1])
        return Answer(status=code, message=f"simulated failure {attempt} of {parts[0]}",
                       retry_after=default_retry_after if code == 429 else None)
    if action in ("malformed", "truncate", "reset"):
        return Answer(fault=action)
    if action == "huge":
        return Answer(fault="huge", huge_bytes=_size(directive))
    if action == "echo":
        return Answer(content=_last_text(messages, "user"))
    if action == "flaky":
        # [sim: flaky P]: the same conversation asked again (an epoch, a rerun) goes astray with chance P,
        # drawn from (conversation, how many times it was asked): varied, yet the same on every run.
        chance = _number(directive, args, minimum=0.0)
        conversation = json.dumps(messages, sort_keys=True, default=str).encode()
        if draw(0, hashlib.sha256(conversation).digest()[:16], attempt) < chance:
            return Answer(content="Sorry, I lost track of the question.")
        return None
    return None  # sleep


def _step_answer(directives: list[Directive], model: str, messages: list[dict[str, Any]],
                 payload: dict[str, Any]) -> Answer:
    steps: list[list[Directive]] = []
    previous_was_call = False
    for directive in directives:
        if directive.action == "call":
            if previous_was_call:
                steps[-1].append(directive)
            else:
                steps.append([directive])
            previous_was_call = True
        elif directive.action == "say":
            steps.append([directive])
            previous_was_call = False
    assistant_turns = [m for m in messages if m.get("role") == "assistant"]
    turn = len(assistant_turns)
    last_role = messages[-1].get("role") if messages else None
    if steps and turn < len(steps):
        step = steps[turn]
        if step[0].action == "say":
            return Answer(content=say_text(step[0].args))
        first_id = 1 + sum(len(m.get("tool_calls") or []) for m in assistant_turns)
        calls = [_tool_call(d, first_id + i) for i, d in enumerate(step)]
        return Answer(tool_calls=calls, finish_reason="tool_calls")
    if not steps:
        # a judge request gets a real, deterministic grade
        verdict = judge_answer(messages)
        if verdict is not None:
            return Answer(content=verdict)
    if last_role == "tool":
        return Answer(content=_summary(messages))
    tools = payload.get("tools") or []
    called_before = any(m.get("tool_calls") for m in assistant_turns)
    if not steps and tools and "tool" in model.lower() and not called_before:
        name = _first_tool_name(tools)
        if name:
            call = {"id": f"call_{1}", "type": "function", "function": {"name": name, "arguments": "{}"}}
            return Answer(tool_calls=[call], finish_reason="tool_calls")
    return Answer(content="Answer to: " + _last_text(messages, "user")[:_PROMPT_CAP])


def say_text(args: str) -> str:
    """What ``say`` answers: its text, or — written as a JSON string, ``say "  42\\n"`` — exactly that string
    (leading spaces, line breaks and brackets kept: the parity tests serve answers byte for byte)."""
    if args.startswith('"') and args.endswith('"') and len(args) >= 2:
        try:
            text = json.loads(args)
        except ValueError:
            return args
        if isinstance(text, str):
            return text
    return args


def _tool_call(directive: Directive, number: int) -> dict[str, Any]:
    name, _, raw = directive.args.partition(" ")
    if not name:
        raise DirectiveError(f"sim directive 'call' in {directive.where} needs a tool name, "
                             f"e.g. 'call search {{\"q\": \"x\"}}'")
    raw = raw.strip()
    try:
        arguments = json.loads(raw) if raw else {}
    except ValueError as exc:
        raise DirectiveError(f"sim directive 'call {name}' in {directive.where}: arguments are not JSON "
                             f"({exc})") from None
    if not isinstance(arguments, dict):
        raise DirectiveError(f"sim directive 'call {name}' in {directive.where}: "
                             f"arguments must be a JSON object")
    return {"id": f"call_{number}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def _summary(messages: list[dict[str, Any]]) -> str:
    """'Done: ' + the trailing tool results, deterministic, named by the calls they answer."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                names[str(call.get("id"))] = str((call.get("function") or {}).get("name", "tool"))
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        name = message.get("name") or names.get(str(message.get("tool_call_id")), "tool")
        text = " ".join(strip_directives(text_of(message.get("content"))).split())
        results.append(f"{name}: {text[:_PROMPT_CAP]}")
    return "Done: " + "; ".join(reversed(results))


def _last_text(messages: list[dict[str, Any]], role: str) -> str:
    for message in reversed(messages):
        if message.get("role") == role:
            return strip_directives(text_of(message.get("content")))
    return ""


def _first_tool_name(tools: Any) -> str | None:
    first = tools[0] if isinstance(tools, list) and tools else None
    function = first.get("function") if isinstance(first, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name else None


def _status_code(directive: Directive, text: str) -> int:
    if not text.isdigit() or not 400 <= int(text) <= 599:
        raise DirectiveError(f"sim directive '{directive.action} {directive.args}' in {directive.where}: "
                             f"status {text!r} is not an HTTP error code (400-599)")
    return int(text)


def _number(directive: Directive, text: str, *, minimum: float) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= minimum or math.isinf(value):
        raise DirectiveError(f"sim directive '{directive.action} {text}' in {directive.where}: "
                             f"expected a number of seconds >= {minimum:g}")
    return value


def _size(directive: Directive) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(kb|mb|gb|kib|mib|gib|b)?", directive.args.strip().lower())
    if match is None:
        raise DirectiveError(f"sim directive 'huge {directive.args}' in {directive.where}: "
                             f"expected a size in bytes, e.g. 'huge 50000000' or 'huge 50MB'")
    scale = {None: 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20,
             "gib": 2**30}[match.group(2)]
    return int(float(match.group(1)) * scale)


def draw(seed: int, key: bytes, attempt: int) -> float:
    """A uniform [0, 1) draw fixed by (seed, conversation, attempt): the same failures whatever the order."""
    digest = hashlib.sha256(b"%d:%s:%d" % (seed, key, attempt)).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def prompt_tokens(messages: list[dict[str, Any]], tools: Any) -> int:
    size = 0
    for message in messages:
        size += len(text_of(message.get("content"))) + len(str(message.get("role", "")))
        if message.get("tool_calls"):
            size += len(json.dumps(message["tool_calls"], sort_keys=True))
    if tools:
        size += len(json.dumps(tools, sort_keys=True))
    return max(1, (size + 3) // 4)


def completion_body(model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
                     output_tokens: int) -> dict[str, Any]:
    return {"id": f"chatcmpl-sim-{sequence}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                      "total_tokens": input_tokens + output_tokens}}


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


