"""A real OpenAI-compatible HTTP server on loopback, for the demo, the tests and the benchmarks.

Hand-written on asyncio streams (HTTP/1.1, keep-alive, Content-Length bodies) so
that hundreds of concurrent calls cost only a coroutine each, and no dependency is
added. It simulates what makes a real provider hard to drive: latency with
jitter, a concurrency cap and a requests-per-minute window (both answered with
429 + Retry-After), random 500s, and per-conversation faults.

Answers are deterministic and steered by *directives* that a catalog embeds in
system or user messages::

    [sim: say Paris]                      every model answers "Paris"
    [sim@fast: call search {"q": "x"}]    only model "fast" calls a tool
    [sim: status 500 overloaded]          fault directives apply on every turn

Actions: ``say TEXT``, ``call TOOL {json}``, ``status CODE [message]``,
``ratelimit SECONDS``, ``fail-first N CODE``, ``sleep SECONDS``, ``malformed``,
``truncate``, ``reset``, ``huge BYTES``, ``echo``. The ``say``/``call`` directives
form *steps* (a run of consecutive ``call``\\ s is one step); step *i* answers the
conversation's assistant turn *i*. Directives never appear in answers.
"""
from __future__ import annotations

from evaljobs.errors import UsageError
import asyncio
import collections
import copy
import hashlib
import itertools
import json
import math
import random
import re
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

#: Actions that apply on every turn, before the step logic.
FAULT_ACTIONS = ("status", "ratelimit", "fail-first", "sleep", "malformed", "truncate", "reset", "huge",
                 "echo")
STEP_ACTIONS = ("say", "call")
ACTIONS = STEP_ACTIONS + FAULT_ACTIONS

DEFAULT_MODELS = ("sim", "fast", "smart", "tool")
MAX_REQUEST_BYTES = 64 * 1024 * 1024
RPM_WINDOW_S = 60.0
#: Per-conversation attempt counts (fail-first, error_rate) kept; memory stays bounded in long benchmarks.
MAX_TRACKED_CONVERSATIONS = 200_000
_HUGE_CHUNK = b"x" * 65536
_PROMPT_CAP = 200

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict", 411: "Length Required",
            413: "Payload Too Large", 422: "Unprocessable Entity", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
            504: "Gateway Timeout"}

# Greedy name: it runs to the last ':' before whitespace, so "llama3:8b" is a valid model name.
_DIRECTIVE_START = re.compile(r"\[sim(?:@([^\s\]]+))?:")


# -- directives ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Directive:
    action: str
    args: str
    model: str | None = None
    #: Where it was found, for error messages ("message 2").
    where: str = ""


class DirectiveError(UsageError):
    """A directive the simulator cannot follow; answered as HTTP 400 with this one-line message."""


def find_directives(text: str) -> list[tuple[int, int, str | None, str]]:
    """``(start, end, model, body)`` for each ``[sim…: …]`` span in ``text``.

    The closing ``]`` is found with bracket matching (JSON arguments may contain
    ``]``); double quotes only count as strings inside ``{…}``/``[…]`` so that a
    ``say`` text may contain a lone quote.
    """
    found = []
    pos = 0
    while True:
        match = _DIRECTIVE_START.search(text, pos)
        if match is None:
            return found
        end = _closing_bracket(text, match.end())
        if end is None:
            return found
        found.append((match.start(), end + 1, match.group(1), text[match.end():end]))
        pos = end + 1


def _closing_bracket(text: str, start: int) -> int | None:
    depth = 0
    in_string = False
    escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"' and depth > 0:
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            if depth == 0:
                if char == "]":
                    return index
            else:
                depth -= 1
    fallback = text.find("]", start)
    return fallback if fallback >= 0 else None


def strip_directives(text: str) -> str:
    """``text`` without its directives, so they never leak into an answer."""
    spans = find_directives(text)
    if not spans:
        return text.strip()
    pieces, pos = [], 0
    for start, end, _, _ in spans:
        pieces.append(text[pos:start])
        pos = end
    pieces.append(text[pos:])
    return re.sub(r"[ \t]{2,}", " ", "".join(pieces)).strip()


def collect_directives(messages: list[dict[str, Any]], model: str) -> list[Directive]:
    """Directives of the system/user messages, in order, that apply to ``model``."""
    directives = []
    for number, message in enumerate(messages, start=1):
        if message.get("role") not in ("system", "user", "developer"):
            continue
        for _, _, name, body in find_directives(_text(message.get("content"))):
            if name is not None and name != model:
                continue
            action, _, args = body.strip().partition(" ")
            directives.append(Directive(action.strip().lower(), args.strip(), name, f"message {number}"))
    return directives


# -- the server ---------------------------------------------------------------------------


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


@dataclass
class _Answer:
    """What to send back for one chat request."""

    status: int = 200
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    message: str = ""
    retry_after: float | None = None
    fault: str | None = None  # malformed | truncate | reset | huge
    huge_bytes: int = 0


class SimulatedProvider:
    """An OpenAI-compatible endpoint on loopback with latency, limits and faults.

    ``start()`` serves from a daemon thread (tests, in-process demo);
    ``serve_forever()`` blocks (the CLI). ``reset_stats()`` zeroes the counters
    but keeps the rpm window and the per-conversation attempt counts, which are
    behaviour, not statistics.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, latency: float = 0.0, jitter: float = 0.0,
                 max_concurrent: int | None = None, rpm: int | None = None, error_rate: float = 0.0,
                 seed: int = 0, retry_after: float = 1.0):
        _check_options(latency=latency, jitter=jitter, max_concurrent=max_concurrent, rpm=rpm,
                       error_rate=error_rate, retry_after=retry_after, port=port)
        self.host = host
        self.port = int(port)
        self.latency = float(latency)
        self.jitter = float(jitter)
        self.max_concurrent = max_concurrent
        self.rpm = rpm
        self.error_rate = float(error_rate)
        self.seed = int(seed)
        self.retry_after = float(retry_after)
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._stats = _empty_stats()
        self._window: collections.deque[float] = collections.deque()
        self._attempts: dict[bytes, int] = {}
        self._sequence = 0
        self._models: dict[str, None] = dict.fromkeys(DEFAULT_MODELS)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._startup_error: BaseException | None = None

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL to give a client, e.g. ``http://127.0.0.1:PORT/v1``."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/v1"

    def start(self) -> "SimulatedProvider":
        """Serve from a daemon thread; returns once the socket is listening."""
        if self._thread is not None:
            raise RuntimeError("simulated provider already started")
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run_in_thread, args=(ready,), daemon=True,
                                        name="simulated-provider")
        self._thread.start()
        ready.wait()
        if self._startup_error is not None:
            error, self._startup_error, self._thread = self._startup_error, None, None
            raise error
        return self

    def stop(self) -> None:
        """Stop serving and drop open connections (in-flight requests are cancelled)."""
        loop, event, thread = self._loop, self._stop_event, self._thread
        if loop is not None and event is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # loop already closed
                pass
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> "SimulatedProvider":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def serve_forever(self, on_ready: Callable[["SimulatedProvider"], None] | None = None) -> None:
        """Serve in the calling thread until Ctrl-C or SIGTERM.

        ``on_ready`` is called once listening (default: one line on stderr with the URL).
        """
        def ready() -> None:
            if on_ready is None:
                print(f"simulated provider listening on {self.url}", file=sys.stderr, flush=True)
            else:
                on_ready(self)

        try:
            asyncio.run(self._serve(ready, install_signals=True))
        except KeyboardInterrupt:
            pass

    def _run_in_thread(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready.set, install_signals=False))
        except BaseException as exc:  # reported to start() if it happened before listening
            if not ready.is_set():
                self._startup_error = exc
        finally:
            ready.set()
            loop.close()

    async def _serve(self, on_ready: Callable[[], None], *, install_signals: bool) -> None:
        self._stop_event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if install_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                try:
                    self._loop.add_signal_handler(signum, self._stop_event.set)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass
        server = await asyncio.start_server(self._handle_connection, self.host, self.port, backlog=2048)
        self.port = server.sockets[0].getsockname()[1]
        on_ready()
        try:
            await self._stop_event.wait()
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()

    # -- statistics ---------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """A snapshot of the counters (also served as ``GET /stats``)."""
        with self._lock:
            snapshot = copy.deepcopy(self._stats)
        snapshot["config"] = {"latency": self.latency, "jitter": self.jitter,
                              "max_concurrent": self.max_concurrent, "rpm": self.rpm,
                              "error_rate": self.error_rate, "seed": self.seed,
                              "retry_after": self.retry_after}
        return snapshot

    def reset_stats(self) -> None:
        with self._lock:
            in_flight = self._stats["in_flight"]
            self._stats = _empty_stats()
            self._stats["in_flight"] = self._stats["peak_in_flight"] = in_flight

    def _count(self, model: str | None, key: str, amount: int = 1, *,
               bucket: int | str | None = None) -> None:
        """Add to a counter (or to ``key[bucket]`` for the errors/faults tables), overall and per model."""
        with self._lock:
            targets = [self._stats]
            if model is not None:
                targets.append(self._stats["by_model"].setdefault(model, _empty_model_stats()))
            for target in targets:
                if bucket is not None:
                    table = target[key]
                    table[str(bucket)] = table.get(str(bucket), 0) + amount
                else:
                    target[key] += amount

    # -- HTTP ---------------------------------------------------------------------------

    async def _handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._count(None, "connections")
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                if isinstance(request, int):  # a request we cannot parse: answer and hang up
                    await _send_json(writer, request, _error_body(_REASONS.get(request, "bad request")),
                                     keep_alive=False)
                    break
                if not await self._dispatch(request, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            if not writer.transport.is_closing():
                writer.transport.close()

    async def _dispatch(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must be closed afterwards."""
        path = request.path.split("?", 1)[0].rstrip("/") or "/"
        routes = {
            ("POST", "/v1/chat/completions"): None, ("POST", "/chat/completions"): None,
            ("GET", "/v1/models"): self._models_body, ("GET", "/models"): self._models_body,
            ("GET", "/stats"): lambda: self.stats(), ("GET", "/health"): lambda: {"status": "ok"},
            ("POST", "/stats/reset"): self._reset_body,
        }
        if (request.method, path) in routes:
            handler = routes[(request.method, path)]
            if handler is None:
                return await self._chat(request, writer)
            await _send_json(writer, 200, handler(), keep_alive=request.keep_alive)
            return request.keep_alive
        if any(route_path == path for _, route_path in routes):
            await _send_json(writer, 405, _error_body(f"method {request.method} not allowed on {path}"),
                             keep_alive=request.keep_alive)
        else:
            await _send_json(writer, 404, _error_body(f"no route {path}"), keep_alive=request.keep_alive)
        return request.keep_alive

    def _models_body(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "evaljobs-sim"}
                                           for name in self._models]}

    def _reset_body(self) -> dict[str, Any]:
        self.reset_stats()
        return {"status": "reset"}

    async def _chat(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        keep_alive = request.keep_alive
        try:
            payload = json.loads(request.body)
            model, messages = payload["model"], payload["messages"]
            if not isinstance(model, str) or not isinstance(messages, list) or not all(
                    isinstance(m, dict) for m in messages):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            self._count(None, "requests")
            self._count(None, "errors", bucket=400)
            await _send_json(writer, 400, _error_body("request body must be JSON with a string 'model' and a "
                                                      "list of message objects 'messages'"),
                             keep_alive=keep_alive)
            return keep_alive
        self._models.setdefault(model, None)
        self._count(model, "requests")
        refusal = self._admit()
        if refusal is not None:
            message, retry_after = refusal
            self._count(model, "rate_limited")
            await _send_json(writer, 429, _error_body(message, "rate_limit_exceeded"),
                             headers=_retry_headers(retry_after), keep_alive=keep_alive)
            return keep_alive
        with self._lock:
            self._stats["in_flight"] += 1
            self._stats["peak_in_flight"] = max(self._stats["peak_in_flight"], self._stats["in_flight"])
        released = False

        def release() -> None:
            # A request stops counting as in flight once its answer is ready, *before* the answer is
            # written: a client may send its next request the moment it has read this one, before
            # this coroutine runs again, and that request must not see a phantom slot taken.
            nonlocal released
            if not released:
                released = True
                with self._lock:
                    self._stats["in_flight"] -= 1

        try:
            return await self._answer(payload, model, messages, writer, keep_alive, release)
        finally:
            release()

    def _admit(self) -> tuple[str, float] | None:
        """None when admitted; else (message, retry_after) for a 429. Admitted calls fill the rpm window."""
        if self.max_concurrent is not None:
            with self._lock:
                busy = self._stats["in_flight"] >= self.max_concurrent
            if busy:
                return (f"concurrency limit reached ({self.max_concurrent} requests in flight)",
                        self.retry_after)
        if self.rpm is not None:
            now = time.monotonic()
            while self._window and self._window[0] <= now - RPM_WINDOW_S:
                self._window.popleft()
            if len(self._window) >= self.rpm:
                wait = max(self._window[0] + RPM_WINDOW_S - now, 0.001)
                return (f"rate limit reached ({self.rpm} requests per minute)", wait)
            self._window.append(now)
        return None

    async def _answer(self, payload: dict[str, Any], model: str, messages: list[dict[str, Any]],
                      writer: asyncio.StreamWriter, keep_alive: bool, release=lambda: None) -> bool:
        conversation = json.dumps([model, messages], sort_keys=True, default=str).encode()
        key = hashlib.sha256(conversation).digest()[:16]
        attempt = self._attempts.pop(key, 0) + 1
        if len(self._attempts) >= MAX_TRACKED_CONVERSATIONS:  # forget the least recently seen half
            for stale in list(itertools.islice(self._attempts, MAX_TRACKED_CONVERSATIONS // 2)):
                del self._attempts[stale]
        self._attempts[key] = attempt
        delay = self.latency
        if self.jitter:
            delay += self._rng.uniform(-self.jitter, self.jitter)
        try:
            directives = collect_directives(messages, model)
            if self.error_rate and _draw(self.seed, key, attempt) < self.error_rate:
                answer = _Answer(status=500, message="simulated server error (error_rate)")
            else:
                extra_sleep, answer = _plan(directives, model, messages, payload, attempt, self.retry_after)
                delay += extra_sleep
        except DirectiveError as exc:
            answer = _Answer(status=400, message=str(exc))
        if delay > 0:
            await asyncio.sleep(delay)
        release()
        return await self._respond(answer, model, messages, payload, writer, keep_alive)

    async def _respond(self, answer: _Answer, model: str, messages: list[dict[str, Any]],
                       payload: dict[str, Any], writer: asyncio.StreamWriter, keep_alive: bool) -> bool:
        if answer.status != 200:
            headers = {}
            if answer.status == 429:
                self._count(model, "rate_limited")
                wait = answer.retry_after if answer.retry_after is not None else self.retry_after
                headers = _retry_headers(wait)
            else:
                self._count(model, "errors", bucket=answer.status)
            kind = "rate_limit_exceeded" if answer.status == 429 else (
                "server_error" if answer.status >= 500 else "invalid_request_error")
            message = answer.message or _REASONS.get(answer.status, "")
            await _send_json(writer, answer.status, _error_body(message, kind), headers=headers,
                             keep_alive=keep_alive)
            return keep_alive
        if answer.fault == "reset":
            self._count(model, "faults", bucket="reset")
            _reset(writer)
            return False
        if answer.fault == "malformed":
            self._count(model, "faults", bucket="malformed")
            await _send(writer, 200, b'{"choices": [{"message": this is not JSON', keep_alive=keep_alive)
            return keep_alive
        input_tokens = _prompt_tokens(messages, payload.get("tools"))
        with self._lock:
            self._sequence += 1
            sequence = self._sequence
        if answer.fault == "huge":
            output_tokens = max(1, answer.huge_bytes // 4)
            self._count_completion(model, input_tokens, output_tokens, tool_turn=False)
            await self._send_huge(writer, model, sequence, answer.huge_bytes, input_tokens, output_tokens,
                                  keep_alive)
            return keep_alive
        content = answer.content
        finish = answer.finish_reason
        max_tokens = payload.get("max_tokens")
        capped = isinstance(max_tokens, int) and max_tokens > 0
        if content is not None and capped and len(content) > 4 * max_tokens:
            content, finish = content[: 4 * max_tokens], "length"
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if answer.tool_calls:
            message["tool_calls"] = answer.tool_calls
        calls_text = json.dumps(answer.tool_calls) if answer.tool_calls else ""
        output_tokens = _tokens((content or "") + calls_text)
        body = _completion_body(model, sequence, message, finish, input_tokens, output_tokens)
        if answer.fault == "truncate":
            self._count(model, "faults", bucket="truncate")
            data = json.dumps(body).encode()
            writer.write(_head(200, len(data) + 64, {"content-type": "application/json"}, keep_alive=True))
            writer.write(data[: len(data) // 2])
            await writer.drain()
            writer.close()
            return False
        self._count_completion(model, input_tokens, output_tokens, tool_turn=bool(answer.tool_calls))
        await _send_json(writer, 200, body, headers=self._limit_headers(), keep_alive=keep_alive)
        return keep_alive

    def _count_completion(self, model: str, input_tokens: int, output_tokens: int, *,
                          tool_turn: bool) -> None:
        self._count(model, "completed")
        self._count(model, "input_tokens", input_tokens)
        self._count(model, "output_tokens", output_tokens)
        if tool_turn:
            self._count(model, "tool_call_turns")

    def _limit_headers(self) -> dict[str, str]:
        if self.rpm is None:
            return {}
        return {"x-ratelimit-limit-requests": str(self.rpm),
                "x-ratelimit-remaining-requests": str(max(0, self.rpm - len(self._window)))}

    async def _send_huge(self, writer: asyncio.StreamWriter, model: str, sequence: int, size: int,
                         input_tokens: int, output_tokens: int, keep_alive: bool) -> None:
        """A valid answer whose content is ``size`` bytes, written in chunks (never built whole)."""
        marker = "@@HUGE-CONTENT@@"
        template = json.dumps(_completion_body(model, sequence, {"role": "assistant", "content": marker},
                                               "stop", input_tokens, output_tokens)).encode()
        prefix, suffix = template.split(marker.encode())
        writer.write(_head(200, len(prefix) + size + len(suffix), {"content-type": "application/json"},
                           keep_alive=keep_alive))
        writer.write(prefix)
        remaining = size
        while remaining > 0:
            chunk = _HUGE_CHUNK if remaining >= len(_HUGE_CHUNK) else _HUGE_CHUNK[:remaining]
            writer.write(chunk)
            remaining -= len(chunk)
            await writer.drain()
        writer.write(suffix)
        await writer.drain()


# -- answering ----------------------------------------------------------------------------


def _plan(directives: list[Directive], model: str, messages: list[dict[str, Any]], payload: dict[str, Any],
          attempt: int, default_retry_after: float) -> tuple[float, _Answer]:
    """(extra latency, answer) for one request: fault directives first, then the step for this turn."""
    extra_sleep = 0.0
    fault: _Answer | None = None
    for directive in directives:
        if directive.action not in ACTIONS:
            raise DirectiveError(f"unknown sim directive action {directive.action!r} in {directive.where}; "
                                 f"known: {', '.join(ACTIONS)}")
        if directive.action in STEP_ACTIONS:
            continue
        candidate = _fault(directive, messages, attempt, default_retry_after)
        if directive.action == "sleep":
            extra_sleep += _number(directive, directive.args, minimum=0.0)
        elif fault is None and candidate is not None:
            fault = candidate
    if fault is not None:
        return extra_sleep, fault
    return extra_sleep, _step_answer(directives, model, messages, payload)


def _fault(directive: Directive, messages: list[dict[str, Any]], attempt: int,
           default_retry_after: float) -> _Answer | None:
    action, args = directive.action, directive.args
    if action == "status":
        code_text, _, message = args.partition(" ")
        code = _status_code(directive, code_text)
        retry_after = default_retry_after if code == 429 else None
        return _Answer(status=code, message=message.strip() or f"simulated HTTP {code}",
                       retry_after=retry_after)
    if action == "ratelimit":
        seconds = _number(directive, args, minimum=0.0)
        return _Answer(status=429, message="simulated rate limit", retry_after=seconds)
    if action == "fail-first":
        parts = args.split()
        if len(parts) != 2 or not parts[0].isdigit():
            raise DirectiveError(f"sim directive 'fail-first {args}' in {directive.where}: "
                                 f"expected 'fail-first N CODE', e.g. 'fail-first 2 500'")
        if attempt > int(parts[0]):
            return None
        code = _status_code(directive, parts[1])
        return _Answer(status=code, message=f"simulated failure {attempt} of {parts[0]}",
                       retry_after=default_retry_after if code == 429 else None)
    if action in ("malformed", "truncate", "reset"):
        return _Answer(fault=action)
    if action == "huge":
        return _Answer(fault="huge", huge_bytes=_size(directive))
    if action == "echo":
        return _Answer(content=_last_text(messages, "user"))
    return None  # sleep


def _step_answer(directives: list[Directive], model: str, messages: list[dict[str, Any]],
                 payload: dict[str, Any]) -> _Answer:
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
            return _Answer(content=step[0].args)
        first_id = 1 + sum(len(m.get("tool_calls") or []) for m in assistant_turns)
        calls = [_tool_call(d, first_id + i) for i, d in enumerate(step)]
        return _Answer(tool_calls=calls, finish_reason="tool_calls")
    if not steps:
        from evaljobs.providers.simulated_judge import judge_answer  # a judge request gets a real, deterministic grade

        verdict = judge_answer(messages)
        if verdict is not None:
            return _Answer(content=verdict)
    if last_role == "tool":
        return _Answer(content=_summary(messages))
    tools = payload.get("tools") or []
    called_before = any(m.get("tool_calls") for m in assistant_turns)
    if not steps and tools and "tool" in model.lower() and not called_before:
        name = _first_tool_name(tools)
        if name:
            call = {"id": f"call_{1}", "type": "function", "function": {"name": name, "arguments": "{}"}}
            return _Answer(tool_calls=[call], finish_reason="tool_calls")
    return _Answer(content="Answer to: " + _last_text(messages, "user")[:_PROMPT_CAP])


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
        text = " ".join(strip_directives(_text(message.get("content"))).split())
        results.append(f"{name}: {text[:_PROMPT_CAP]}")
    return "Done: " + "; ".join(reversed(results))


def _last_text(messages: list[dict[str, Any]], role: str) -> str:
    for message in reversed(messages):
        if message.get("role") == role:
            return strip_directives(_text(message.get("content")))
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


def _draw(seed: int, key: bytes, attempt: int) -> float:
    """A uniform [0, 1) draw fixed by (seed, conversation, attempt): the same failures whatever the order."""
    digest = hashlib.sha256(b"%d:%s:%d" % (seed, key, attempt)).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def _prompt_tokens(messages: list[dict[str, Any]], tools: Any) -> int:
    size = 0
    for message in messages:
        size += len(_text(message.get("content"))) + len(str(message.get("role", "")))
        if message.get("tool_calls"):
            size += len(json.dumps(message["tool_calls"], sort_keys=True))
    if tools:
        size += len(json.dumps(tools, sort_keys=True))
    return max(1, (size + 3) // 4)


def _completion_body(model: str, sequence: int, message: dict[str, Any], finish: str, input_tokens: int,
                     output_tokens: int) -> dict[str, Any]:
    return {"id": f"chatcmpl-sim-{sequence}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                      "total_tokens": input_tokens + output_tokens}}


def _error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


def _retry_headers(seconds: float) -> dict[str, str]:
    """``Retry-After`` in whole seconds (as HTTP requires), ``retry-after-ms`` exact."""
    return {"retry-after": str(max(0, math.ceil(seconds))), "retry-after-ms": str(int(round(seconds * 1000)))}


def _empty_model_stats() -> dict[str, Any]:
    return {"requests": 0, "completed": 0, "rate_limited": 0, "errors": {}, "faults": {},
            "tool_call_turns": 0, "input_tokens": 0, "output_tokens": 0}


def _empty_stats() -> dict[str, Any]:
    stats = _empty_model_stats()
    stats.update({"in_flight": 0, "peak_in_flight": 0, "connections": 0, "by_model": {}})
    return stats


# -- HTTP/1.1 plumbing --------------------------------------------------------------------


async def _read_request(reader: asyncio.StreamReader) -> _Request | int | None:
    """The next request on the connection; None at EOF; an HTTP status for an unusable request."""
    line = await reader.readline()
    while line in (b"\r\n", b"\n"):
        line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return 400
    method, target, version = parts
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
        if body is None:
            return 413
    else:
        length_text = headers.get("content-length", "0") or "0"
        if not length_text.isdigit():
            return 400
        length = int(length_text)
        if length > MAX_REQUEST_BYTES:
            return 413
        body = await reader.readexactly(length) if length else b""
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return _Request(method.upper(), target, headers, body, keep_alive)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes | None:
    chunks, total = [], 0
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        total += size
        if total > MAX_REQUEST_BYTES:
            return None
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _head(status: int, length: int, headers: dict[str, str], *, keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", f"content-length: {length}",
             f"connection: {'keep-alive' if keep_alive else 'close'}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, *,
                headers: dict[str, str] | None = None, keep_alive: bool = True) -> None:
    all_headers = {"content-type": "application/json"}
    all_headers.update(headers or {})
    writer.write(_head(status, len(body), all_headers, keep_alive=keep_alive) + body)
    await writer.drain()


async def _send_json(writer: asyncio.StreamWriter, status: int, data: Any, *,
                     headers: dict[str, str] | None = None, keep_alive: bool = True) -> None:
    await _send(writer, status, json.dumps(data).encode(), headers=headers, keep_alive=keep_alive)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), like a crashed upstream, instead of a polite FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


# -- options ------------------------------------------------------------------------------

_OPTION_TYPES: dict[str, type] = {"host": str, "port": int, "latency": float, "jitter": float,
                                  "max_concurrent": int, "rpm": int, "error_rate": float, "seed": int,
                                  "retry_after": float}


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
        if key in ("max_concurrent", "rpm") and value.lower() in ("", "none"):
            options[key] = None
            continue
        if not value:
            raise ValueError(f"simulate option {key} needs a value, e.g. {key}=1")
        try:
            options[key] = kind(value)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise ValueError(f"simulate option {key}={value!r} is not {noun}") from None
    _check_options(**{k: v for k, v in options.items() if k not in ("host", "seed")})
    return options


def _check_options(**options: Any) -> None:
    for key in ("latency", "jitter", "retry_after"):
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
