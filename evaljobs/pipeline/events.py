"""Run events: one per recorded result and one when the report is committed.

Published only *after* the commit they describe, so a waiter that sees
``complete`` always finds the report. Redis pub/sub (channel
``evaljobs:run:<id>``) when a Redis URL is bound, plus an in-process fan-out
for the memory broker and for waiters in the same process. Events are hints
that wake waiters; the database stays the source of truth (waiters fall back
to a slow poll, which also covers events missed while disconnected).
"""
from __future__ import annotations

import json
import logging
import queue
import threading
from typing import Any, Iterator, Protocol

logger = logging.getLogger("evaljobs.events")
#: ``json.dumps(event, separators=(",", ":"))`` without an encoder built per call (every result event).
_compact = json.JSONEncoder(separators=(",", ":")).encode

_lock = threading.Lock()
_local: dict[str, list[queue.SimpleQueue]] = {}
_listeners: list = []
_redis_url: str | None = None
_redis_client = None


def add_listener(fn) -> None:
    """Call ``fn(event)`` synchronously for every event published by this process. What ``fn`` raises is
    logged, except a :class:`BrokenPipeError` (its output was closed), which stops the publisher."""
    with _lock:
        _listeners.append(fn)


def remove_listener(fn) -> None:
    with _lock:
        if fn in _listeners:
            _listeners.remove(fn)


def channel(run_id: str) -> str:
    return f"evaljobs:run:{run_id}"


def bind_redis(url: str | None) -> None:
    """Publish to (and subscribe through) this Redis; ``None`` keeps events in-process."""
    global _redis_url, _redis_client
    with _lock:
        _redis_url = url
        _redis_client = None


def redis_url() -> str | None:
    """The Redis events are bound to (the broker's), if any."""
    return _redis_url


def _client():
    global _redis_client
    if _redis_url is None:
        return None
    with _lock:
        if _redis_client is None:
            import redis  # start-up time: the memory broker's in-process events never load the client

            _redis_client = redis.Redis.from_url(_redis_url, socket_timeout=5, socket_connect_timeout=5)
        return _redis_client


class Carry(Protocol):
    """Other commands for the publish's round trip (the governor's deferred releases)."""

    def queue(self, pipe: Any) -> int: ...

    def replies(self, replies: list[Any]) -> None: ...


# -- result events sent with the message's ack ------------------------------------------------------
#
# Why: at zero provider latency a pair's result publish is a Redis round trip of its own, right
# before the ack of its message, another one to the same Redis. While a worker thread processes a
# message whose ack can carry commands (:class:`evaljobs.pipeline.dramatiq_internals.WakeableConsumer`,
# when the events' Redis is the broker's), its result events are held here and the ack sends them in
# its pipeline: one round trip instead of two. Still after the commit they describe (invariant 6), a
# few hundred microseconds later. In-process listeners and subscriptions get them at once, as before.

_held = threading.local()


def hold_results() -> None:
    """Hold this thread's ``result`` events for the ack of the message it processes (see above)."""
    flush_held()  # left over from a message that was never acked here (defensive: never lose them)
    _held.events = []


def take_held() -> list[tuple[str, str]]:
    """The held events as (channel, payload), and stop holding: the ack's pipeline sends them."""
    events = getattr(_held, "events", None)
    _held.events = None
    return events or []


def restore_held(held: list[tuple[str, str]]) -> None:
    """Hold ``held`` again (an ack that could not reach Redis is retried, and they go with it)."""
    _held.events = list(held) + (getattr(_held, "events", None) or [])


def flush_held() -> None:
    """Send the held events now (a run's last result goes out before its ``finalize_run`` is sent)."""
    held = take_held()
    client = _client() if held else None
    if client is None:
        return
    try:
        with client.pipeline(transaction=False) as pipe:
            for name, payload in held:
                pipe.publish(name, payload)
            pipe.execute()
    except Exception as exc:  # noqa: BLE001 - events are hints; never fail the evaluation for them
        logger.warning("could not publish %d held event(s): %s", len(held), exc)


def publish(run_id: str, event: dict[str, Any]) -> None:
    publish_many(run_id, [event])


def publish_many(run_id: str, batch: list[dict[str, Any]], carry: Carry | None = None, *,
                 holdable: bool = False) -> None:
    """Publish ``batch`` in order: in-process at once, on Redis in one round trip (a pipeline).

    ``carry``: commands sent in the same round trip, after the events (their replies go back to it,
    errors included: a failed publish hands it the error, once per command). ``holdable``: the Redis
    side may wait for the message's ack when this thread holds events (:func:`hold_results`; never
    with a ``carry``, whose releases must not wait).
    """
    batch = [{"run": run_id, **event} for event in batch]
    with _lock:
        targets = list(_local.get(run_id, ())) + list(_local.get("*", ()))
        listeners = list(_listeners)
    for event in batch:
        for target in targets:
            target.put(event)
        for listener in listeners:
            try:
                listener(event)
            except BrokenPipeError:
                # the listener's reader went away (`evaljobs run … | head`): not a display bug but a stop,
                # as Ctrl-C is; it reaches the in-process run that published it, which ends interrupted
                raise
            except Exception:  # noqa: BLE001 - a display bug must not fail the evaluation
                logger.exception("event listener failed")
    client = _client()
    if client is not None and batch:
        held = getattr(_held, "events", None) if holdable and carry is None else None
        if held is not None:
            held.extend((channel(run_id), _compact(event)) for event in batch)
            return
        carried, delivered = 0, False
        try:
            if len(batch) == 1 and carry is None:
                client.publish(channel(run_id), _compact(batch[0]))
            else:
                with client.pipeline(transaction=False) as pipe:
                    for event in batch:
                        pipe.publish(channel(run_id), _compact(event))
                    carried = carry.queue(pipe) if carry is not None else 0
                    replies = pipe.execute(raise_on_error=False)
                if carried:
                    delivered = True
                    carry.replies(replies[len(batch):])  # type: ignore[union-attr]
                errors = [reply for reply in replies[:len(batch)] if isinstance(reply, Exception)]
                if errors:
                    raise errors[0]
        except Exception as exc:  # noqa: BLE001 - events are hints; never fail the evaluation for them
            logger.warning("could not publish event for run %s: %s", run_id, exc)
            if carried and not delivered:
                carry.replies([exc] * carried)  # type: ignore[union-attr]


def publish_result(run_id: str, result, recorded, carry: Carry | None = None) -> None:
    publish_results(run_id, [(result, recorded)], carry)


def publish_results(run_id: str, recorded_results, carry: Carry | None = None) -> None:
    """One ``result`` event per (result, recorded) pair, in one Redis round trip (a group commit's rows)."""
    publish_many(
        run_id,
        [
            {
                "type": "result",
                "scenario": result.scenario_key,
                "model": result.model,
                "epoch": result.epoch,
                "status": result.status,
                "score": result.score,
                "fault": result.fault,
                "persisted": recorded.persisted,
                "expected": recorded.expected,
            }
            for result, recorded in recorded_results
        ],
        carry,
        holdable=True,
    )


def publish_complete(run_id: str, report: dict[str, Any]) -> None:
    summary = report.get("summary", {})
    publish(run_id, {"type": "complete", "passed": summary.get("passed"), "failed": summary.get("failed"),
                     "errored": summary.get("errored"), "pass_rate": summary.get("pass_rate")})


def publish_storage_failed(run_id: str, reason: str) -> None:
    """The database refused a write of this run (a full disk): waiters stop with ``reason`` (one redacted
    line)."""
    publish(run_id, {"type": "storage_failed", "reason": reason})


class Subscription:
    """Events of one run (``"*"``: every run). Iterate with :meth:`get` and a timeout.

    Subscribe *before* reading the state you want to follow, so no event can
    fall between the read and the subscription.
    """

    def __init__(self, run_id: str):
        self.run_id = run_id
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        with _lock:
            _local.setdefault(run_id, []).append(self._queue)
        self._pubsub = None
        client = _client()
        if client is not None:
            try:
                self._pubsub = client.pubsub(ignore_subscribe_messages=True)
                if run_id == "*":
                    self._pubsub.psubscribe(channel("*"))
                else:
                    self._pubsub.subscribe(channel(run_id))
            except Exception as exc:  # noqa: BLE001 - fall back to polling
                logger.warning("live events unavailable (%s); falling back to polling", exc)
                self._pubsub = None

    def get(self, timeout: float) -> dict[str, Any] | None:
        """The next event, or None after ``timeout`` seconds without one."""
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            pass
        if self._pubsub is not None:
            try:
                message = self._pubsub.get_message(timeout=timeout)
            except Exception as exc:  # noqa: BLE001
                logger.warning("lost the event stream (%s); polling instead", exc)
                self._pubsub = None
                message = None
            if message and message.get("type") in ("message", "pmessage"):
                try:
                    return json.loads(message["data"])
                except ValueError:
                    return None
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                return None
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def __iter__(self) -> Iterator[dict[str, Any]]:  # pragma: no cover - convenience
        while True:
            event = self.get(1.0)
            if event is not None:
                yield event

    def close(self) -> None:
        with _lock:
            queues = _local.get(self.run_id, [])
            if self._queue in queues:
                queues.remove(self._queue)
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except Exception:  # noqa: BLE001
                pass

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
