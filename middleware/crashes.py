"""Crash counting: a message that kills its worker process is not redelivered forever.

A message whose processing crashes the worker *process* (a segfault in an
extension, the OOM killer, code calling ``os._exit``) is never acked, so Redis
hands it to the next worker once the dead one's heartbeat times out — and it
crashes that one too. Dramatiq's retry count cannot see this: the process died
before any middleware ran, so the message comes back unchanged. The count has
to live outside the process.

So every processing of a counted message is bracketed: a start is counted
before it, an end after it returns or raises (anything short of the process
dying). A start that never ended is a crashed worker. Once a message has
crashed ``max_crashes`` workers, the next delivery is handed to the
``give_up`` callback *instead of being processed* (the application records a
failure, dead-letters it, …) and skipped.

The counts live in the broker's Redis, one hash per ``key(message)`` group
(the field names the message within it), expiring ``ttl`` seconds after the
last change; :func:`forget` drops a group. A broker without a Redis
``client`` (the in-process ``StubBroker``) counts nothing: a crash there takes
the whole process with it.

A crash counts against every counted message the process had in flight, the
innocent ones next to the poison one too. So a message's last chance (one crash
short of the limit) is processed alone in its process: it waits for the
messages in flight to finish and holds new ones back until it is done. A poison
message's final crash then takes nobody with it, and a message that shared its
earlier crashes is one short of the limit — so it too gets its last chance
alone, and passes.

A worker killed from outside (deploys, fault injection) also counts against the
messages it had in flight; raise the limit where workers are killed that often.

Generic: imports nothing from the application; the application supplies
``key`` and ``give_up``.
"""
from __future__ import annotations

import hashlib
import logging
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Protocol

import dramatiq
from dramatiq.broker import MessageProxy
from dramatiq.middleware import SkipMessage

from .commands import is_noscript, thread_commands

logger = logging.getLogger(__name__)

DEFAULT_MAX_CRASHES = 3
#: Seconds a group's crash counts are kept after their last change.
DEFAULT_TTL = 7 * 24 * 3600

# Atomic, so two deliveries of one message never lose an increment.
_BEGIN = """
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return n - 1
"""
_END = """
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return n
"""

#: (hash key, field) naming one counted message; None: the message is not counted.
Key = Callable[[MessageProxy], tuple[str, str] | None]
#: Called with (broker, message, crashes) instead of processing a message that crashed too often.
GiveUp = Callable[[dramatiq.Broker, MessageProxy, int], None]


_BEGIN_SHA = hashlib.sha1(_BEGIN.encode()).hexdigest()


def begin_attempt(client: Any, key: str, field: str, ttl: int = DEFAULT_TTL) -> int:
    """Count one start; returns how many earlier starts never ended (crashed workers).

    Returns 0 when Redis does not answer: the count is a safety net, never a reason to fail.
    Sent on the thread's own connection (:mod:`evaljobs_middleware.commands`), as ``EVALSHA``
    (``EVAL`` once, when Redis does not know the script yet).
    """
    try:
        commands = thread_commands(client)
        reply = commands.execute(("EVALSHA", _BEGIN_SHA, 1, key, field, ttl))[0]
        if is_noscript(reply):
            reply = commands.execute(("EVAL", _BEGIN, 1, key, field, ttl))[0]
        if isinstance(reply, Exception):
            raise reply
        return int(reply)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        logger.warning("could not count the start of %s in %s: %s", field, key, exc)
        return 0


class Companion(Protocol):
    """Commands the application sends in the same round trip as a message's counted start.

    Why: at zero latency every Redis round trip of a message is a measurable share of its cost, and
    the application often has one to make right at the start (evaljobs: the pair's first governor
    permit). ``queue`` adds commands (``pipe.execute_command(*args)``) to the pipeline that carries
    the start and returns how many (none: the start goes out alone, as one plain command);
    ``replies`` gets their replies (exceptions included, never raised), unless the round trip failed;
    ``done`` is called on the processing thread once the message is over, skipped or set aside
    (always after ``queue``, possibly more than once): undo what an unused reply holds.
    """

    def queue(self, message: MessageProxy, pipe: Any) -> int: ...

    def replies(self, message: MessageProxy, replies: list[Any]) -> None: ...

    def done(self, message: MessageProxy) -> None: ...


class _Commands:
    """What a companion queues (``execute_command(*args)``; redis-py's parse options are not
    supported), collected and then sent after the start in its round trip, on the thread's own
    connection (:mod:`evaljobs_middleware.commands`): replies are Redis's, without redis-py's
    response callbacks."""

    def __init__(self) -> None:
        self.commands: list[tuple] = []

    def execute_command(self, *args: Any) -> "_Commands":
        self.commands.append(args)
        return self


def begin_attempt_with(client: Any, key: str, field: str, ttl: int, message: MessageProxy,
                       companion: Companion) -> int:
    """:func:`begin_attempt` with ``companion``'s commands in the same pipeline (one round trip)."""
    try:
        commands = _Commands()
        queued = companion.queue(message, commands)
        if not queued:
            return begin_attempt(client, key, field, ttl)
        replies = thread_commands(client).execute(("EVALSHA", _BEGIN_SHA, 1, key, field, ttl),
                                                  *commands.commands)
    except Exception as exc:  # noqa: BLE001 - see begin_attempt
        logger.warning("could not count the start of %s in %s: %s", field, key, exc)
        return 0
    if is_noscript(replies[0]):
        # Redis does not hold the script yet (once per server): EVAL loads it; the companion's went through
        try:
            replies[0] = thread_commands(client).execute(("EVAL", _BEGIN, 1, key, field, ttl))[0]
        except Exception as exc:  # noqa: BLE001 - see begin_attempt
            replies[0] = exc
    if queued:
        companion.replies(message, replies[1:1 + queued])
    if isinstance(replies[0], Exception):
        logger.warning("could not count the start of %s in %s: %s", field, key, replies[0])
        return 0
    return int(replies[0])


def end_attempt(client: Any, key: str, field: str) -> None:
    """The processing started by :func:`begin_attempt` is over (returned or raised): not a crash."""
    try:
        client.eval(_END, 1, key, field)
    except Exception as exc:  # noqa: BLE001 - a missed end counts as one crash at worst
        logger.warning("could not count the end of %s in %s: %s", field, key, exc)


def crashes(client: Any, key: str, field: str) -> int:
    """Starts of this message that never ended (0 when nothing is counted or Redis does not answer)."""
    try:
        return max(0, int(client.hget(key, field) or 0))
    except Exception as exc:  # noqa: BLE001 - like begin_attempt: never a reason to fail
        logger.warning("could not read the crash count of %s in %s: %s", field, key, exc)
        return 0


def forget(client: Any, key: str) -> None:
    """Drop a group's counts (one DEL); they would expire by themselves."""
    if client is None:
        return
    try:
        client.delete(key)
    except Exception as exc:  # noqa: BLE001 - the key expires by itself
        logger.warning("could not drop the crash counts %s: %s", key, exc)


class Solo:
    """A process-wide readers/writer lock: ordinary messages share it, a suspect takes it alone.

    Writer-preferring, so a waiting suspect is not starved by a steady stream of ordinary messages.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0
        self._alone = False
        self._waiting = 0

    def acquire_shared(self) -> None:
        with self._cond:
            while self._alone or self._waiting:
                self._cond.wait()
            self._running += 1

    def release_shared(self) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def acquire_alone(self) -> None:
        with self._cond:
            self._waiting += 1
            try:
                while self._alone or self._running:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._alone = True

    def release_alone(self) -> None:
        with self._cond:
            self._alone = False
            self._cond.notify_all()

    @contextmanager
    def shared(self) -> Iterator[None]:
        self.acquire_shared()
        try:
            yield
        finally:
            self.release_shared()

    @contextmanager
    def alone(self) -> Iterator[None]:
        self.acquire_alone()
        try:
            yield
        finally:
            self.release_alone()


_current = threading.local()


def settled() -> None:
    """Called by an actor whose message's work is now durable (a redelivery would do nothing).

    Its start then stays counted until :func:`forget` or expiry instead of costing a round
    trip to end: the message will never be processed again, so its count no longer matters.
    """
    _current.settled = True


class CrashCounter(dramatiq.Middleware):
    """Count starts and ends of the messages ``key`` names; give up on one that crashed too often.

    Parameters:
      key: ``message -> (hash key, field)``, or None for a message that is not counted.
      give_up: ``(broker, message, crashes)``, called instead of processing a message that
        crashed ``max_crashes`` workers; the message is then skipped (acked). If it raises, the
        message is failed instead (dead-lettered) — still not processed: Dramatiq swallows an
        exception from a ``before_`` hook and would run the actor.
      max_crashes: crashed workers a message may cost (>= 1).
      ttl: seconds a group's counts live after their last change.
      companion: commands to send in the same round trip as a counted start (:class:`Companion`).
    """

    def __init__(self, key: Key, give_up: GiveUp, *, max_crashes: int = DEFAULT_MAX_CRASHES,
                 ttl: int = DEFAULT_TTL, companion: Companion | None = None) -> None:
        if isinstance(max_crashes, bool) or not isinstance(max_crashes, int) or max_crashes < 1:
            raise ValueError(f"max_crashes must be a whole number >= 1, not {max_crashes!r}")
        self.key = key
        self.give_up = give_up
        self.max_crashes = max_crashes
        self.ttl = ttl
        self.companion = companion
        self.solo = Solo()

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        _current.held = None
        _current.settled = False
        _current.companion = None
        client = getattr(broker, "client", None)
        named = self.key(message) if client is not None else None
        if named is None:
            return
        key, field = named
        # The usual case costs two round trips (begin, end): the start is counted while sharing the
        # process, and only a message that turns out to be a suspect takes its count back and starts
        # again alone. The start is counted only once the lock is held: a message waiting for a
        # suspect to finish is not in flight, and must not be charged if the suspect crashes.
        self.solo.acquire_shared()
        if self.companion is None:
            count = begin_attempt(client, key, field, self.ttl)
        else:
            _current.companion = (self.companion, message)
            count = begin_attempt_with(client, key, field, self.ttl, message, self.companion)
        if count < max(1, self.max_crashes - 1):
            _current.held = ("shared", client, key, field)
            return
        end_attempt(client, key, field)
        self._companion_done()  # nothing is held while this message waits to run alone
        self.solo.release_shared()
        logger.warning("message %s (%s in %s) has crashed workers before; processing it alone in this "
                       "process", message.message_id, field, key)
        self.solo.acquire_alone()
        _current.held = ("alone", client, key, field)
        count = begin_attempt(client, key, field, self.ttl)
        if count >= self.max_crashes:
            logger.error("message %s (%s in %s) crashed its worker %d times; giving up on it without "
                         "processing it again", message.message_id, field, key, count)
            try:
                self.give_up(broker, message, count)
            except Exception as exc:  # noqa: BLE001 - Dramatiq would log it and process the message anyway
                logger.error("giving up on message %s failed it instead: %s", message.message_id, exc)
                message.fail()  # dead-lettered, not processed: a raising hook alone would not stop it
            raise SkipMessage(f"crashed its worker {count} times")

    def _companion_done(self) -> None:
        pending = getattr(_current, "companion", None)
        if pending is None:
            return
        _current.companion = None
        companion, message = pending
        try:
            companion.done(message)
        except Exception:  # noqa: BLE001 - the application's clean-up must not fail the message
            logger.exception("the crash counter's companion failed to finish message %s", message.message_id)

    def _done(self) -> None:
        self._companion_done()
        held = getattr(_current, "held", None)
        if held is None:
            return
        _current.held = None
        mode, client, key, field = held
        try:
            if mode == "alone" or not getattr(_current, "settled", False):
                end_attempt(client, key, field)
        finally:
            if mode == "alone":
                self.solo.release_alone()
            else:
                self.solo.release_shared()

    def after_process_message(self, broker, message, *, result=None, exception=None) -> None:
        self._done()

    def after_skip_message(self, broker, message) -> None:
        self._done()


__all__ = [
    "CrashCounter",
    "Companion",
    "Solo",
    "begin_attempt",
    "begin_attempt_with",
    "end_attempt",
    "crashes",
    "forget",
    "settled",
    "DEFAULT_MAX_CRASHES",
    "DEFAULT_TTL",
]
