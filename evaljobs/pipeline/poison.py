"""Poison pairs: an evaluation that kills its worker process is not redelivered forever.

A message whose evaluation crashes the worker *process* (a segfault in an
extension, the OOM killer, a host adapter calling ``os._exit``) is never
acked, so Redis hands it to the next worker once the dead one's heartbeat
times out — and it crashes that one too. Dramatiq's retry count cannot see
this: the process died before any middleware ran, so the message comes back
unchanged. The count has to live outside the process.

So every evaluation of a pair is bracketed: :func:`begin_attempt` before it,
:func:`end_attempt` after it returns or raises (anything short of the process
dying). A start that never ended is a crashed worker. Once a pair has crashed
``max_crashes()`` workers (``EVALJOBS_MAX_CRASHES``, default 3), the next
delivery records it as ``errored`` *without evaluating it*, so the barrier
still completes and the report names the pair (invariant 5).

The counts live in the broker's Redis, one hash per run
(``evaljobs:crashes:<run>``, field ``[scenario, model]``), dropped when the
run is finalized and otherwise expiring a week after the last change. The in-process memory broker counts nothing: a crash
there takes the whole run (and this process) with it.

A crash counts against every pair the process had in flight, the innocent
ones evaluated next to the poison pair too. So a pair's last chance (one
crash short of the limit) is evaluated alone in its process: it waits for the
evaluations in flight to finish and holds new ones back until it is done. A
poison pair's final crash then takes nobody with it, and a pair that shared
its earlier crashes is one short of the limit — so it too gets its last
chance alone, and passes.

A worker killed from outside (deploys, the fault-injection suite) also counts
against the pairs it had in flight; a pair would need to be in flight at
``max_crashes()`` kills to be given up on. Raise the limit where workers are
killed that often.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from evaljobs.evaluation.result import Result

logger = logging.getLogger("evaljobs.poison")

MAX_CRASHES_ENV = "EVALJOBS_MAX_CRASHES"
DEFAULT_MAX_CRASHES = 3
#: Seconds a run's crash counts are kept after their last change.
TTL_SECONDS = 7 * 24 * 3600

# Atomic, so two deliveries of one pair never lose an increment.
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


def max_crashes() -> int:
    """How many crashed workers a pair may cost before it is recorded as errored (>= 1)."""
    text = os.environ.get(MAX_CRASHES_ENV, "")
    try:
        value = int(text) if text.strip() else DEFAULT_MAX_CRASHES
    except ValueError:
        raise ValueError(f"{MAX_CRASHES_ENV}={text!r} is not an integer: set it to 1 or more") from None
    if value < 1:
        raise ValueError(f"{MAX_CRASHES_ENV}={value} must be 1 or more")
    return value


def key(run_id: str) -> str:
    return f"evaljobs:crashes:{run_id}"


def _field(scenario_key: str, model: str) -> str:
    return json.dumps([scenario_key, model], separators=(",", ":"))


def _client() -> Any:
    """The Redis client of the broker the actors are bound to; None for the memory broker."""
    from evaljobs.pipeline.actors import bound

    try:
        broker = bound().evaluate_scenario.broker
    except RuntimeError:
        return None
    return getattr(broker, "client", None)


def begin_attempt(run_id: str, scenario_key: str, model: str, *, client: Any = None) -> int:
    """Count one start of this pair; returns how many earlier starts never ended (crashed workers).

    Returns 0 when there is nothing to count with (memory broker) or Redis does
    not answer: the count is a safety net, never a reason to fail a pair.
    """
    client = client if client is not None else _client()
    if client is None:
        return 0
    try:
        return int(client.eval(_BEGIN, 1, key(run_id), _field(scenario_key, model), TTL_SECONDS))
    except Exception as exc:  # noqa: BLE001 - see the docstring
        logger.warning("could not count the start of %s × %s (run %s): %s", scenario_key, model, run_id, exc)
        return 0


def end_attempt(run_id: str, scenario_key: str, model: str, *, client: Any = None) -> None:
    """The evaluation started by :func:`begin_attempt` is over (returned or raised): not a crash."""
    client = client if client is not None else _client()
    if client is None:
        return
    try:
        client.eval(_END, 1, key(run_id), _field(scenario_key, model))
    except Exception as exc:  # noqa: BLE001 - a missed end counts as one crash at worst
        logger.warning("could not count the end of %s × %s (run %s): %s", scenario_key, model, run_id, exc)


def forget(run_id: str, *, client: Any = None) -> None:
    """Drop a finished run's counts (one DEL).

    A pair that ends recorded skips :func:`end_attempt` (one round trip less per pair: a
    recorded pair is never evaluated again, so its count no longer matters); its start stays
    counted until the run is finalized, here, or the key expires.
    """
    client = client if client is not None else _client()
    if client is None:
        return
    try:
        client.delete(key(run_id))
    except Exception as exc:  # noqa: BLE001 - the key expires by itself
        logger.warning("could not drop the crash counts of run %s: %s", run_id, exc)


def crashes(run_id: str, scenario_key: str, model: str, *, client: Any = None) -> int:
    """Starts of this pair that never ended (0 when nothing is counted)."""
    client = client if client is not None else _client()
    if client is None:
        return 0
    try:
        return max(0, int(client.hget(key(run_id), _field(scenario_key, model)) or 0))
    except Exception as exc:  # noqa: BLE001 - like begin_attempt: never a reason to fail a pair
        logger.warning("could not read the crash count of %s × %s (run %s): %s", scenario_key, model, run_id, exc)
        return 0


def crashed_result(scenario_key: str, model: str, count: int) -> Result:
    """The row a poison pair gets instead of a fourth crash."""
    return Result.errored(scenario_key, model,
                          f"crashed its worker {count} times (the process died while evaluating this pair); "
                          f"not evaluated again", attempts=count)


class _Solo:
    """A process-wide readers/writer lock: ordinary evaluations share it, a suspect takes it alone.

    Writer-preferring, so a waiting suspect is not starved by a steady stream of ordinary pairs.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0
        self._alone = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._alone or self._waiting:
                self._cond.wait()
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                while self._alone or self._running:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()


_solo = _Solo()


def guarded(evaluate: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap the ``evaluate_scenario(run_id, scenario_key, model, ...)`` actor function.

    Counts the start, evaluates (alone in this process on the pair's last chance),
    counts the end; a pair that has already crashed ``max_crashes()`` workers is
    recorded as errored instead of being evaluated.
    """

    @functools.wraps(evaluate)
    def wrapper(run_id: str, scenario_key: str, model: str, *args: Any, **kwargs: Any) -> None:
        # Returns None whatever ``evaluate`` returns: Dramatiq warns about an actor's return value
        # unless a results backend is configured.
        client = _client()
        if client is None:
            evaluate(run_id, scenario_key, model, *args, **kwargs)
            return
        limit = max_crashes()
        # The usual case costs two round trips (begin, end): the start is counted while sharing the
        # process, and only a pair that turns out to be a suspect takes its count back and starts
        # again alone. The start is counted only once the lock is held: a pair waiting for a
        # suspect to finish is not in flight, and must not be charged if the suspect crashes.
        with _solo.shared():
            count = begin_attempt(run_id, scenario_key, model, client=client)
            if count < max(1, limit - 1):
                recorded = False
                try:
                    recorded = evaluate(run_id, scenario_key, model, *args, **kwargs)
                    return
                finally:
                    if recorded is not True:  # a recorded pair is never evaluated again: its count is moot
                        end_attempt(run_id, scenario_key, model, client=client)
            end_attempt(run_id, scenario_key, model, client=client)
        logger.warning("pair %s × %s of run %s has crashed workers before; evaluating it alone in this "
                       "process", scenario_key, model, run_id)
        with _solo.alone():
            count = begin_attempt(run_id, scenario_key, model, client=client)
            try:
                if count >= limit:
                    _give_up(run_id, scenario_key, model, count)
                    return
                evaluate(run_id, scenario_key, model, *args, **kwargs)
            finally:
                end_attempt(run_id, scenario_key, model, client=client)

    return wrapper


def _give_up(run_id: str, scenario_key: str, model: str, count: int) -> None:
    from evaljobs.pipeline import actors
    from evaljobs import store

    if store.is_recorded(run_id, scenario_key, model):
        return
    logger.error("pair %s × %s of run %s crashed its worker %d times; recording it as errored without "
                 "evaluating it again", scenario_key, model, run_id, count)
    try:
        actors.persist(run_id, crashed_result(scenario_key, model, count))
    except (store.UnknownRun, store.UnexpectedPair) as exc:  # not a pair of this run: dead-letter it
        raise actors.InvalidMessage(str(exc)) from None
