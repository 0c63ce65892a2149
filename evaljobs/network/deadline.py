"""A hard wall on every network exchange a thread makes: the per-pair deadline, enforced per socket call.

Why a wall in the network layer: httpx's timeouts are per operation (connect, one read, one
write), so a server that trickles its response headers one byte every 0.3 s never trips a 1 s
read timeout, and a pair "limited" to 3 s ran for minutes. Dramatiq's time limit is an
asynchronous exception, raised only when the blocked read returns, and it cannot stop the
in-process strategies at all.

So :func:`scope` (:mod:`evaljobs.network.walls`) sets an instant (``time.monotonic()``) for the
current thread — nested scopes keep the earliest — and :class:`DeadlineBackend`, the httpcore network
backend of every connection evaljobs opens (provider calls, the judge, live HTTP tools), gives each connect,
read and write only what is left of it, and raises httpcore's own timeout once nothing is. A
blocked read therefore returns by the deadline (plus one socket timeout's slack), whatever the
server does. Code that waits elsewhere (an MCP session on its event loop) asks
:func:`remaining` for its timeout.
"""
from __future__ import annotations

import time
from typing import Any, Iterable

import httpcore
from evaljobs.network.http_client import httpx  # without its CLI (start-up time)
from evaljobs.network.walls import current, remaining, scope  # noqa: F401 - the wall, re-exported


def _clip(timeout: float | None, error: type[Exception], what: str) -> float | None:
    deadline = current()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error(f"the deadline passed {what}")
    return left if timeout is None else min(timeout, left)


#: Bytes of a request's writes held back to go out as one send (a larger body is sent as it comes).
COALESCE_BYTES = 64 * 1024


class DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every read and write ends by the thread's deadline.

    A request's writes go out together: httpcore writes an HTTP/1.1 request as its head, then its body,
    then nothing (``b""``), and reads the answer only once all of it is written. The writes are held
    (up to :data:`COALESCE_BYTES`) and sent as one before the first read: one send a request, not two —
    on loopback each send also runs the receiver's TCP path, a measurable share of a zero-latency
    pair's CPU (issue 42, item 4) — and the body never waits behind the head for a delayed ACK. A held
    write is sent with the write's deadline and errors (``WriteTimeout``, ``WriteError``), as before.
    """

    def __init__(self, stream: httpcore.NetworkStream):
        self._stream = stream
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._held_timeout: float | None = None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held:
            try:
                self._flush()
            except httpcore.WriteError:
                pass  # as httpcore treats a request it could not write: read what the server answered
        return self._stream.read(max_bytes, _clip(timeout, httpcore.ReadTimeout, "while reading"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        _clip(timeout, httpcore.WriteTimeout, "while writing")  # a deadline already passed fails this write
        self._held.append(buffer)
        self._held_bytes += len(buffer)
        self._held_timeout = timeout
        if self._held_bytes >= COALESCE_BYTES:
            self._flush()

    def _flush(self) -> None:
        buffer = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        timeout = self._held_timeout
        self._held, self._held_bytes, self._held_timeout = [], 0, None
        self._stream.write(buffer, _clip(timeout, httpcore.WriteTimeout, "while writing"))

    def close(self) -> None:
        self._held, self._held_bytes = [], 0  # a request never read is never sent (half of one least of all)
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        if self._held:
            self._flush()
        timeout = _clip(timeout, httpcore.ConnectTimeout, "during the TLS handshake")
        return DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend, with :class:`DeadlineStream` streams and deadline-bounded connects."""

    def __init__(self, backend: httpcore.NetworkBackend | None = None):
        self._backend = backend or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _clip(timeout, httpcore.ConnectTimeout, "before connecting")
        return DeadlineStream(self._backend.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        timeout = _clip(timeout, httpcore.ConnectTimeout, "before connecting")
        return DeadlineStream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        left = remaining(seconds)
        self._backend.sleep(seconds if left is None else left)


def bounded(transport: httpx.HTTPTransport) -> httpx.HTTPTransport:
    """``transport`` with its connections made through a :class:`DeadlineBackend`.

    httpx does not take a network backend, so this sets the one attribute of its httpcore pool
    (``ConnectionPool``/``HTTPProxy``: ``_network_backend``, read when each connection opens);
    ``tests/network/test_deadlines.py`` pins it against the installed httpx and httpcore.
    """
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if pool is None or backend is None:
        raise RuntimeError("httpx.HTTPTransport no longer has the httpcore pool evaljobs bounds "
                           "(evaljobs.network.deadline): pin httpx/httpcore or update this module")
    if not isinstance(backend, DeadlineBackend):
        pool._network_backend = DeadlineBackend(backend)
    return transport


def bounded_client(**kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` whose every exchange ends by the thread's deadline (live HTTP tools use one)."""
    return httpx.Client(transport=bounded(httpx.HTTPTransport()), **kwargs)


__all__ = ["DeadlineBackend", "DeadlineStream", "bounded", "bounded_client", "current", "remaining", "scope"]
