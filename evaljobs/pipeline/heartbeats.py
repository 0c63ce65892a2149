"""Heartbeats of the Redis broker's processes, and the hand-back of a dead one's messages, without ``KEYS``.

Dramatiq's Redis broker refreshes a process's heartbeat (``<namespace>:__heartbeats__``) on every
command of its ``dispatch`` script, and finds dead processes in the same script, on a random
``maintenance_chance`` per million commands, with ``KEYS <namespace>:__acks__.<id>*``. That worked
only because an idle consumer polled Redis every few milliseconds (about 120 commands a second for
an idle worker process); evaljobs raised the chance to 2% so a SIGKILLed worker's pairs came back
within seconds, and so ran ``KEYS`` about twice a second per worker (invariant 9: never a keyspace
scan).

Here, instead, with consumers that block on Redis while their queue is empty
(:class:`evaljobs.pipeline.dramatiq_internals.WakeableConsumer`):

* every process beats at most once a :func:`period` (a fifth of the heartbeat timeout: 2 s by
  default), from its consumers' loops (which come round at least once a second however busy the
  worker threads are) and from its enqueues (a process that only sends);
* a beat is one Lua call (:data:`BEAT`): it records the beat in Dramatiq's heartbeats and in
  evaljobs' own (``<namespace>:__evaljobs_heartbeats__``), with the queues the process consumes
  (``<namespace>:__evaljobs_queues__``), and hands back the unacked messages of every evaljobs
  process whose last beat is older than the heartbeat timeout — the ack sets of the queues that
  process said it consumes, named, never searched for — then forgets it;
* once a minute a beat also drops this process's queues' dead letters older than Dramatiq's
  ``dead_message_ttl`` (the other half of Dramatiq's maintenance).

So a killed worker's messages are back in their queue at most ``heartbeat timeout + period`` after
its last beat (12 s with the defaults), handed to a live worker at once (its blocked read returns),
and Dramatiq's own maintenance is off (``EVALJOBS_MAINTENANCE_CHANCE=0``). Only processes that beat
here are reaped: another Dramatiq application's workers on the same Redis namespace are left to its
own maintenance.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable

from dramatiq.common import current_millis

from evaljobs_middleware.commands import is_noscript, thread_commands

logger = logging.getLogger(__name__)

#: How often a beat also expires dead letters (seconds).
EXPIRE_EVERY = 60.0

BEAT = """
local ns = KEYS[1]
local now = tonumber(ARGV[1])
local me = ARGV[2]
local timeout = tonumber(ARGV[3])
local queues = ARGV[4]
local expire_before = tonumber(ARGV[5])
local theirs = ns .. ":__heartbeats__"
local ours = ns .. ":__evaljobs_heartbeats__"
local registry = ns .. ":__evaljobs_queues__"
redis.call("zadd", theirs, now, me)
redis.call("zadd", ours, now, me)
redis.call("hset", registry, me, queues)
local requeued = 0
local dead = redis.call("zrangebyscore", ours, 0, now - timeout, "LIMIT", 0, 100)
for _, worker in ipairs(dead) do
  local names = redis.call("hget", registry, worker) or ""
  for queue in string.gmatch(names, "[^,]+") do
    local acks = ns .. ":__acks__." .. worker .. "." .. queue
    local list = ns .. ":" .. queue
    local ids = redis.call("smembers", acks)
    for _, id in ipairs(ids) do
      if redis.call("hexists", list .. ".msgs", id) > 0 then
        redis.call("rpush", list, id)
        requeued = requeued + 1
      end
    end
    redis.call("del", acks)
  end
  redis.call("hdel", registry, worker)
  redis.call("zrem", ours, worker)
  redis.call("zrem", theirs, worker)
end
if expire_before > 0 then
  for queue in string.gmatch(queues, "[^,]+") do
    if string.sub(queue, -3) ~= ".DQ" then
      local xq = ns .. ":" .. queue .. ".XQ"
      local old = redis.call("zrangebyscore", xq, 0, expire_before, "LIMIT", 0, 1000)
      if next(old) then
        redis.call("zrem", xq, unpack(old))
        redis.call("hdel", xq .. ".msgs", unpack(old))
      end
    end
  end
end
return {requeued, #dead}
"""


def period(heartbeat_timeout_ms: int) -> float:
    """Seconds between two beats of a process: a fifth of the timeout (five beats' margin)."""
    return max(0.01, heartbeat_timeout_ms / 5000)


class Heart:
    """One process's beats on one broker (throttled: :meth:`beat` sends nothing until one is due)."""

    def __init__(self, broker: Any, queues: Callable[[], Iterable[str]]) -> None:
        self.broker = broker
        self.queues = queues
        self.period = period(broker.heartbeat_timeout)
        self.script = broker.client.register_script(BEAT)
        self._due = 0.0
        self._expire_due = 0.0
        self._lock = threading.Lock()

    def beat(self, *, force: bool = False) -> tuple[int, int] | None:
        """Beat now if one is due (or ``force``): returns (messages handed back, dead processes
        forgotten), or None when no beat was due. Redis errors are raised (the caller's loop handles
        them as its other commands' errors)."""
        now = time.monotonic()
        with self._lock:
            if not force and now < self._due:
                return None
            self._due = now + self.period
            expire = now >= self._expire_due
            if expire:
                self._expire_due = now + EXPIRE_EVERY
        broker = self.broker
        millis = current_millis()
        args = (millis, broker.broker_id, broker.heartbeat_timeout, ",".join(sorted(self.queues())),
                millis - broker.dead_message_ttl if expire else 0)
        try:
            reply = thread_commands(broker.client).execute(("EVALSHA", self.script.sha, 1, broker.namespace,
                                                            *args))[0]
            if is_noscript(reply):  # a restarted or flushed Redis: the script object loads it
                reply = self.script(keys=[broker.namespace], args=list(args))
            if isinstance(reply, Exception):
                raise reply
        except BaseException:
            with self._lock:
                self._due = now  # not beaten: the next caller tries again
            raise
        requeued, dead = (int(n) for n in reply)
        if dead:
            logger.warning("handed back %d unacked message(s) of %d worker process(es) silent for more than "
                           "%d ms", requeued, dead, broker.heartbeat_timeout)
        return requeued, dead


__all__ = ["BEAT", "EXPIRE_EVERY", "Heart", "period"]
