"""A real HTTP server on loopback speaking OpenAI's and Anthropic's wire formats, for the demo, tests,
benchmarks.

Routes: ``POST /v1/chat/completions`` (and Azure's ``/openai/deployments/NAME/
chat/completions`` and ``/openai/v1/chat/completions``), ``POST /v1/messages``
(Anthropic; requires ``anthropic-version`` and ``max_tokens`` like the real API);
``"stream": true`` is answered as Server-Sent Events in each format.

Hand-written on asyncio streams (HTTP/1.1, keep-alive, Content-Length or chunked bodies) so
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

This module stays whole (about 600 lines): :class:`SimulatedProvider` owns one event
loop, the admission state (concurrency cap, RPM window) and the counters that every
route reads and updates together; what could leave has left (directives, answers,
wire formats, HTTP plumbing, option parsing are modules of their own).
"""
from __future__ import annotations

import asyncio
import collections
import copy
import hashlib
import itertools
import json
import math
import random
import signal
import sys
import threading
import re
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from evaljobs import clock as clocks
from evaljobs.simulated.options import check_options
from evaljobs.simulated.answers import (
    Answer,
    completion_body,
    draw,
    error_body,
    plan,
    prompt_tokens,
    tokens,
)
from evaljobs.simulated import on_demand
from evaljobs.simulated.directives import DirectiveError, collect_directives
from evaljobs.simulated.wire import RequestError, server_wire
from evaljobs.simulated.http import (
    REASONS,
    Request,
    head,
    read_request,
    reset_connection,
    send,
    send_json,
)

if TYPE_CHECKING:
    from evaljobs.simulated.batches import BatchDesk

DEFAULT_MODELS = ("sim", "fast", "smart", "tool")
RPM_WINDOW_S = 60.0
#: Per-conversation attempt counts (fail-first, error_rate) kept; memory stays bounded in long benchmarks.
MAX_TRACKED_CONVERSATIONS = 200_000
#: Chat requests kept in the call log (``calls()``).
CALL_LOG_SIZE = 10_000
_HUGE_CHUNK = b"x" * 65536


class SimulatedProvider:
    """An OpenAI-compatible endpoint on loopback with latency, limits and faults.

    ``start()`` serves from a daemon thread (tests, in-process demo);
    ``serve_forever()`` blocks (the CLI). ``reset_stats()`` zeroes the counters
    but keeps the rpm window and the per-conversation attempt counts, which are
    behaviour, not statistics. ``clock`` (monotonic seconds) times the rpm window; a test passes
    one it moves by hand to cross the window's end without waiting a minute.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, latency: float = 0.0, jitter: float = 0.0,
                 max_concurrent: int | None = None, rpm: int | None = None, error_rate: float = 0.0,
                 seed: int = 0, retry_after: float = 1.0, stream_interval: float = 0.0,
                 batch_delay: float = 0.0, batch_window: float | None = None,
                 clock: Callable[[], float] = clocks.monotonic,
                 answers: Callable[[str, list[dict[str, Any]]], str | None] | None = None):
        check_options(latency=latency, jitter=jitter, max_concurrent=max_concurrent, rpm=rpm,
                       error_rate=error_rate, retry_after=retry_after, port=port,
                       stream_interval=stream_interval, batch_delay=batch_delay, batch_window=batch_window)
        self.host = host
        self.port = int(port)
        self.latency = float(latency)
        self.jitter = float(jitter)
        self.max_concurrent = max_concurrent
        self.rpm = rpm
        self.error_rate = float(error_rate)
        self.seed = int(seed)
        self.retry_after = float(retry_after)
        self.clock = clock
        #: Fixed answers (parity tests against another tool): ``answers(model, messages)`` gives the text
        #: to answer, or ``None`` to answer by the directives as usual.
        self.answers = answers
        #: Seconds between streamed events, so a streamed answer's first token comes before its end.
        self.stream_interval = float(stream_interval)
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._stats = _empty_stats()
        self._window: collections.deque[float] = collections.deque()
        self._calls: collections.deque[tuple[float, float, str, str, int]] = collections.deque(
            maxlen=CALL_LOG_SIZE
        )
        self._attempts: dict[bytes, int] = {}
        self._sequence = 0
        self._models: dict[str, None] = dict.fromkeys(DEFAULT_MODELS)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._startup_error: BaseException | None = None
        self._batch_delay, self._batch_window = float(batch_delay), batch_window
        self._batches: BatchDesk | None = None

    @property
    def batches(self) -> BatchDesk:
        """The batch APIs (OpenAI Batch, Anthropic Message Batches); each request answered like a chat call.
        Made on first use: a run that sends no batch request loads none of it (start-up time)."""
        if self._batches is None:
            with self._lock:
                if self._batches is None:
                    self._batches = on_demand.batches.BatchDesk(self._batch_answer, delay=self._batch_delay,
                                                                window=self._batch_window)
        return self._batches

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
                              "retry_after": self.retry_after, "stream_interval": self.stream_interval,
                              "batch_delay": self._batch_delay, "batch_window": self._batch_window}
        snapshot["batches"] = self.batches.stats()
        return snapshot

    def calls(self) -> list[dict[str, Any]]:
        """The last ``CALL_LOG_SIZE`` chat requests, oldest first: when each arrived and was answered
        (monotonic seconds, this process's clock), its model, conversation (a digest of the messages:
        a retry of a request has the same one) and status. How a client's retries are timed is
        measured here, at the provider, not by the client's own account."""
        with self._lock:
            return [dict(zip(("arrived", "answered", "model", "conversation", "status"), row))
                    for row in self._calls]

    def _log_call(self, call: "_Call", model: str, status: int) -> None:
        with self._lock:
            self._calls.append((call.arrived, time.monotonic(), model, call.conversation.hex(), status))

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
                request = await read_request(reader)
                if request is None:
                    break
                if isinstance(request, int):  # a request we cannot parse: answer and hang up
                    await send_json(writer, request, error_body(REASONS.get(request, "bad request")),
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

    async def _dispatch(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must be closed afterwards."""
        path = request.path.split("?", 1)[0].rstrip("/") or "/"
        if request.method == "POST" and _AZURE_PATH.fullmatch(path):
            return await self._chat(request, writer, "openai")
        batch_path = _AZURE_BATCH_PATH.sub("/v1/", path)
        if _BATCH_PATH.match(batch_path):
            return await self._batch_route(request, batch_path, writer)
        routes = {
            ("POST", "/v1/chat/completions"): None, ("POST", "/chat/completions"): None,
            ("POST", "/v1/messages"): "anthropic", ("POST", "/messages"): "anthropic",
            ("GET", "/v1/models"): self._models_body, ("GET", "/models"): self._models_body,
            ("GET", "/stats"): lambda: self.stats(), ("GET", "/health"): lambda: {"status": "ok"},
            ("POST", "/stats/reset"): self._reset_body,
        }
        if (request.method, path) in routes:
            handler = routes[(request.method, path)]
            if handler is None or isinstance(handler, str):
                return await self._chat(request, writer, handler or "openai")
            await send_json(writer, 200, handler(), keep_alive=request.keep_alive)
            return request.keep_alive
        if any(route_path == path for _, route_path in routes):
            await send_json(writer, 405, error_body(f"method {request.method} not allowed on {path}"),
                             keep_alive=request.keep_alive)
        else:
            await send_json(writer, 404, error_body(f"no route {path}"), keep_alive=request.keep_alive)
        return request.keep_alive

    async def _batch_route(self, request: Request, path: str, writer: asyncio.StreamWriter) -> bool:
        """The batch APIs: OpenAI's files and batches (Azure's paths too), Anthropic's message batches."""
        desk, method, keep_alive = self.batches, request.method, request.keep_alive
        BatchRequestError = on_demand.batches.BatchRequestError  # loaded with the desk (first batch request)
        query = urllib.parse.parse_qs(request.path.partition("?")[2])
        after = next(iter(query.get("after") or query.get("after_id") or []), None)
        limit = int((query.get("limit") or ["20"])[0]) if (query.get("limit") or ["20"])[0].isdigit() else 20
        base = f"http://{request.headers.get('host') or f'{self.host}:{self.port}'}"
        parts = path.strip("/").split("/")[1:]  # without "v1"
        anthropic = parts[:2] == ["messages", "batches"]
        wire = server_wire("anthropic" if anthropic else "openai")
        try:
            body: Any = None
            if wire.required_header and not request.headers.get(wire.required_header):
                raise BatchRequestError(f"{wire.required_header}: header is required")
            if parts == ["files"] and method == "POST":
                body = desk.upload(request.headers.get("content-type", ""), request.body)
            elif parts == ["files"] and method == "GET":
                body = desk.list_files(next(iter(query.get("purpose") or []), None))
            elif len(parts) == 2 and parts[0] == "files" and method == "GET":
                body = desk.file(parts[1])
            elif len(parts) == 3 and parts[0] == "files" and parts[2] == "content" and method == "GET":
                await send(writer, 200, desk.file_content(parts[1]),
                           headers={"content-type": "application/octet-stream"}, keep_alive=keep_alive)
                return keep_alive
            elif parts == ["batches"] and method == "POST":
                body = desk.create_openai(_json(request.body))
                await self._hold_created()
            elif parts == ["batches"] and method == "GET":
                body = desk.list_openai(after, limit)
            elif len(parts) == 2 and parts[0] == "batches" and method == "GET":
                body = desk.openai(parts[1])
            elif len(parts) == 3 and parts[0] == "batches" and parts[2] == "cancel" and method == "POST":
                body = desk.cancel_openai(parts[1])
            elif parts == ["messages", "batches"] and method == "POST":
                body = desk.create_anthropic(_json(request.body))
                await self._hold_created()
            elif parts == ["messages", "batches"] and method == "GET":
                body = desk.list_anthropic(base, after, limit)
            elif len(parts) == 3 and anthropic and method == "GET":
                body = desk.anthropic(parts[2], base)
            elif len(parts) == 4 and anthropic and parts[3] == "results" and method == "GET":
                await send(writer, 200, desk.anthropic_results(parts[2]),
                           headers={"content-type": "application/binary"}, keep_alive=keep_alive)
                return keep_alive
            elif len(parts) == 4 and anthropic and parts[3] == "cancel" and method == "POST":
                body = desk.cancel_anthropic(parts[2], base)
            else:
                raise BatchRequestError(f"no route {method} {path}", 404)
        except BatchRequestError as exc:
            await send_json(writer, exc.status, wire.error(exc.status, str(exc)), keep_alive=keep_alive)
            return keep_alive
        await send_json(writer, 200, body, keep_alive=keep_alive)
        return keep_alive

    async def _hold_created(self) -> None:
        """While ``batches.hold_creates`` is set, a created batch's answer is held back: the batch exists
        at the provider, its creator has not heard so (a test kills the creator there)."""
        while self.batches.hold_creates:
            await asyncio.sleep(0.01)

    def _batch_answer(self, wire: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(status, body) for one request of a batch: the chat answer logic, without latency or streaming.

        A fault that would break a connection (reset, malformed, truncated, huge) is a 500 here: a
        batch has no connection per request to break.
        """
        call = _Call(wire, False, True, None, False, time.monotonic())
        try:
            model, messages, tools = server_wire(wire).read(payload)
        except RequestError as exc:
            self._count(None, "requests")
            self._count(None, "errors", bucket=400)
            return 400, self._error(call, 400, str(exc))
        call = _Call(wire, False, True, tools, False, call.arrived, _conversation(model, messages))
        self._models.setdefault(model, None)
        self._count(model, "requests")
        self._count(model, "batched")
        with self._lock:
            attempt = self._attempts.pop(call.conversation, 0) + 1
            self._attempts[call.conversation] = attempt
        try:
            fixed = self.answers(model, messages) if self.answers is not None else None
            directives = collect_directives(messages, model) if fixed is None else []
            if fixed is not None:
                answer = Answer(content=fixed)
            elif self.error_rate and draw(self.seed, call.conversation, attempt) < self.error_rate:
                answer = Answer(status=500, message="simulated server error (error_rate)")
            else:
                _, answer = plan(directives, model, messages, dict(payload, tools=tools), attempt,
                                 self.retry_after)
        except DirectiveError as exc:
            answer = Answer(status=400, message=str(exc))
        self._log_call(call, model, answer.status)
        if answer.status == 200 and answer.fault is not None:
            answer = Answer(status=500, message=f"simulated fault ({answer.fault})")
        if answer.status != 200:
            self._count(model, "errors", bucket=answer.status)
            return answer.status, self._error(
                call, answer.status, answer.message or REASONS.get(answer.status, "")
            )
        with self._lock:
            self._sequence += 1
            sequence = self._sequence
        input_tokens = prompt_tokens(messages, tools)
        body, output_tokens = self._body(answer, model, sequence, payload, wire, input_tokens)
        self._count_completion(model, input_tokens, output_tokens, tool_turn=bool(answer.tool_calls))
        return 200, body

    def _body(self, answer: Answer, model: str, sequence: int, payload: dict[str, Any], wire: str,
              input_tokens: int) -> tuple[dict[str, Any], int]:
        """The JSON body of a plain (not streamed) answer in ``wire``'s format, and its output tokens."""
        content, finish = answer.content, answer.finish_reason
        max_tokens = payload.get("max_tokens")
        if (
            content is not None
            and isinstance(max_tokens, int)
            and max_tokens > 0
            and len(content) > 4 * max_tokens
        ):
            content, finish = content[: 4 * max_tokens], "length"
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if answer.tool_calls:
            message["tool_calls"] = answer.tool_calls
        output_tokens = tokens((content or "") + (json.dumps(answer.tool_calls) if answer.tool_calls else ""))
        body = server_wire(wire).body(model, sequence, message, finish, input_tokens, output_tokens)
        return body, output_tokens

    def _models_body(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "evaljobs-sim"}
                                           for name in self._models]}

    def _reset_body(self) -> dict[str, Any]:
        self.reset_stats()
        return {"status": "reset"}

    async def _chat(self, request: Request, writer: asyncio.StreamWriter, wire: str) -> bool:
        keep_alive = request.keep_alive
        served = server_wire(wire)
        try:
            try:
                payload = json.loads(request.body)
            except ValueError:
                raise RequestError("request body must be JSON with a string 'model' and a list of message "
                                   "objects 'messages'") from None
            if served.required_header and not request.headers.get(served.required_header):
                raise RequestError(f"{served.required_header}: header is required")
            model, messages, tools = served.read(payload)
        except RequestError as exc:
            self._count(None, "requests")
            self._count(None, "errors", bucket=400)
            await send_json(writer, 400, served.error(400, str(exc)), keep_alive=keep_alive)
            return keep_alive
        call = _Call(wire, payload.get("stream") is True, keep_alive, tools,
                     bool((payload.get("stream_options") or {}).get("include_usage")), time.monotonic(),
                     _conversation(model, messages))
        self._models.setdefault(model, None)
        self._count(model, "requests")
        refusal = self._admit()
        if refusal is not None:
            message, retry_after = refusal
            self._count(model, "rate_limited")
            self._log_call(call, model, 429)
            await send_json(writer, 429, self._error(call, 429, message),
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
            return await self._answer(payload, model, messages, writer, call, release)
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
            now = self.clock()
            while self._window and self._window[0] <= now - RPM_WINDOW_S:
                self._window.popleft()
            if len(self._window) >= self.rpm:
                wait = max(self._window[0] + RPM_WINDOW_S - now, 0.001)
                return (f"rate limit reached ({self.rpm} requests per minute)", wait)
            self._window.append(now)
        return None

    async def _answer(self, payload: dict[str, Any], model: str, messages: list[dict[str, Any]],
                      writer: asyncio.StreamWriter, call: "_Call", release=lambda: None) -> bool:
        key = call.conversation  # a digest of (model, messages): a retry continues the same count
        attempt = self._attempts.pop(key, 0) + 1
        if len(self._attempts) >= MAX_TRACKED_CONVERSATIONS:  # forget the least recently seen half
            for stale in list(itertools.islice(self._attempts, MAX_TRACKED_CONVERSATIONS // 2)):
                del self._attempts[stale]
        self._attempts[key] = attempt
        delay = self.latency
        if self.jitter:
            delay += self._rng.uniform(-self.jitter, self.jitter)
        try:
            fixed = self.answers(model, messages) if self.answers is not None else None
            directives = collect_directives(messages, model) if fixed is None else []
            if fixed is not None:
                answer = Answer(content=fixed)
            elif self.error_rate and draw(self.seed, key, attempt) < self.error_rate:
                answer = Answer(status=500, message="simulated server error (error_rate)")
            else:
                extra_sleep, answer = plan(directives, model, messages, dict(payload, tools=call.tools),
                                           attempt, self.retry_after)
                delay += extra_sleep
        except DirectiveError as exc:
            answer = Answer(status=400, message=str(exc))
        if delay > 0:
            await asyncio.sleep(delay)
        release()
        return await self._respond(answer, model, messages, payload, writer, call)

    def _error(self, call: "_Call", status: int, message: str) -> dict[str, Any]:
        return server_wire(call.wire).error(status, message)

    async def _respond(self, answer: Answer, model: str, messages: list[dict[str, Any]],
                       payload: dict[str, Any], writer: asyncio.StreamWriter, call: "_Call") -> bool:
        keep_alive = call.keep_alive
        self._log_call(call, model, answer.status)
        if answer.status != 200:
            headers = {}
            if answer.status == 429:
                self._count(model, "rate_limited")
                wait = answer.retry_after if answer.retry_after is not None else self.retry_after
                headers = (
                    {"retry-after": answer.retry_after_date}
                    if answer.retry_after_date
                    else _retry_headers(wait)
                )
            else:
                self._count(model, "errors", bucket=answer.status)
            message = answer.message or REASONS.get(answer.status, "")
            await send_json(writer, answer.status, self._error(call, answer.status, message), headers=headers,
                            keep_alive=keep_alive)
            return keep_alive
        if answer.fault == "reset":
            self._count(model, "faults", bucket="reset")
            reset_connection(writer)
            return False
        if answer.fault == "malformed":
            self._count(model, "faults", bucket="malformed")
            await send(writer, 200, b'{"choices": [{"message": this is not JSON', keep_alive=keep_alive)
            return keep_alive
        input_tokens = (
            prompt_tokens(messages, call.tools) if answer.prompt_tokens is None else answer.prompt_tokens
        )
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
        if content is not None and isinstance(max_tokens, int) and 0 < max_tokens < len(content) / 4:
            content, finish = content[: 4 * max_tokens], "length"
        reply: dict[str, Any] = {"role": "assistant", "content": content}
        if answer.tool_calls:
            reply["tool_calls"] = answer.tool_calls
        calls_text = json.dumps(answer.tool_calls) if answer.tool_calls else ""
        output_tokens = tokens((content or "") + calls_text)
        if call.stream:
            events = server_wire(call.wire).events(model, sequence, reply, finish, input_tokens,
                                                   output_tokens, call.include_usage)
            if answer.fault == "truncate":
                self._count(model, "faults", bucket="truncate")
                await self._send_stream(writer, events[: len(events) // 2], keep_alive=False, finish=False)
                return False
            self._count_completion(model, input_tokens, output_tokens, tool_turn=bool(answer.tool_calls))
            await self._send_stream(writer, events, keep_alive=keep_alive)
            return keep_alive
        body = server_wire(call.wire).body(model, sequence, reply, finish, input_tokens, output_tokens)
        if answer.fault == "truncate":
            self._count(model, "faults", bucket="truncate")
            data = json.dumps(body).encode()
            writer.write(head(200, len(data) + 64, {"content-type": "application/json"}, keep_alive=True))
            writer.write(data[: len(data) // 2])
            await writer.drain()
            writer.close()
            return False
        self._count_completion(model, input_tokens, output_tokens, tool_turn=bool(answer.tool_calls))
        await send_json(writer, 200, body, headers=self._limit_headers(call.wire), keep_alive=keep_alive)
        return keep_alive

    async def _send_stream(self, writer: asyncio.StreamWriter, events: list[bytes], *, keep_alive: bool,
                           finish: bool = True) -> None:
        """Server-Sent Events in HTTP/1.1 chunked encoding, ``stream_interval`` seconds apart."""
        lines = [f"HTTP/1.1 200 {REASONS[200]}", "content-type: text/event-stream", "cache-control: no-cache",
                 "transfer-encoding: chunked", f"connection: {'keep-alive' if keep_alive else 'close'}"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        for number, event in enumerate(events):
            if number and self.stream_interval:
                await asyncio.sleep(self.stream_interval)
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        if finish:
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        if not finish:
            writer.close()

    def _count_completion(self, model: str, input_tokens: int, output_tokens: int, *,
                          tool_turn: bool) -> None:
        self._count(model, "completed")
        self._count(model, "input_tokens", input_tokens)
        self._count(model, "output_tokens", output_tokens)
        if tool_turn:
            self._count(model, "tool_call_turns")

    def _limit_headers(self, wire: str = "openai") -> dict[str, str]:
        if self.rpm is None:
            return {}
        remaining = max(0, self.rpm - len(self._window))
        reset_in = self._window[0] + RPM_WINDOW_S - self.clock() if self._window else 0.0
        return server_wire(wire).limit_headers(self.rpm, remaining, reset_in)

    async def _send_huge(self, writer: asyncio.StreamWriter, model: str, sequence: int, size: int,
                         input_tokens: int, output_tokens: int, keep_alive: bool) -> None:
        """A valid answer whose content is ``size`` bytes, written in chunks (never built whole)."""
        marker = "@@HUGE-CONTENT@@"
        template = json.dumps(completion_body(model, sequence, {"role": "assistant", "content": marker},
                                               "stop", input_tokens, output_tokens)).encode()
        prefix, suffix = template.split(marker.encode())
        writer.write(head(200, len(prefix) + size + len(suffix), {"content-type": "application/json"},
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



#: Azure OpenAI's classic deployment path and its v1 path, served like /v1/chat/completions.
_AZURE_PATH = re.compile(r"/openai/(deployments/[^/]+|v1)/chat/completions")
#: The batch APIs' paths (after Azure's ``/openai/`` or ``/openai/v1/`` prefix is read as ``/v1/``).
_BATCH_PATH = re.compile(r"/v1/(files|batches|messages/batches)(/|$)")
_AZURE_BATCH_PATH = re.compile(r"^/openai/(v1/)?(?=files|batches)")


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise on_demand.batches.BatchRequestError("request body must be JSON") from None


class _Call(NamedTuple):
    """How one chat request wants its answer: wire format, streamed or not."""

    wire: str
    stream: bool
    keep_alive: bool
    tools: Any
    include_usage: bool
    #: When the request arrived (monotonic seconds) and whose conversation it continues, for the call log.
    arrived: float = 0.0
    conversation: bytes = b""


def _conversation(model: str, messages: list[dict[str, Any]]) -> bytes:
    """The conversation's key: the same for a retry of a request (attempt counts, draws, the call log)."""
    return hashlib.sha256(json.dumps([model, messages], sort_keys=True, default=str).encode()).digest()[:16]


def _retry_headers(seconds: float) -> dict[str, str]:
    """``Retry-After`` in whole seconds (as HTTP requires), ``retry-after-ms`` exact."""
    return {"retry-after": str(max(0, math.ceil(seconds))), "retry-after-ms": str(int(round(seconds * 1000)))}


def _empty_model_stats() -> dict[str, Any]:
    return {"requests": 0, "completed": 0, "rate_limited": 0, "errors": {}, "faults": {},
            "tool_call_turns": 0, "input_tokens": 0, "output_tokens": 0, "batched": 0}


def _empty_stats() -> dict[str, Any]:
    stats = _empty_model_stats()
    stats.update({"in_flight": 0, "peak_in_flight": 0, "connections": 0, "by_model": {}})
    return stats
