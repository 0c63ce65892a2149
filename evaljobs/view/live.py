"""Server-Sent Events for live pages: a running run, the runs list, the fleet.

Events are never a source of truth. A run's stream reads the run's state and its
new rows from the database (by row id, on the per-run index) and sends those;
what wakes it is a message on the run's Redis channel (``evaljobs:run:<id>``,
published after commit) or, on the memory broker or with no broker, a timer
(``poll_seconds``). On (re)connect the stream starts from the row id the page
was rendered with (or the ``Last-Event-ID`` the browser sends back), so nothing
falls between the page and the stream, and the page skips rows it has seen.

Wake-ups are coalesced for a tenth of a second, so 500 results a second become
about ten reads and ten messages a second, however many workers publish.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from evaljobs import store, workers
from evaljobs.pipeline import events
from evaljobs.store import pages as store_pages
from evaljobs.view.config import ViewConfig
from evaljobs.view.queries import first_line
from evaljobs.view.streams import StreamRegistry


if TYPE_CHECKING:  # redis is imported only with a Redis broker (start-up of a broker-less viewer)
    import redis.asyncio as aioredis
    from redis.asyncio.client import PubSub

logger = logging.getLogger("evaljobs.view")
#: Coalesce wake-ups for this long before reading, so a burst of events costs one read.
BATCH_SECONDS = 0.1
#: With Redis events, still re-read this often (an event lost while reconnecting is then only late).
SAFETY_SECONDS = 5.0
#: A comment line this often keeps proxies and the browser from closing an idle stream.
KEEPALIVE_SECONDS = 15.0
#: PostgreSQL assigns row ids at insert and commits in any order: look back this many ids each read.
PG_LOOKBACK = 256
FLEET_SECONDS = 1.0
#: Most database reads the live streams make at once. Each read runs on a pool thread that keeps its
#: own SQLite connection and page cache for the server's life (see ``held``): a hundred streams
#: reading at once grew the pool, and the viewer kept a page cache per thread after they left.
READS_AT_ONCE = 4
#: Most rows one update carries: a backlog goes out in pieces, each taken before the next is read.
ROWS_PER_EVENT = 200
#: The last event a client too slow to follow gets (evaljobs.view.streams drops it).
FAREWELL = ("event: dropped\ndata: {\"reason\":\"this page took too long to read its updates; "
            "reload it to follow the run again\"}\n\n")


def sse(event: str, data: Any, ident: int | None = None) -> str:
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {event}\ndata: {text}\n\n"


def cell_json(c: store_pages.Cell) -> dict[str, Any]:
    return {"id": c.id, "key": c.scenario_key, "model": c.model, "status": c.status, "fault": c.fault,
            "line": first_line(c.preview) or (first_line(c.error) if c.error else ""), "ms": c.duration_ms,
            "epoch": c.epoch, "cost": c.cost}


class Hints:
    """What wakes a stream: the run's Redis channel when there is one, else only the timer."""

    def __init__(self, redis_url: str | None, channel: str | None):
        self._url, self._channel = redis_url, channel
        self._client: aioredis.Redis | None = None
        self._pubsub: PubSub | None = None

    async def open(self) -> Hints:
        if self._url and self._channel:
            try:
                # only with a Redis broker (start-up of a broker-less viewer)
                import redis.asyncio as aioredis

                self._client = aioredis.Redis.from_url(self._url, socket_connect_timeout=5)
                self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)
                await self._pubsub.subscribe(self._channel)
            except Exception as exc:  # noqa: BLE001 - events are hints: fall back to the timer
                logger.warning("live events unavailable (%s); reading every second instead", exc)
                await self.close()
        return self

    @property
    def subscribed(self) -> bool:
        return self._pubsub is not None

    async def wait(self, timeout: float) -> bool:
        """True when an event arrived (then drained for ``BATCH_SECONDS``), False on the timer."""
        if self._pubsub is None:
            await asyncio.sleep(timeout)
            return False
        try:
            message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout)
            if message is None:
                return False
            await asyncio.sleep(BATCH_SECONDS)
            while await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0):
                pass
            return True
        except Exception as exc:  # noqa: BLE001
            logger.warning("lost the event stream (%s); reading every second instead", exc)
            await self.close()
            return False

    async def close(self) -> None:
        pubsub, client, self._pubsub, self._client = self._pubsub, self._client, None, None
        try:
            if pubsub is not None:
                await pubsub.aclose()
            if client is not None:
                await client.aclose()
        except Exception:  # noqa: BLE001
            pass


def held(fn, *args):
    """Call ``fn`` in a pool thread that keeps its SQLite connection (see ``store.hold_connection``).

    The pool's threads live as long as the server; opening a SQLite connection per read ran its
    pragmas each time, and closing the last one checkpointed the WAL.
    """
    store.hold_connection()
    return fn(*args)


def _piece(run_id: str, after: int) -> list[store_pages.Cell]:
    return store_pages.cells_after(run_id, after, limit=ROWS_PER_EVENT)


def fleet_status(config: ViewConfig):
    return workers.status.collect(config.broker or None)  # the fleet page only: it loads the Redis client


class Streams:
    def __init__(self, config: ViewConfig, templates):
        self.config = config
        self.templates = templates
        self.registry = StreamRegistry(config.stream_limits)
        self._reads: asyncio.Semaphore | None = None

    async def _read(self, fn, *args):
        """``fn(*args)`` on a pool thread, at most ``READS_AT_ONCE`` at a time."""
        if self._reads is None:  # made on the server's event loop, at the first read
            self._reads = asyncio.Semaphore(READS_AT_ONCE)
        async with self._reads:
            return await run_in_threadpool(held, fn, *args)

    def _response(self, body: AsyncIterator[str]):
        return self.registry.response(body, FAREWELL)

    async def stats(self, request: Request) -> JSONResponse:
        """Live streams open, opened, dropped (too slow), refused (too many) and bytes queued now."""
        return JSONResponse(self.registry.stats.to_dict())

    async def run(self, request: Request):
        run_id = request.path_params["run_id"]
        start = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        try:
            after = max(0, int(start))
        except ValueError:
            after = 0
        return self._response(self._run_events(run_id, after))

    async def _run_events(self, run_id: str, after: int) -> AsyncIterator[str]:
        hints = await Hints(self.config.redis_url, events.channel(run_id)).open()  # before the first read
        lookback = 0 if store.is_sqlite() else PG_LOOKBACK
        try:
            last_sent, quiet = None, 0.0
            seen: set[int] = set()
            while True:
                try:
                    state = await self._read(store_pages.state, run_id)
                    rows = await self._read(_piece, run_id, max(0, after - lookback))
                except store.UnknownRun as exc:
                    yield sse("gone", {"error": str(exc)})
                    return
                more = len(rows) == ROWS_PER_EVENT  # a backlog: the next piece at once, not after a wait
                rows = [r for r in rows if r.id not in seen and (lookback or r.id > after)]
                if rows:
                    after = max(after, max(r.id for r in rows))
                    if lookback:
                        seen = {i for i in seen if i > after - lookback} | {r.id for r in rows}
                payload = state.to_dict()
                if rows or payload != last_sent:
                    payload["cursor"] = after
                    yield sse("update", {"state": payload, "rows": [cell_json(r) for r in rows]}, ident=after)
                    last_sent, quiet = state.to_dict(), 0.0
                if more and rows:
                    continue
                if state.finished:
                    yield sse("done", {"status": state.status})
                    return
                timeout = SAFETY_SECONDS if hints.subscribed else self.config.poll_seconds
                woke = await hints.wait(timeout)
                if not woke:
                    quiet += timeout
                    if quiet >= KEEPALIVE_SECONDS:
                        quiet = 0.0
                        yield ": keepalive\n\n"
        finally:
            await hints.close()

    async def runs(self, request: Request):
        ids = [i for i in request.query_params.getlist("id") if i][:50]
        return self._response(self._runs_events(ids))

    async def _runs_events(self, ids: list[str]) -> AsyncIterator[str]:
        last: dict[str, Any] = {}
        while ids:
            states = {}
            for run_id in ids:
                try:
                    states[run_id] = (await self._read(store_pages.state, run_id)).to_dict()
                except store.UnknownRun:
                    continue
            changed = {k: v for k, v in states.items() if last.get(k) != v}
            if changed:
                yield sse("runs", changed)
                last.update(changed)
            ids = [i for i in ids if i in states and not states[i]["finished"]]
            await asyncio.sleep(self.config.poll_seconds)
        yield sse("done", {})

    async def fleet(self, request: Request):
        return self._response(self._fleet_events())

    async def _fleet_events(self) -> AsyncIterator[str]:
        template = self.templates.env.get_template("_fleet.html")
        last = None
        while True:
            status = await run_in_threadpool(held, fleet_status, self.config)
            html = template.render(status=status)
            if html != last:
                yield sse("fleet", {"html": html})
                last = html
            await asyncio.sleep(FLEET_SECONDS)
