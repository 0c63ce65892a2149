"""OpenAI-compatible chat completions over httpx, one keep-alive connection pool per endpoint per process.

Every failure leaves ``ChatClient.complete`` as a typed ``ProviderError`` whose
reason is one specific line (never the API key or the Authorization header), so
callers decide retry vs. give-up by type. Bodies are read streamed and capped, so
a runaway 50 MB answer costs at most ``max_response_bytes`` of memory.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Mapping

import httpx

from evaljobs.config import secret
from evaljobs.providers.errors import (PermanentError,
                                       ProviderError,
                                       RateLimited,
                                       TransientError,
                                       parse_retry_after)

logger = logging.getLogger("evaljobs.providers")

#: How much of a provider's own error message is kept in a reason.
PROVIDER_MESSAGE_CAP = 200
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RESPONSE_BYTES = 10_000_000
#: Sized for a wide fan-out: one process may have hundreds of calls in flight.
DEFAULT_MAX_CONNECTIONS = 256

_BEARER = re.compile(r"(?i)\bbearer\s+\S+")


@dataclass
class RequestedToolCall:
    """A tool call the model asked for. ``arguments_error`` is set when its JSON did not parse."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    arguments_error: str | None = None


@dataclass
class Completion:
    """One parsed chat-completion answer."""

    content: str
    tool_calls: list[RequestedToolCall]
    input_tokens: int
    output_tokens: int
    finish_reason: str | None
    latency_ms: float
    #: The assistant message to append to the conversation (tool_calls in OpenAI shape).
    raw_message: dict[str, Any]
    #: Rate-limit response headers (``x-ratelimit-*``, ``retry-after*``), lower-cased, for a governor.
    headers: dict[str, str] = field(default_factory=dict)
    model: str | None = None


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


class ChatClient:
    """A keep-alive connection pool to one OpenAI-compatible endpoint; thread-safe.

    Create one per (endpoint, credentials) and share it — ``get_client`` does that
    per process. ``transport`` is for tests (``httpx.MockTransport``).

    The pool is a LIFO of single-connection ``httpx.HTTPTransport`` objects, each leased
    to one thread per call, rather than one ``httpx.Client`` with ``max_connections``
    connections: httpcore's pool rescans every connection under one lock on each
    request (quadratic), and with ~200 threads on 256 connections 900 calls of
    0.5 s took 20-30 s instead of ~2.5 s and failed with ``EBADF`` (a connection
    closed by one thread while another used it). A leased transport is never shared,
    so neither happens; keep-alive reuse is the same.

    Requests go straight to the transport (``handle_request``), not through
    ``httpx.Client``: a call here needs none of what the client adds (cookies,
    redirects, auth flows, URL merging), and skipping it cut the CPU of a call by
    40 % (943 → 566 µs on loopback), the largest per-pair cost of a worker on a
    fast provider. What the client did that matters is kept: its default headers,
    and proxies from ``HTTP(S)_PROXY``/``ALL_PROXY``/``NO_PROXY``.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 headers: Mapping[str, str] | None = None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 transport: httpx.BaseTransport | None = None):
        if timeout <= 0:
            raise ValueError(f"provider timeout must be > 0 seconds, not {timeout!r}")
        if max_response_bytes <= 0:
            raise ValueError(f"max_response_bytes must be > 0, not {max_response_bytes!r}")
        if max_connections <= 0:
            raise ValueError(f"max_connections must be > 0, not {max_connections!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.max_response_bytes = int(max_response_bytes)
        self.max_connections = int(max_connections)
        self._headers = httpx.Headers({"accept": "application/json", "accept-encoding": "gzip, deflate",
                                      "connection": "keep-alive", "user-agent": "evaljobs"})
        self._headers.update({k.lower(): v for k, v in (headers or {}).items()})
        self.set_api_key(api_key)
        self._transport = transport
        try:
            self._url: httpx.URL | str = httpx.URL(f"{self.base_url}/chat/completions")
        except httpx.InvalidURL:
            self._url = f"{self.base_url}/chat/completions"  # fails, with its reason, on each call
        self._timeouts = httpx.Timeout(self.timeout).as_dict()
        self._idle: list[httpx.BaseTransport] = []
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._leased = 0
        self._closed = False
        self._pool = threading.Lock()

    def __repr__(self) -> str:
        return f"ChatClient({self.base_url!r}, timeout={self.timeout!r})"

    def __enter__(self) -> "ChatClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close idle connections now and leased ones when their call ends."""
        with self._pool:
            self._closed = True
            idle, self._idle = self._idle, []
            waiters, self._waiters = list(self._waiters), collections.deque()
        for waiter in waiters:
            waiter.event.set()  # wakes with no grant: the client is closed
        for http in idle:
            http.close()

    def set_api_key(self, api_key: str | None) -> None:
        """Replace the credential (a rotated key); it lives only in the Authorization header.

        The headers are swapped whole, so a call running in another thread sees either key, never a mix.
        """
        headers = self._headers.copy()
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        else:
            headers.pop("authorization", None)
        self._headers = headers

    def _lease(self) -> httpx.BaseTransport:
        """The most recently used idle connection, a new one, or the next one released.

        Released connections are handed straight to the longest waiter (FIFO), so a
        thread that just finished a call cannot barge ahead of threads already waiting.
        """
        with self._pool:
            if self._closed:
                raise PermanentError(f"client for {self.base_url} is closed")
            if self._idle:
                self._leased += 1
                return self._idle.pop()
            if self._leased < self.max_connections:
                self._leased += 1
                grant: Any = _NEW_CONNECTION
            else:
                waiter = _Waiter()
                self._waiters.append(waiter)
                grant = None
        if grant is None:
            waiter.event.wait(self.timeout)
            with self._pool:
                grant = waiter.grant
                if grant is None and waiter in self._waiters:
                    self._waiters.remove(waiter)
            if grant is None:
                if self._closed:
                    raise PermanentError(f"client for {self.base_url} is closed")
                raise TransientError(f"timed out after {self.timeout:g} s waiting for a free pooled "
                                     f"connection ({self.max_connections} in use)")
        if grant is not _NEW_CONNECTION:
            return grant
        try:
            return self._new_http()
        except BaseException:
            self._release(None)
            raise

    def _release(self, http: httpx.BaseTransport | None) -> None:
        """Give the connection (or, with None, the right to open one) to a waiter, else park it."""
        with self._pool:
            if self._waiters and not self._closed:
                waiter = self._waiters.popleft()
                waiter.grant = http if http is not None else _NEW_CONNECTION
                waiter.event.set()
                return
            self._leased -= 1
            keep = http is not None and not self._closed
            if keep:
                self._idle.append(http)
        if http is not None and not keep:
            http.close()

    def _new_http(self) -> httpx.BaseTransport:
        if self._transport is not None:
            return self._transport
        return httpx.HTTPTransport(
            verify=_shared_ssl_context(), proxy=_environment_proxy(self._url),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=30.0),
        )

    def complete(self, model: str, messages: list[dict[str, Any]], *,
                 tools: list[dict[str, Any]] | None = None, temperature: float | None = None,
                 max_tokens: int | None = None, extra: dict[str, Any] | None = None,
                 timeout: float | None = None) -> Completion:
        """POST ``{base_url}/chat/completions``; raise a typed ``ProviderError`` on any failure.

        ``timeout`` shortens this one call (e.g. to what is left of a per-pair time limit).
        """
        body = request_body(model, messages, tools=tools, temperature=temperature, max_tokens=max_tokens,
                            extra=extra)
        url = self._url
        started = time.perf_counter()
        # The ProviderError is raised *after* the except blocks so that it carries no
        # __context__ pointing at httpx exceptions (whose request holds the key).
        error: ProviderError | None = None
        phase = "send"
        request_headers = self._headers
        try:
            http = self._lease()
            try:
                call_timeout = min(self.timeout, timeout) if timeout else self.timeout
                timeouts = self._timeouts if call_timeout == self.timeout else httpx.Timeout(call_timeout).as_dict()
                request = httpx.Request("POST", url, json=body, headers=request_headers,
                                        extensions={"timeout": timeouts})
                response = http.handle_request(request)
                try:
                    phase = "body"
                    response.request = request
                    payload = self._read_body(response, started, call_timeout)
                    status = response.status_code
                    headers = response.headers
                finally:
                    response.close()
            finally:
                self._release(http)
        except ProviderError as exc:
            error = exc
        except httpx.TimeoutException as exc:
            error = TransientError(self._timeout_reason(exc))
        except httpx.RemoteProtocolError as exc:
            if phase == "body":
                error = TransientError(f"response body truncated ({exc})")
            else:
                error = TransientError(f"connection closed by provider without a response ({exc})")
        except httpx.ReadError as exc:
            where = "while reading the response body" if phase == "body" else "before a response"
            error = TransientError(f"{_network_text(exc, 'connection reset')} {where}")
        except httpx.WriteError as exc:
            error = TransientError(f"{_network_text(exc, 'connection lost')} while sending the request")
        except httpx.ConnectError as exc:
            reason = _network_text(exc, "connect error")
            error = TransientError(f"cannot connect to {self.base_url}: {reason}")
        except httpx.DecodingError as exc:
            error = PermanentError(f"undecodable response body ({exc})")
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            error = PermanentError(f"invalid provider URL {url!r}: {exc}")
        except httpx.TransportError as exc:
            error = TransientError(f"{type(exc).__name__} talking to {self.base_url}: {exc or 'no detail'}")
        latency_ms = (time.perf_counter() - started) * 1000.0
        if error is None:
            try:
                completion = self._completion(status, headers, payload, latency_ms)
                logger.debug("provider call: POST %s -> HTTP %s in %.0f ms", url, status, latency_ms)
                return completion
            except ProviderError as exc:
                error = exc
        error = self._scrubbed(error)
        logger.debug("provider call: POST %s -> %s in %.0f ms", url, error.reason, latency_ms)
        raise error

    # -- private helpers ------------------------------------------------------------------

    def _read_body(self, response: httpx.Response, started: float, timeout: float | None = None) -> bytes:
        """The whole body, refusing (without buffering) anything over ``max_response_bytes``."""
        cap = self.max_response_bytes
        declared = response.headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > cap:
            raise PermanentError(f"response too large (> {cap} bytes; Content-Length {int(declared)})",
                                 status=response.status_code)
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > cap:
                raise PermanentError(f"response too large (> {cap} bytes)", status=response.status_code)
            chunks.append(chunk)
            limit = timeout or self.timeout
            if time.perf_counter() - started > limit:
                raise TransientError(f"timed out after {limit:g} s reading the response body")
        return b"".join(chunks)

    def _completion(self, status: int, headers: httpx.Headers, payload: bytes,
                    latency_ms: float) -> Completion:
        limit_headers = {k.lower(): v for k, v in headers.items()
                         if k.lower().startswith("x-ratelimit-") or k.lower().startswith("retry-after")}
        if status == 429:
            raise RateLimited(f"HTTP 429 from provider: {_provider_message(payload)}",
                              retry_after=parse_retry_after(headers))
        if status == 408 or status >= 500:
            raise TransientError(f"HTTP {status} from provider: {_provider_message(payload)}", status=status)
        if status >= 400:
            raise PermanentError(f"HTTP {status} from provider: {_provider_message(payload)}", status=status)
        if not 200 <= status < 300:
            location = headers.get("location")
            hint = f" to {location}" if location else ""
            raise PermanentError(f"unexpected HTTP {status}{hint} from provider; check the base URL",
                                 status=status)
        try:
            data = json.loads(payload)
        except ValueError as exc:
            raise PermanentError(f"malformed JSON in response body ({exc}; {len(payload)} bytes)",
                                 status=status) from None
        return _parse_completion(data, status, latency_ms, limit_headers)

    def _timeout_reason(self, exc: httpx.TimeoutException) -> str:
        what = {
            httpx.ConnectTimeout: "connecting",
            httpx.ReadTimeout: "waiting for the response",
            httpx.WriteTimeout: "sending the request",
            httpx.PoolTimeout: "waiting for a free pooled connection",
        }.get(type(exc), "")
        return f"timed out after {self.timeout:g} s {what}".strip()

    def _scrubbed(self, error: ProviderError) -> ProviderError:
        """Remove the API key and any bearer token from the reason (providers echo bad keys)."""
        reason = _BEARER.sub("Bearer ***", error.reason)
        auth = self._headers.get("authorization", "")
        secret = auth[7:].strip() if auth.lower().startswith("bearer ") else auth.strip()
        if secret:
            reason = reason.replace(secret, "***")
        if reason != error.reason:
            error.reason = reason
            error.args = (reason,)
        error.__context__ = None
        error.__cause__ = None
        return error


_NEW_CONNECTION = object()


def _environment_proxy(url: httpx.URL | str) -> str | None:
    """The proxy ``httpx.Client`` would use for ``url`` (``trust_env``): HTTP(S)_PROXY, ALL_PROXY, NO_PROXY."""
    if not isinstance(url, httpx.URL):
        return None
    proxies = urllib.request.getproxies_environment()
    if not proxies or urllib.request.proxy_bypass_environment(url.host, proxies):
        return None
    return proxies.get(url.scheme) or proxies.get("all")


class _Waiter:
    """A thread waiting for a pooled connection; ``grant`` is set by the releasing thread."""

    __slots__ = ("event", "grant")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.grant: Any = None


_ssl_context: Any = None
_ssl_context_lock = threading.Lock()


def _shared_ssl_context() -> Any:
    """One default-verifying SSL context per process: building one loads the CA bundle (~100 ms)."""
    global _ssl_context
    with _ssl_context_lock:
        if _ssl_context is None:
            _ssl_context = httpx.create_ssl_context()
        return _ssl_context


def _parse_completion(data: Any, status: int, latency_ms: float, headers: dict[str, str]) -> Completion:
    if isinstance(data, dict) and "choices" not in data and data.get("error"):
        raise PermanentError(f"provider returned an error with HTTP {status}: {_error_text(data)}",
                             status=status)
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        keys = sorted(data)[:8] if isinstance(data, dict) else type(data).__name__
        raise PermanentError(f"unexpected response: no choices[0].message in the JSON body (got {keys})",
                             status=status)
    tool_calls = [_parse_tool_call(i, raw, status) for i, raw in enumerate(message.get("tool_calls") or [])]
    raw_message: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if tool_calls:
        raw_message["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": _raw_arguments(raw)}}
            for call, raw in zip(tool_calls, message.get("tool_calls"))
        ]
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Completion(
        content=_text(message.get("content")),
        tool_calls=tool_calls,
        input_tokens=_int(usage.get("prompt_tokens", usage.get("input_tokens"))),
        output_tokens=_int(usage.get("completion_tokens", usage.get("output_tokens"))),
        finish_reason=choice.get("finish_reason"),
        latency_ms=latency_ms,
        raw_message=raw_message,
        headers=headers,
        model=data.get("model") if isinstance(data.get("model"), str) else None,
    )


def _parse_tool_call(index: int, raw: Any, status: int) -> RequestedToolCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise PermanentError(f"unexpected response: tool_calls[{index}] has no function name", status=status)
    call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"call_{index}"
    arguments = function.get("arguments")
    if isinstance(arguments, dict):  # some servers send an object instead of a JSON string
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


def _raw_arguments(raw: dict[str, Any]) -> str:
    arguments = raw["function"].get("arguments")
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {})


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _provider_message(payload: bytes) -> str:
    """The provider's own error message, from the usual JSON shapes or the raw text, cut short."""
    try:
        data = json.loads(payload)
    except ValueError:
        data = None
    text = _error_text(data) if isinstance(data, dict) else ""
    if not text:
        text = payload[: PROVIDER_MESSAGE_CAP * 4].decode("utf-8", "replace")
    text = " ".join(text.split()) or "no error message"
    if len(text) > PROVIDER_MESSAGE_CAP:
        text = text[: PROVIDER_MESSAGE_CAP - 1] + "…"
    return text


def _error_text(data: dict[str, Any]) -> str:
    error = data.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error.get("code") or "")
    if isinstance(error, str):
        return error
    for key in ("message", "detail"):
        if isinstance(data.get(key), str):
            return data[key]
    return ""


def _network_text(exc: Exception, default: str) -> str:
    text = str(exc)
    lowered = text.lower()
    if "reset" in lowered:
        return "connection reset"
    if "refused" in lowered:
        return "connection refused"
    if "broken pipe" in lowered:
        return "connection lost (broken pipe)"
    return f"{default} ({text})" if text else default


# -- one pooled client per process --------------------------------------------------------

_clients: dict[tuple[Any, ...], ChatClient] = {}
_clients_lock = threading.Lock()
_clients_pid = os.getpid()


def get_client(base_url: str, api_key_env: str | None = None, timeout: float = DEFAULT_TIMEOUT,
               headers: Mapping[str, str] | None = None) -> ChatClient:
    """The process-wide ``ChatClient`` for this endpoint, created on first use.

    The key is read from the environment variable ``api_key_env`` on every call, so a rotated
    key reaches the shared client; it is kept only in the Authorization header.
    After a fork the child starts a fresh pool instead of sharing the parent's sockets.
    """
    global _clients_pid
    api_key = None
    if api_key_env:
        api_key = secret(api_key_env)
        if not api_key:
            raise PermanentError(f"environment variable {api_key_env} is not set; export it with the API key "
                                 f"for {base_url}")
    cache_key = (base_url.rstrip("/"), api_key_env, float(timeout), tuple(sorted((headers or {}).items())))
    with _clients_lock:
        if os.getpid() != _clients_pid:
            _clients.clear()  # the parent's connections are not ours to use or close
            _clients_pid = os.getpid()
        client = _clients.get(cache_key)
        if client is None or client.closed:
            client = ChatClient(base_url, api_key=api_key, timeout=timeout, headers=headers)
            _clients[cache_key] = client
        elif api_key and client._headers.get("authorization") != f"Bearer {api_key}":
            client.set_api_key(api_key)
    return client


def close_clients() -> None:
    """Close every cached client (worker shutdown, tests)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()
