"""Live streams with bounded memory: a byte-limited queue per client, a cap on streams, slow clients dropped.

Why (issue 29): a live stream's events are built from the database as fast as it can be read,
and a client that never reads still has them queued for it — in the stream's generator, in
Starlette's response and in the transport. 100 such clients on a 20,000-result run took the
viewer from 61 MB to about 1 GB, and the memory stayed after they left. So each stream here is:

* **a producer and a sender joined by a queue with a byte limit** (:attr:`StreamLimits.client_bytes`).
  The producer reads and encodes events; the sender hands them to the server, whose ``send``
  waits while the socket is full (uvicorn's flow control), so what one client holds is at most
  the queue's limit plus the transport's high-water mark. A producer that finds the queue full
  waits for room; if none comes within :attr:`StreamLimits.slow_seconds` the client is too slow
  to follow: its queue is emptied, it gets one final ``dropped`` event (reload to follow again),
  and the stream ends. The page reconnects by reloading: nothing is lost (the page renders from
  the database, the stream only tells what is new).
* **counted**: at most :attr:`StreamLimits.max_streams` at once; one more is ``503`` with
  ``Retry-After`` (one line), never queued.
* **released**: when the last stream ends (and again once the connections given up on are
  closed), memory the allocator kept is handed back to the system (glibc's ``malloc_trim``),
  so the viewer's size returns to about what it was.

:class:`StreamStats` is what ``/live/stats`` shows (streams open, dropped, bytes queued).
"""
from __future__ import annotations

import asyncio
import collections
import ctypes
import ctypes.util
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("evaljobs.view")


@dataclass(frozen=True)
class StreamLimits:
    #: Most live streams open at once (each is a browser tab on a live page).
    max_streams: int = 64
    #: Most bytes of events queued for one client that has not taken them yet.
    client_bytes: int = 256_000
    #: How long a full queue may stay full before its client is dropped.
    slow_seconds: float = 10.0
    #: How long a dropped client has to take its final event before its connection is closed.
    farewell_seconds: float = 10.0


@dataclass
class StreamStats:
    open: int = 0
    opened: int = 0
    dropped: int = 0
    refused: int = 0
    queued_bytes: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def _trim() -> None:
    """Give the allocator's free memory back to the system (glibc only; elsewhere nothing)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    except OSError:  # pragma: no cover - no C library to ask
        pass


class StreamRegistry:
    """The registry of live streams: admits, counts and bounds them."""

    def __init__(self, limits: StreamLimits | None = None) -> None:
        self.limits = limits or StreamLimits()
        self.stats = StreamStats()

    def response(self, events: AsyncIterator[str], farewell: str):
        """An ASGI app streaming ``events`` (SSE text) within the limits, or a 503 when full."""
        if self.stats.open >= self.limits.max_streams:
            self.stats.refused += 1
            return _Refused(self.limits.max_streams)
        self.stats.open += 1
        self.stats.opened += 1
        return _BoundedStream(self, events, farewell)

    def _closed(self) -> None:
        self.stats.open -= 1
        if self.stats.open == 0:
            _trim()
            # Again once the connections given up on are gone: uvicorn closes a dropped client's
            # socket (and frees what it still held for it) only after its farewell time.
            loop = asyncio.get_running_loop()
            loop.call_later(1.0, _trim)
            loop.call_later(self.limits.farewell_seconds + 1.0, _trim)


class _Refused:
    def __init__(self, limit: int) -> None:
        self.body = (f"evaljobs view: {limit} live streams are open, the most it serves at once; "
                     f"close a live tab or try again shortly\n").encode()

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"retry-after", b"5"),
                                (b"content-length", str(len(self.body)).encode())]})
        await send({"type": "http.response.body", "body": self.body})


_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no")]


class _BoundedStream:
    def __init__(self, streams: StreamRegistry, events: AsyncIterator[str], farewell: str) -> None:
        self.streams, self.events, self.farewell = streams, events, farewell
        self.queue: collections.deque[bytes] = collections.deque()
        self.queued = 0
        # Each side clears only its own event, then checks the queue again before waiting: no wake-up is lost.
        self.room = asyncio.Event()  # the sender took an event (set by the sender, cleared by the producer)
        self.ready = asyncio.Event()  # an event was queued or the producer ended (the other way round)
        self.produced = False
        self.dropped = False

    def _take(self) -> bytes:
        data = self.queue.popleft()
        self._account(-len(data))
        return data

    def _account(self, delta: int) -> None:
        self.queued += delta
        self.streams.stats.queued_bytes += delta

    async def __call__(self, scope, receive, send) -> None:
        tasks: list[asyncio.Task] = []
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            producer = asyncio.ensure_future(self._produce())
            tasks = [
                producer,
                asyncio.ensure_future(self._deliver(send)),
                asyncio.ensure_future(_disconnected(receive)),
            ]
            # until delivered or disconnected, or dropped and its farewell time is over
            while not any(task.done() for task in tasks[1:]) and not (producer.done() and self.dropped):
                await asyncio.wait([t for t in tasks if not t.done()], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._account(-self.queued)
            self.queue.clear()
            self.streams._closed()

    async def _produce(self) -> None:
        limits = self.streams.limits
        try:
            async for text in self.events:
                data = text.encode("utf-8")
                while self.queue and self.queued + len(data) > limits.client_bytes:
                    self.room.clear()
                    if not (self.queue and self.queued + len(data) > limits.client_bytes):
                        break
                    try:
                        await asyncio.wait_for(self.room.wait(), limits.slow_seconds)
                    except asyncio.TimeoutError:
                        self._drop()
                        break
                if self.dropped:
                    break
                self.queue.append(data)
                self._account(len(data))
                self.ready.set()
        except Exception:  # a failed read ends this stream (the page still renders from the database)
            logger.exception("live stream failed")
        finally:
            self.produced = True
            self.ready.set()
            await self.events.aclose()  # type: ignore[attr-defined]  # closes its Redis subscription now
        if self.dropped:  # the farewell's time: then the stream ends whether or not it was taken
            await asyncio.sleep(limits.farewell_seconds)

    def _drop(self) -> None:
        """Too slow to follow: forget what it has not taken, leave it one final event."""
        self.dropped = True
        self.streams.stats.dropped += 1
        self._account(-self.queued)
        self.queue.clear()
        self.queue.append(self.farewell.encode("utf-8"))
        self._account(len(self.queue[0]))
        logger.warning("live stream dropped: its client took nothing for %g s with %d bytes queued",
                       self.streams.limits.slow_seconds, self.streams.limits.client_bytes)

    async def _deliver(self, send) -> None:
        while True:
            while self.queue:
                data = self._take()
                self.room.set()
                if self.dropped:  # the farewell: its client gets a while to take it, then the line closes
                    try:
                        await asyncio.wait_for(send({"type": "http.response.body", "body": data,
                                                     "more_body": False}),
                                               self.streams.limits.farewell_seconds)
                    except asyncio.TimeoutError:
                        pass
                    return
                await send({"type": "http.response.body", "body": data, "more_body": True})
            if self.produced and not self.queue:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            self.ready.clear()
            if not self.queue and not self.produced:
                await self.ready.wait()


async def _disconnected(receive) -> None:
    while True:
        message: Any = await receive()
        if message.get("type") == "http.disconnect":
            return
