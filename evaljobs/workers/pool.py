"""Elastic worker pools: Dramatiq workers that grow with the backlog and retire when idle.

Dramatiq's worker has a fixed width chosen at start. A team that runs a big
catalog a few times a day wants neither 32 idle threads all day nor 2 threads
when a run lands, so a :class:`Pool` keeps ``clamp(backlog, min, max)``
*members*, where the backlog is the ready and delayed messages of its queues
(in Redis, or the StubBroker's in-process queues) plus its own members'
in-flight work. It grows at once when work arrives and retires a member only
after it has been idle for ``idle_seconds``, never below ``min``.

Choices, and why:

* **A member is a whole** :class:`dramatiq.Worker` **with one thread and
  ``queue_prefetch = 1``**, so it holds at most the message it is running:
  it never sits on work another member (or another machine) could run, and a
  pool cannot deadlock on its own prefetch. Members share the process's broker
  and therefore evaljobs' whole middleware stack.
* **Threads in one process, not processes.** The work is IO-bound (provider
  calls), so the GIL costs nothing, and an idle member costs three threads
  (worker, queue consumer, delay-queue consumer) — tens of kilobytes — where a
  process costs tens of megabytes and a second or so to boot (interpreter,
  imports, connections). ``scripts/bench_pool`` measures both.
* **Retiring is graceful and never blocks the controller.** ``Worker.stop()``
  lets the running message finish and hands prefetched and delayed messages
  back to the queue (Redis: Dramatiq's ``requeue``; the StubBroker, whose
  consumer cannot requeue, gets them put back by :func:`_stub_requeue`). It
  runs on its own short-lived thread, and no lock a member needs is held while
  waiting for it. A leaving member counts toward ``max`` until it has exited: one
  chosen as idle may have taken a message just then, and finishes it.
* **Visible state.** Every second the pool writes a JSON record to the Redis
  hash ``evaljobs:pools`` (field ``host:pid``), timed by the Redis server
  clock; :func:`~evaljobs.workers.records.read_pools` returns the live ones and removes records older
  than 30 s (a pool that was killed cannot remove its own).

Note: Dramatiq's ``worker_shutdown`` hooks are broker-wide, so retiring a member
also fires ``ShutdownNotifications`` for actors that opted into
``notify_shutdown`` on sibling members; evaljobs' actors do not opt in, and the
pool warns at start when some actor does.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterable, Sequence

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import dq_name
from dramatiq.middleware import ShutdownNotifications

from evaljobs import clock as clocks
from evaljobs.pipeline import context
from evaljobs.workers.records import STATE_KEY, STATE_MAX_AGE, _server_time, read_pools

logger = logging.getLogger(__name__)

LANES = ("interactive", "bulk")
#: How often a pool rewrites its record while it changes, and while it does not (readers drop a record
#: older than STATE_MAX_AGE).
PUBLISH_EVERY = 1.0
PUBLISH_IDLE = 10.0
#: Seconds between two looks at the backlog while the pool is at rest (no backlog, no member busy, at
#: ``min``): a member that starts a message wakes the controller at once. Why: looking every ``poll``
#: (50 ms) cost Redis 40 commands a second per idle pool.
IDLE_POLL = 2.0
#: Idle members wake this often (ms) to look for work; it also bounds how long retiring takes.
MEMBER_TIMEOUT_MS = 100

def validate(min: int, max: int, idle_seconds: float, lane: str) -> None:
    """Raise ``ValueError`` (one line, naming the value) unless the pool arguments make sense."""
    if isinstance(min, bool) or not isinstance(min, int) or min < 1:
        raise ValueError(f"--min must be an integer of at least 1, not {min!r}")
    if isinstance(max, bool) or not isinstance(max, int) or max < min:
        raise ValueError(f"--max must be an integer of at least --min ({min}), not {max!r}")
    if isinstance(idle_seconds, bool) or not isinstance(idle_seconds, (int, float)) or not idle_seconds >= 0:
        raise ValueError(f"--idle-seconds must be a number of at least 0, not {idle_seconds!r}")
    if lane not in LANES:
        raise ValueError(f"--lane must be 'interactive' or 'bulk', not {lane!r}")


def default_pool_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(eq=False)
class _Member:
    worker: dramatiq.Worker
    number: int
    last_active: float
    started: int = 0
    in_message: bool = False
    booted: threading.Event = field(default_factory=threading.Event)  # worker.start() has returned

    def wait_running(self, timeout: float) -> None:
        """Wait until the member's threads have entered their loops.

        Dramatiq's threads set ``running = True`` as the first line of ``run()``,
        so a ``stop()`` that lands before that line is overwritten and the thread
        runs forever (and ``Worker.stop`` waits for it): a member retired just
        after it was started must be let in first.
        """
        deadline = time.monotonic() + timeout
        self.booted.wait(timeout)
        threads = list(self.worker.workers) + list(self.worker.consumers.values())
        while time.monotonic() < deadline and not all(t.running or not t.is_alive() for t in threads):
            time.sleep(0.001)

    @property
    def busy(self) -> bool:
        """Running or holding a message (the work queue counts a message until it is acked)."""
        return self.worker.work_queue.unfinished_tasks > 0


@dataclass
class _Counters:
    started: int = 0
    running: int = 0
    peak_running: int = 0
    peak_members: int = 0
    grown: int = 0
    retired: int = 0
    backlog: int = 0


class _PoolMiddleware(dramatiq.Middleware):
    """Counts the messages the pool's members start and finish (idle time, busy, peak)."""

    def __init__(self, pool: "Pool") -> None:
        self.pool = pool

    def before_process_message(self, broker, message) -> None:
        self.pool._message_started()

    def after_process_message(self, broker, message, *, result=None, exception=None) -> None:
        self.pool._message_done()

    def after_skip_message(self, broker, message) -> None:
        self.pool._message_done()


class _QuietMemberBoot(logging.Filter):
    """Every member adds Dramatiq's worker middleware to the shared broker, which Dramatiq warns about."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("You're adding a middleware of the same type twice"):
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            return not (args and type(args[0]).__name__ == "_WorkerMiddleware")
        return True


def _stub_requeue(thread, messages: Iterable) -> None:
    """Hand messages a stopping member holds back to the StubBroker's queue (its consumer cannot).

    The message goes back onto the queue *before* the old delivery is acked, so
    the queue's unfinished count never touches zero and ``join`` cannot return early.
    """
    queue = thread.broker.queues[thread.queue_name]
    for message in messages:
        queue.put(message.encode())
        thread.consumer.ack(message)


class Pool:
    """An elastic set of one-thread Dramatiq workers on one broker (see the module docstring).

    Parameters:
      min, max: the fewest and most members; ``1 <= min <= max``.
      idle_seconds: how long a member must have been idle before it may retire.
      lane: the governor lane of the members' provider calls (``interactive`` or ``bulk``).
      broker: the broker (default: Dramatiq's global one, e.g. from ``evaljobs.pipeline.broker.configure``).
      queues: the queues whose backlog the pool serves.
      poll: seconds between controller checks of the backlog.
      clock: the monotonic clock idle time and the state record's rhythm are measured on (a test
        passes one it moves by hand).
    """

    def __init__(self, min: int, max: int, idle_seconds: float = 30.0, lane: str = "bulk", *,
                 broker: dramatiq.Broker | None = None, queues: Sequence[str] = ("agents",),
                 poll: float = 0.05, pool_id: str | None = None,
                 member_timeout_ms: int = MEMBER_TIMEOUT_MS,
                 clock: Callable[[], float] = clocks.monotonic) -> None:
        validate(min, max, idle_seconds, lane)
        if not queues:
            raise ValueError("a pool needs at least one queue")
        if not poll > 0:
            raise ValueError(f"poll must be a positive number of seconds, not {poll!r}")
        self.min = min
        self.max = max
        self.idle_seconds = float(idle_seconds)
        self.lane = lane
        self.broker = broker or dramatiq.get_broker()
        self.queues = tuple(dict.fromkeys(queues))
        self.poll = poll
        self.clock = clock
        self.id = pool_id or default_pool_id()
        self.member_timeout_ms = member_timeout_ms
        self._lock = threading.Lock()  # members list and counters; never held while a member stops
        self._mw_lock = threading.Lock()  # changes to broker.middleware (member start / retirement)
        self._members: list[_Member] = []
        self._retiring: list[_Member] = []
        self._retirements: list[threading.Thread] = []
        self._numbers = 0
        self._counters = _Counters()
        self._stopping = threading.Event()
        #: Set by a member starting a message and by stop(): the controller looks at once.
        self._wake = threading.Event()
        self._at_rest = False
        self._published: str | None = None
        self._controller: threading.Thread | None = None
        self._middleware = _PoolMiddleware(self)
        self._log_filter = _QuietMemberBoot()
        self._last_publish = 0.0
        self._backlog_failing = False
        self._publish_failing = False
        self.started_at: float | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "Pool":
        """Set the process's governor lane, start ``min`` members and the controller."""
        if self._controller is not None:
            raise RuntimeError("this pool is already started")
        context.current().set_default_lane(self.lane)
        for queue in self.queues:
            self.broker.declare_queue(queue)
        self._warn_shutdown_notifications()
        self.broker.logger.addFilter(self._log_filter)
        with self._mw_lock:
            self.broker.add_middleware(self._middleware)
        self.started_at = time.time()
        for _ in range(self.min):
            self._grow()
        self._publish(force=True)
        self._controller = threading.Thread(target=self._loop, name=f"evaljobs-pool-{self.id}", daemon=True)
        self._controller.start()
        return self

    def stop(self, timeout: float = 600.0) -> None:
        """Stop the controller, then every member gracefully (running messages finish, the rest go back)."""
        self._stopping.set()
        self._wake.set()
        if self._controller is not None and self._controller is not threading.current_thread():
            self._controller.join(timeout)
        with self._lock:
            members, self._members = self._members, []
            self._retiring.extend(members)
        stoppers = [threading.Thread(target=self._stop_member, args=(m, timeout), daemon=True)
                    for m in members]
        for thread in stoppers:
            thread.start()
        for thread in stoppers + list(self._retirements):
            thread.join(timeout)
        with self._mw_lock:
            self.broker.middleware = [m for m in self.broker.middleware if m is not self._middleware]
        self.broker.logger.removeFilter(self._log_filter)
        self._unpublish()

    def __enter__(self) -> "Pool":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what the pool looks like ----------------------------------------------------------------
    @property
    def size(self) -> int:
        """Active members (not counting those still finishing their retirement)."""
        with self._lock:
            return len(self._members)

    def state(self) -> dict[str, Any]:
        """The record ``evaljobs status`` shows: members, busy, min, max, lane, messages started…"""
        with self._lock:
            members = list(self._members)
            counters = self._counters
            return {
                "id": self.id,
                "members": len(members),
                "busy": sum(1 for m in members if m.busy),
                "retiring": len(self._retiring),
                "min": self.min,
                "max": self.max,
                "idle_seconds": self.idle_seconds,
                "lane": self.lane,
                "started": counters.started,
                "running": counters.running,
                "backlog": counters.backlog,
                "peak_members": counters.peak_members,
                "peak_running": counters.peak_running,
                "grown": counters.grown,
                "retired": counters.retired,
                "queues": list(self.queues),
                "since": self.started_at,
            }

    # -- the controller -----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            self._wake.wait(IDLE_POLL if self._at_rest else self.poll)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - the controller must outlive any one bad tick
                logger.exception("pool %s: controller tick failed", self.id)

    def _tick(self) -> None:
        try:
            backlog = self._backlog()
        except Exception as exc:  # noqa: BLE001 - e.g. Redis restarting: keep the members we have
            if not self._backlog_failing:
                logger.warning("pool %s: cannot read the backlog (%s); keeping %d members",
                               self.id, exc, self.size)
            self._backlog_failing = True
            backlog = None
        else:
            self._backlog_failing = False
        if backlog is not None:
            self._resize(backlog, self.clock())
        self._publish()

    def _resize(self, backlog: int, now: float) -> None:
        with self._lock:
            members = list(self._members)
            leaving = len(self._retiring)
            self._counters.backlog = backlog
        busy = sum(1 for m in members if m.busy)
        self._at_rest = backlog == 0 and busy == 0 and len(members) <= self.min and not leaving
        target = max(self.min, min(self.max, backlog + busy))
        # A leaving member counts until it has exited: it may still run the message it had taken (one
        # fetched after it was chosen as idle), so a new member in its place would make max + 1 at once.
        grow = min(target, self.max - leaving) - len(members)
        if grow > 0:
            for _ in range(grow):
                if self._stopping.is_set():
                    return
                self._grow()
            logger.info("pool %s: %d -> %d members (backlog %d, busy %d, leaving %d)", self.id, len(members),
                        len(members) + grow, backlog, busy, leaving)
        elif len(members) > target:
            idle = [m for m in members
                    if not m.busy and not m.in_message and now - m.last_active >= self.idle_seconds]
            idle.sort(key=lambda m: m.last_active)
            retiring = idle[: len(members) - target]
            for member in retiring:
                self._retire(member)
            if retiring:
                logger.info("pool %s: %d -> %d members (idle for %gs)", self.id, len(members),
                            len(members) - len(retiring), self.idle_seconds)

    def _backlog(self) -> int:
        """Ready + delayed messages of the pool's queues (not counting members' in-flight work)."""
        broker = self.broker
        if isinstance(broker, StubBroker):
            total = 0
            for queue in self.queues:
                total += broker.queues[queue].qsize()
                # Delayed messages are fetched at once and held until due: count them until acked.
                total += broker.queues[dq_name(queue)].unfinished_tasks
            return total
        ready = getattr(broker, "backlog", None)  # RabbitMQ's (evaljobs.pipeline.rabbitmq): queue counts
        if ready is not None:
            return int(ready(self.queues))
        client = getattr(broker, "client", None)
        if client is None:
            raise TypeError(f"pools need a Redis, RabbitMQ or Stub broker, not {type(broker).__name__}")
        namespace = getattr(broker, "namespace")  # a Redis broker's, found as duck-typed as its client
        pipe = client.pipeline(transaction=False)
        for queue in self.queues:
            pipe.llen(f"{namespace}:{queue}")  # ready message ids
            pipe.hlen(f"{namespace}:{dq_name(queue)}.msgs")  # delayed messages, fetched or not, until acked
        return sum(int(n) for n in pipe.execute())

    # -- members ----------------------------------------------------------------------------------
    def _grow(self) -> _Member:
        worker = dramatiq.Worker(self.broker, queues=set(self.queues), worker_threads=1,
                                 worker_timeout=self.member_timeout_ms)
        worker.queue_prefetch = 1  # hold only the message being run: never sit on work others could run
        with self._lock:
            self._numbers += 1
            member = _Member(worker=worker, number=self._numbers, last_active=self.clock())
            self._members.append(member)
            self._counters.grown += 1
            self._counters.peak_members = max(self._counters.peak_members, len(self._members))
        try:
            with self._mw_lock:
                worker.start()
        except BaseException:
            with self._lock:
                self._members.remove(member)
            raise
        if isinstance(self.broker, StubBroker):
            for thread in worker.consumers.values():
                # This consumer's own requeue (the class's stays): a patch mypy cannot type.
                thread.requeue_messages = partial(_stub_requeue, thread)  # type: ignore[method-assign]
        member.booted.set()
        return member

    def _retire(self, member: _Member) -> None:
        """Take ``member`` out and stop it gracefully on its own thread (never blocks the caller)."""
        with self._lock:
            if member not in self._members:
                return
            self._members.remove(member)
            self._retiring.append(member)
        thread = threading.Thread(target=self._stop_member, args=(member, 600.0), daemon=True,
                                  name=f"evaljobs-pool-retire-{member.number}")
        self._retirements = [t for t in self._retirements if t.is_alive()] + [thread]
        thread.start()

    def _stop_member(self, member: _Member, timeout: float) -> None:
        try:
            member.wait_running(min(timeout, 30.0))
            member.worker.stop(timeout=int(timeout * 1000))
        finally:
            with self._mw_lock:
                # A new list, not list.remove(): other threads may be iterating the old one right now.
                self.broker.middleware = [m for m in self.broker.middleware
                                          if getattr(m, "worker", None) is not member.worker]
            with self._lock:
                if member in self._retiring:
                    self._retiring.remove(member)
                self._counters.retired += 1

    def _member_for_thread(self) -> _Member | None:
        """The member whose worker thread is running (its work queue is the member's own)."""
        work_queue = getattr(threading.current_thread(), "work_queue", None)
        if work_queue is None:
            return None
        for member in self._members + self._retiring:
            if member.worker.work_queue is work_queue:
                return member
        return None

    def _message_started(self) -> None:
        with self._lock:
            member = self._member_for_thread()
            if member is None:
                return
            member.in_message = True
            member.started += 1
            member.last_active = self.clock()
            c = self._counters
            c.started += 1
            c.running += 1
            c.peak_running = max(c.peak_running, c.running)
        if self._at_rest:  # work arrived: the controller looks at the backlog now, not at its next idle look
            self._at_rest = False
            self._wake.set()

    def _message_done(self) -> None:
        with self._lock:
            member = self._member_for_thread()
            if member is None or not member.in_message:
                return
            member.in_message = False
            member.last_active = self.clock()
            self._counters.running -= 1

    def _warn_shutdown_notifications(self) -> None:
        for middleware in self.broker.middleware:
            if isinstance(middleware, ShutdownNotifications):
                opted = [name for name, actor in self.broker.actors.items()
                         if actor.options.get("notify_shutdown")]
                if middleware.notify_shutdown or opted:
                    logger.warning("pool %s: retiring a member sends Dramatiq's shutdown notification to "
                                   "every running notify_shutdown actor (%s) in this process",
                                   self.id, ", ".join(opted) or "all actors")

    # -- state in Redis -----------------------------------------------------------------------
    def _client(self):
        return getattr(self.broker, "client", None) if not isinstance(self.broker, StubBroker) else None

    def _publish(self, force: bool = False) -> None:
        client = self._client()
        if client is None:
            return
        now = self.clock()
        record = self.state()
        shown = json.dumps(record, sort_keys=True)
        every = PUBLISH_EVERY if shown != self._published else PUBLISH_IDLE  # unchanged: now and then
        if not force and now - self._last_publish < every:
            return
        self._last_publish = now
        try:
            record["updated_at"] = _server_time(client)
            pipe = client.pipeline(transaction=False)
            pipe.hset(STATE_KEY, self.id, json.dumps(record, sort_keys=True))
            pipe.expire(STATE_KEY, int(STATE_MAX_AGE * 2))
            pipe.execute()
            self._published = shown
            self._publish_failing = False
        except Exception as exc:  # noqa: BLE001 - visibility must never stop the work
            if not self._publish_failing:
                logger.warning("pool %s: cannot write its state to Redis: %s", self.id, exc)
            self._publish_failing = True

    def _unpublish(self) -> None:
        client = self._client()
        if client is None:
            return
        try:
            client.hdel(STATE_KEY, self.id)
        except Exception as exc:  # noqa: BLE001
            logger.warning("pool %s: cannot remove its state from Redis: %s", self.id, exc)


__all__ = ["Pool", "validate", "read_pools", "default_pool_id", "LANES", "STATE_KEY", "STATE_MAX_AGE"]
