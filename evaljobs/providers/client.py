"""Chat calls over httpx, one keep-alive connection pool per endpoint per process, any wire format.

What is sent and how the answer is read belong to a wire format (``evaljobs.providers.wire``:
OpenAI-compatible, Anthropic Messages, Azure OpenAI); this module owns the HTTP: the pooled
connections, timeouts (a wall per call: ``evaljobs.network.deadline``), size caps, SSE streaming
with the time to first token, and turning transport failures into typed errors.

Every failure leaves ``ChatClient.complete`` as a typed ``ProviderError`` whose reason is one
specific line (never the API key or the Authorization header), so callers decide retry vs. give-up
by type. Bodies are read streamed and capped: a 50 MB answer costs at most ``max_response_bytes``.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import re
import ssl
import threading
import time
import urllib.request
from typing import Any, Iterator, Mapping

from evaljobs.network.http_client import httpx  # without its CLI (start-up time)
from evaljobs.catalog.modelspec import is_credential_header
from evaljobs.config import secret
from evaljobs.redact import redact_text, register_secret
from evaljobs.network import deadline
from evaljobs.providers import attempts
from evaljobs.providers.completion import Completion, RequestedToolCall
from evaljobs.network.errors import PermanentError, ProviderError, TransientError
from evaljobs.providers.wire import WireFormat, wire_format
from evaljobs.providers.wire._common import PROVIDER_MESSAGE_CAP, sse_events

logger = logging.getLogger("evaljobs.providers")

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RESPONSE_BYTES = 10_000_000
#: Sized for a wide fan-out: one process may have hundreds of calls in flight.
DEFAULT_MAX_CONNECTIONS = 256

_BEARER = re.compile(r"(?i)\bbearer\s+\S+")


class ChatClient:
    """A keep-alive connection pool to one provider endpoint; thread-safe.

    ``wire`` names the wire format (``openai``, ``anthropic``, ``azure``);
    ``api_version`` is Azure's ``api-version`` or Anthropic's ``anthropic-version``;
    ``stream`` makes every call stream (SSE) unless the call says otherwise.

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
                 transport: httpx.BaseTransport | None = None, wire: str = "openai",
                 api_version: str | None = None, stream: bool = False):
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
        try:
            self._wire: WireFormat = wire_format(wire)
        except KeyError:
            raise ValueError(f"unknown wire format {wire!r}; known: openai, anthropic, azure") from None
        self.wire = wire
        self.api_version = api_version
        self.stream = bool(stream)
        self._headers = httpx.Headers({"accept": "application/json", "accept-encoding": "gzip, deflate",
                                      "connection": "keep-alive", "user-agent": "evaljobs"})
        self._headers.update(self._wire.static_headers(api_version))
        #: The providers file's ``headers:``, sent on every wire format and laid over the key's own
        #: auth header: ``api-key: ${AZURE_KEY}`` or a gateway's header is the credential as written.
        self._configured = {k.lower(): v for k, v in (headers or {}).items()}
        for name, value in self._configured.items():
            if is_credential_header(name):
                register_secret(value)  # a literal one too: scrubbed from every error and transcript
        self._api_key: str | None = None
        self.set_api_key(api_key)
        self._transport = transport
        #: model -> request URL (Azure's classic URL names the deployment, i.e. the model).
        self._urls: dict[str, httpx.URL | str] = {}
        # The proxy decision is per host, the same for every model (and every Azure deployment).
        self._url = self._url_for("model", remember=False)
        self._timeouts = httpx.Timeout(self.timeout).as_dict()
        self._idle: list[httpx.BaseTransport] = []
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._leased = 0
        self._closed = False
        self._pool = threading.Lock()

    def __repr__(self) -> str:
        return f"ChatClient({self.base_url!r}, wire={self.wire!r}, timeout={self.timeout!r})"

    def _url_for(self, model: str, *, remember: bool = True) -> httpx.URL | str:
        text = self._wire.url(self.base_url, model, self.api_version)
        try:
            url: httpx.URL | str = httpx.URL(text)
        except httpx.InvalidURL:
            url = text  # fails, with its reason, on each call
        if remember and len(self._urls) < 10_000:
            self._urls[model] = url
        return url

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
        """Replace the credential (a rotated key); it lives only in the wire format's auth header.

        The headers are swapped whole, so a call running in another thread sees either key, never a mix.
        """
        headers = self._headers.copy()
        for name in _AUTH_HEADERS:
            headers.pop(name, None)
        if api_key:
            headers.update(self._wire.auth_headers(api_key))
        headers.update(self._configured)
        self._api_key = api_key or None
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
            waiter.event.wait(deadline.remaining(self.timeout))
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
            if keep and http is not None:
                self._idle.append(http)
        if http is not None and not keep:
            http.close()

    def _new_http(self) -> httpx.BaseTransport:
        if self._transport is not None:
            return self._transport
        proxy = _environment_proxy(self._url)
        return deadline.bounded(httpx.HTTPTransport(
            verify=_ssl_for(self._url, proxy), proxy=proxy,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=30.0),
        ))

    def complete(self, model: str, messages: list[dict[str, Any]], *,
                 tools: list[dict[str, Any]] | None = None, temperature: float | None = None,
                 max_tokens: int | None = None, extra: dict[str, Any] | None = None,
                 timeout: float | None = None, stream: bool | None = None) -> Completion:
        """POST the chat request the wire format describes; raise a typed ``ProviderError`` on any failure.

        ``timeout`` shortens this one call (e.g. to what is left of a per-pair time limit).
        ``stream`` (default: the client's) reads the answer as Server-Sent Events and
        records the time to the first token; a server that answers a streamed request
        with plain JSON is read as JSON.
        """
        streaming = self.stream if stream is None else stream
        body = self._wire.body(model, messages, tools=tools, temperature=temperature, max_tokens=max_tokens,
                               extra=extra, stream=streaming)
        url = self._urls.get(model) or self._url_for(model)
        started = time.perf_counter()
        ttft_ms: float | None = None
        events: Any = None
        # The ProviderError is raised *after* the except blocks so that it carries no
        # __context__ pointing at httpx exceptions (whose request holds the key).
        error: ProviderError | None = None
        phase = "send"
        request_headers = self._headers
        call_timeout = min(self.timeout, timeout) if timeout else self.timeout
        wall = deadline.scope(time.monotonic() + call_timeout)
        wall.__enter__()
        sent = False  # a request that never left (no free connection, a closed client) is no attempt
        try:
            http = self._lease()
            sent = True
            try:
                timeouts = (
                    self._timeouts if call_timeout == self.timeout else httpx.Timeout(call_timeout).as_dict()
                )
                request = httpx.Request("POST", url, json=body, headers=request_headers,
                                        extensions={"timeout": timeouts})
                response = http.handle_request(request)
                try:
                    phase = "body"
                    response.request = request
                    status = response.status_code
                    headers = response.headers
                    if streaming and status == 200 and "event-stream" in headers.get("content-type", ""):
                        events, ttft_ms = self._read_stream(response, started, call_timeout)
                        payload = b""
                    else:
                        payload = self._read_body(response, started, call_timeout)
                finally:
                    response.close()
            finally:
                self._release(http)
        except ProviderError as exc:
            error = exc
        except httpx.TimeoutException as exc:
            error = TransientError(self._timeout_reason(exc, call_timeout))
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
        finally:
            wall.__exit__(None, None, None)
        latency_ms = (time.perf_counter() - started) * 1000.0
        if error is None:
            try:
                if events is not None:
                    completion = self._wire.completion(events, status, latency_ms,
                                                       self._wire.limit_headers(headers))
                    completion.ttft_ms = ttft_ms
                else:
                    completion = self._completion(status, headers, payload, latency_ms)
                completion.request_body, completion.response_body = (
                    body,
                    payload if events is None else events,
                )
                logger.debug("provider call: POST %s -> HTTP %s in %.0f ms", url, status, latency_ms)
                attempts.record(attempts.OK)
                return completion
            except ProviderError as exc:
                error = exc
        error = self._scrubbed(error)
        if sent:  # the attempt log: what the provider saw, for the benchmark's error rate
            attempts.record(attempts.outcome_of(error))
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
        if not 200 <= status < 300:
            raise self._wire.error(status, headers, payload)
        try:
            data = json.loads(payload)
        except ValueError as exc:
            raise PermanentError(f"malformed JSON in response body ({exc}; {len(payload)} bytes)",
                                 status=status) from None
        return self._wire.completion(data, status, latency_ms, self._wire.limit_headers(headers))

    def _read_stream(self, response: httpx.Response, started: float,
                     timeout: float | None = None) -> tuple[Any, float | None]:
        """(the answer folded back into one body, ms to the first token) from an SSE stream."""
        reader = self._wire.stream_reader()
        ttft_ms: float | None = None
        for event, data in sse_events(self._stream_lines(response, started, timeout)):
            if reader.feed(event, data) and ttft_ms is None:
                ttft_ms = (time.perf_counter() - started) * 1000.0
        return reader.result(), ttft_ms

    def _stream_lines(self, response: httpx.Response, started: float,
                      timeout: float | None) -> Iterator[bytes]:
        cap = self.max_response_bytes
        limit = timeout or self.timeout
        size = 0
        pending = b""
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > cap:
                raise PermanentError(f"response too large (> {cap} bytes)", status=response.status_code)
            if time.perf_counter() - started > limit:
                raise TransientError(f"timed out after {limit:g} s reading the response stream")
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line[:-1] if line.endswith(b"\r") else line
        if pending:
            yield pending

    def _timeout_reason(self, exc: httpx.TimeoutException, limit: float) -> str:
        what = {
            httpx.ConnectTimeout: "connecting",
            httpx.ReadTimeout: "waiting for the response",
            httpx.WriteTimeout: "sending the request",
            httpx.PoolTimeout: "waiting for a free pooled connection",
        }.get(type(exc), "")
        return f"timed out after {limit:g} s {what}".strip()

    def _scrubbed(self, error: ProviderError) -> ProviderError:
        """The reason without the key, any bearer token or configured secret (``evaljobs.redact``)."""
        register_secret(self._api_key)
        reason = redact_text(_BEARER.sub("Bearer ***", error.reason))
        if reason != error.reason:
            error.reason = reason
            error.args = (reason,)
        error.__context__ = None
        error.__cause__ = None
        return error


_NEW_CONNECTION = object()
#: Every header a wire format may carry the key in (removed whole when the key changes).
_AUTH_HEADERS = ("authorization", "api-key", "x-api-key")


def _environment_proxy(url: httpx.URL | str) -> str | None:
    """The proxy ``httpx.Client`` would use for ``url`` (``trust_env``): HTTP(S)_PROXY, ALL_PROXY,
    NO_PROXY."""
    if not isinstance(url, httpx.URL):
        return None
    proxies = urllib.request.getproxies_environment()
    # proxy_bypass_environment is in urllib.request on every Python, but not in typeshed (undocumented).
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if not proxies or bypass(url.host, proxies):
        return None
    return proxies.get(url.scheme) or proxies.get("all")


class _Waiter:
    """A thread waiting for a pooled connection; ``grant`` is set by the releasing thread."""

    __slots__ = ("event", "grant")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.grant: Any = None


_ssl_context: Any = None
_plain_context: ssl.SSLContext | None = None
_ssl_context_lock = threading.Lock()


def _shared_ssl_context() -> Any:
    """One default-verifying SSL context per process: building one loads the CA bundle (~100 ms)."""
    global _ssl_context
    with _ssl_context_lock:
        if _ssl_context is None:
            _ssl_context = httpx.create_ssl_context()
        return _ssl_context


def _plain_http_context() -> ssl.SSLContext:
    """The context every plain-http transport of the process shares: one, built on first use, verifying
    with no CA loaded. httpcore needs a context even for an http:// origin, where none is ever used;
    with ``verify=False`` httpx built one per transport (~0.12 ms each: a width-16 first run builds 16
    as its calls open their connections, under one interpreter lock, right after the first answer). Had
    TLS ever been attempted with it, verifying against no CA would refuse every certificate (fail
    closed), where ``verify=False`` would have accepted any."""
    global _plain_context
    with _ssl_context_lock:
        if _plain_context is None:
            _plain_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        return _plain_context


def _ssl_for(url: httpx.URL | str, proxy: str | None) -> Any:
    """The verifying context for a TLS endpoint; for plain http:// (the simulated provider, a local
    model server) with no https:// proxy, no TLS ever happens on the transport, so the CA bundle is
    not loaded (start-up time of an in-process run: ~20 ms idle, 0.2 s on a loaded machine) and one
    context with no CA serves every such transport (:func:`_plain_http_context`)."""
    if str(url).startswith("http://") and not (proxy or "").startswith("https://"):
        return _plain_http_context()
    return _shared_ssl_context()


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
               headers: Mapping[str, str] | None = None, *, wire: str = "openai",
               api_version: str | None = None, stream: bool = False) -> ChatClient:
    """The process-wide ``ChatClient`` for this endpoint, created on first use.

    The key is read from the environment variable ``api_key_env`` on every call, so a rotated
    key reaches the shared client; it is kept only in the Authorization header.
    After a fork the child starts a fresh pool instead of sharing the parent's sockets.
    """
    global _clients_pid
    api_key = None
    if api_key_env:
        api_key = secret(api_key_env)
        # A credential in ``headers:`` (Azure's api-key, a gateway's own header) stands in for the key.
        if not api_key and not any(is_credential_header(name) for name in headers or {}):
            raise PermanentError(f"environment variable {api_key_env} is not set; export it with the API key "
                                 f"for {base_url}")
    cache_key = (base_url.rstrip("/"), api_key_env, float(timeout), tuple(sorted((headers or {}).items())),
                 wire, api_version, bool(stream))
    with _clients_lock:
        if os.getpid() != _clients_pid:
            _clients.clear()  # the parent's connections are not ours to use or close
            _clients_pid = os.getpid()
        client = _clients.get(cache_key)
        if client is None or client.closed:
            client = ChatClient(base_url, api_key=api_key, timeout=timeout, headers=headers, wire=wire,
                                api_version=api_version, stream=stream)
            _clients[cache_key] = client
        elif api_key and client._api_key != api_key:
            client.set_api_key(api_key)
    return client


def close_clients() -> None:
    """Close every cached client (worker shutdown, tests)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


__all__ = [
    "ChatClient",
    "Completion",
    "PROVIDER_MESSAGE_CAP",
    "RequestedToolCall",
    "close_clients",
    "get_client",
]
