"""The provider governor: one shared, self-tuning concurrency budget per provider deployment.

A fan-out runs every (scenario x model) pair on many worker threads on many
machines, so the real ceiling is the provider's rate limit, not the worker
count: 33 calls at once against one key trip 429s. Before each provider call a
worker asks ``Governor.acquire(budget, lane)`` for a permit and afterwards
reports the outcome with ``Permit.release(...)``. The state lives in Redis and
every change is one Lua script timed by the Redis server clock (``TIME``), so
all workers on all machines share one budget without trusting their own clocks.

Choices, and why:

* **Permits are leases.** Each permit is a member of a sorted set scored by its
  expiry (``lease_seconds``, default 60). A worker killed mid-call never
  releases, and its slot comes back when the lease expires: a slot never leaks.
  Held permits are renewed every ``lease_seconds / 2`` by one background thread
  per ``Governor`` (``keep_alive=True``, the default; ``Permit.renew()`` by
  hand otherwise), so only a dead process loses its lease, never a slow call.
* **Adaptive concurrency (AIMD with slow start, as TCP).** A budget starts at
  ``initial`` (4) slots. Each success adds one slot (slow start: the limit
  doubles per round of calls) until the first rate limit; after it, one slot per
  ``limit`` successes (additive increase, about +1 per round). A success only
  counts when the budget is in use (at least half its slots in flight), so a
  lone sequential caller does not inflate a limit it never tested. A 429, or a
  response saying the quota is spent (``x-ratelimit-remaining-requests: 0`` or
  ``...-tokens: 0``), halves the limit **once per burst**: every permit carries
  the budget's *epoch*, a decrease bumps the epoch, and a 429 from a permit
  granted before the last decrease is counted but does not halve again (those
  calls were already in the air when we backed off). Floor 1, ceiling
  ``ceiling`` (64). When ``rpm``/``tpm`` are configured, slow start may jump
  straight to Little's law, ``0.85 x min(rpm/60 x latency, tpm/60/tokens x
  latency)``, from moving averages of reported latency and tokens per call.
* **Hold at the capacity a 429 showed.** Halving and then crawling back up one
  slot per round only to hit the same wall again (plain AIMD) wastes a third of
  a hard concurrency limit and trips a 429 every few rounds. So the burst's
  first 429 also records how many other calls of the budget were in flight when
  the provider refused (what it was serving; a later 429 of the same burst may
  lower it): slow start climbs back to that level (``ssthresh``) at once, and
  there the increase waits ``HOLD_ROUNDS`` (16) times longer before probing one
  slot above it; a probe that finds the same capacity again doubles that wait
  (up to ``HOLD_ROUNDS_MAX``, 256 rounds), so a steady limit costs a probe
  ever more rarely. A 429 with fewer calls in flight than the halved limit (a
  per-minute quota, someone else's traffic) teaches nothing: plain AIMD.
* **Rate windows.** With ``rpm``/``tpm``, requests and tokens of the last 60 s
  are counted in one-second buckets; a call that would overflow them is not
  admitted until the oldest buckets leave the window. ``acquire(tokens=N)``
  reserves N tokens (else the moving average) and ``release(tokens=...)``
  corrects the count with what was really used.
* **Lanes.** ``bulk`` (evaluation runs, the default) may hold at most
  ``max(1, floor((1 - bulk_reserve) x limit))`` slots; ``interactive`` may use
  the whole limit and is served before queued bulk callers. So a full bulk lane
  never blocks an interactive call (with ``limit`` 1 the single slot is shared).
* **Retry-After.** A 429 with a ``retry_after`` (``Retry-After`` and
  ``retry-after-ms`` arrive parsed as seconds), or a spent quota with a reset
  header, pauses the whole budget until then: no permit is granted before it.
* **Waiting never burns a worker.** A caller waits at most ``max_wait`` seconds
  (short: 2 s by default), in a FIFO queue per lane, sleeping between attempts
  with capped, jittered exponential backoff (or exactly until a pause or window
  ends); a release in the same process wakes the waiter whose turn it is at
  once (each denied waiter learns its place in line and sleeps until that
  many slots were freed here, so a release costs one Redis round trip, not one
  per waiting thread); a release elsewhere is seen at the next attempt: at the
  head of the line within a quarter of the expected wait (at most
  ``POLL_MAX``), further back about twice per expected wait. After
  ``max_wait`` it gets ``Busy(retry_in=...)`` and should re-enqueue its
  message with that delay instead of sleeping on a worker thread; a wait that
  is known to outlast ``max_wait`` (a long Retry-After) raises at once. The
  governor never touches the database. A wait that ends without a permit (Busy, an
  exception, an interrupt) removes its queue entry in ``finally``, and queue
  entries of a killed waiter expire within seconds: a cancelled wait holds no
  slot and no place.
* **Redis down.** On a connection error or timeout the governor logs ONE warning
  and carries on with a local, in-process, thread-safe governor with the same
  semantics (a per-process budget: the fleet may then exceed the shared limit
  until Redis is back). Redis is retried every ``reconnect_after`` seconds (30);
  an evaluation never fails because the governor's store is down.

Budget names: ``budget_key()`` maps a provider entry and model to a budget —
``provider:model`` by default, ``provider:*`` with ``budget_key: account``, or
any explicit string shared by several provider entries. LLM-judge calls simply
acquire from the judge model's budget.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import math
import random
import re
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from evaljobs.providers.errors import RateLimited, parse_retry_after

log = logging.getLogger(__name__)

LANES = ("interactive", "bulk")
#: Seconds of requests/tokens the rpm/tpm windows count (one bucket per second).
WINDOW_SECONDS = 60
#: Sleep bounds between two attempts of one waiting caller (seconds).
POLL_MIN = 0.01
POLL_MAX = 0.1
#: Longest single sleep of a waiter; its queue place lives WAITER_TTL seconds without a new attempt.
SLEEP_CAP = 1.0
WAITER_TTL = SLEEP_CAP + 1.0
#: Longest pause a provider hint may impose at once (re-checked after it).
MAX_PAUSE = 3600.0
#: Weight of the newest observation in the latency and tokens-per-call moving averages.
EWMA_ALPHA = 0.2
#: After a 429 that showed the provider's capacity, rounds (x limit successes) the limit holds there
#: before it probes one slot above; each probe that finds the same capacity doubles it, up to the max.
HOLD_ROUNDS = 16
HOLD_ROUNDS_MAX = 256
#: Safety factor applied to the Little's-law estimate.
LITTLE_FACTOR = 0.85
DEFAULT_LATENCY = 1.0
_EPSILON = 1e-9


@dataclass(frozen=True)
class BudgetConfig:
    """How one budget behaves; ``ProviderConfig.governor`` holds the same keys (plus ``budget_key``)."""

    initial: int = 4
    ceiling: int = 64
    rpm: int | None = None
    tpm: int | None = None
    bulk_reserve: float = 0.15
    lease_seconds: float = 60.0

    def __post_init__(self) -> None:
        _check_config(self, "governor")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, *, source: str = "governor") -> "BudgetConfig":
        """Build from a providers-file mapping; ``budget_key`` is allowed and ignored (see ``budget_key()``).

        ``source`` prefixes the one-line ``ValueError`` (e.g. "providers.yaml: provider 'openai' governor").
        """
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ValueError(f"{source}: expected a mapping (initial, ceiling, rpm, tpm, bulk_reserve, "
                             f"lease_seconds, budget_key), got {type(d).__name__}")
        names = [f.name for f in fields(cls)]
        values: dict[str, Any] = {}
        for key, value in d.items():
            if key == "budget_key":
                continue
            if key not in names:
                raise ValueError(f"{source}: unknown key {key!r} "
                                 f"(valid keys: {', '.join(names)}, budget_key)")
            values[key] = value
        config = cls.__new__(cls)
        for name in names:
            object.__setattr__(config, name, values.get(name, getattr(cls, name)))
        _check_config(config, source)
        if isinstance(config.bulk_reserve, int):
            object.__setattr__(config, "bulk_reserve", float(config.bulk_reserve))
        if isinstance(config.lease_seconds, int):
            object.__setattr__(config, "lease_seconds", float(config.lease_seconds))
        return config


def _check_config(config: BudgetConfig, source: str) -> None:
    def is_int(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    def is_number(value: Any) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)

    if not is_int(config.initial) or config.initial < 1:
        raise ValueError(f"{source}: initial must be an integer >= 1, not {config.initial!r}")
    if not is_int(config.ceiling) or config.ceiling < 1:
        raise ValueError(f"{source}: ceiling must be an integer >= 1, not {config.ceiling!r}")
    if config.initial > config.ceiling:
        raise ValueError(f"{source}: initial ({config.initial}) must not exceed ceiling ({config.ceiling})")
    for name in ("rpm", "tpm"):
        value = getattr(config, name)
        if value is not None and (not is_int(value) or value < 1):
            raise ValueError(f"{source}: {name} must be an integer >= 1 (per minute) or absent, "
                             f"not {value!r}")
    if not is_number(config.bulk_reserve) or not 0 <= config.bulk_reserve < 1:
        raise ValueError(f"{source}: bulk_reserve must be a fraction in [0, 1), not {config.bulk_reserve!r}")
    if not is_number(config.lease_seconds) or config.lease_seconds <= 0:
        raise ValueError(f"{source}: lease_seconds must be a number > 0, not {config.lease_seconds!r}")


def budget_key(provider_name: str, model: str, governor_config: Mapping[str, Any] | None = None) -> str:
    """The budget a call to ``provider_name/model`` counts against.

    ``budget_key`` absent or ``model``: one budget per deployment (``provider:model``);
    ``account``: one budget for every model of the provider entry (``provider:*``);
    any other string: that budget, so several provider entries can share one key.
    """
    mode = (governor_config or {}).get("budget_key")
    if mode is None or mode == "model":
        return f"{provider_name}:{model}"
    if mode == "account":
        return f"{provider_name}:*"
    if not isinstance(mode, str) or not mode.strip():
        raise ValueError(f"provider {provider_name!r} governor: budget_key must be 'model', 'account' or a "
                         f"budget name, not {mode!r}")
    return mode


class Busy(Exception):
    """No permit within ``max_wait``: re-enqueue the work ``retry_in`` seconds later instead of sleeping."""

    def __init__(self, budget: str, retry_in: float, reason: str = "limit"):
        self.budget = budget
        self.retry_in = float(retry_in)
        self.reason = reason
        super().__init__(f"governor budget {budget!r} busy ({_REASONS.get(reason, reason)}); "
                         f"retry in {self.retry_in:.2f}s")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Busy, (self.budget, self.retry_in, self.reason))


_REASONS = {
    "limit": "all slots of the lane in use",
    "paused": "paused by the provider's Retry-After",
    "rpm": "requests-per-minute window full",
    "tpm": "tokens-per-minute window full",
}


@dataclass
class _Answer:
    """One admission attempt, from either store."""

    granted: bool
    reason: str
    retry_in: float
    now: float
    limit: int
    epoch: int
    tokens: int = 0
    #: Denied for "limit": how many slots must free before this caller's turn (its place in line).
    ahead: int = 0


class Permit:
    """One admitted provider call. Release it exactly once (extra releases are no-ops).

    As a context manager it releases on exit: a ``RateLimited`` escaping the
    block counts as a 429 (with its ``retry_after``), any other exception as a
    failure, a clean exit as a success timed from the grant. Call ``release()``
    inside the block to report tokens and response headers.
    """

    def __init__(self, governor: "Governor", backend: str, budget: str, lane: str, lease_id: str,
                 granted_at: float, epoch: int, tokens: int, config: BudgetConfig, waited: float):
        self.budget = budget
        self.lane = lane
        self.lease_id = lease_id
        #: When the store granted it, in the store's clock (Redis server time, or the local clock).
        self.granted_at = granted_at
        #: Seconds this caller waited for the permit.
        self.waited = waited
        #: "redis" or "local": where the lease is held.
        self.backend = backend
        self.released = False
        self._governor = governor
        self._epoch = epoch
        self._tokens = tokens
        self._config = config
        self._started = time.monotonic()
        self._renew_at = self._started + config.lease_seconds / 2

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<Permit {self.budget!r} {self.lane} {self.lease_id[:8]} {self.backend} {state}>"

    def renew(self) -> None:
        """Extend the lease to ``lease_seconds`` from now (a long call keeps its slot).

        A lease that already expired is put back: the call is really in flight, so it is counted.
        """
        if not self.released:
            self._governor._renew(self)

    def release(self, *, rate_limited: bool = False, retry_after: float | None = None, failed: bool = False,
                tokens: int = 0, latency: float | None = None,
                headers: Mapping[str, str] | None = None) -> None:
        """Give the slot back and report the outcome that tunes the budget.

        ``rate_limited``: the provider answered 429 (``retry_after`` pauses the budget);
        ``failed``: another failure (neither grows nor shrinks the limit); ``tokens``: tokens
        used; ``latency``: seconds (default: since the grant); ``headers``: rate-limit
        response headers (``x-ratelimit-*``), a spent quota counts like a 429.
        """
        if self.released:
            return
        self.released = True
        if latency is None:
            latency = time.monotonic() - self._started
        if rate_limited and retry_after is None and headers:
            retry_after = parse_retry_after(headers)
        spent, reset = _quota_spent(headers)
        pause = retry_after if rate_limited else None
        if spent and reset is not None:
            pause = max(pause or 0.0, reset)
        outcome = _Outcome(rate_limited=bool(rate_limited), spent=spent,
                           pause=min(max(pause or 0.0, 0.0), MAX_PAUSE), failed=bool(failed),
                           tokens=max(int(tokens or 0), 0), latency=max(float(latency), 0.0))
        self._governor._release(self, outcome)

    def __enter__(self) -> "Permit":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self.released:
            return
        if isinstance(exc, RateLimited):
            self.release(rate_limited=True, retry_after=exc.retry_after)
        elif exc is not None:
            self.release(failed=True)
        else:
            self.release()


@dataclass(frozen=True)
class _Outcome:
    rate_limited: bool
    spent: bool
    pause: float
    failed: bool
    tokens: int
    latency: float


def _number(value: Any) -> float | None:
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def _duration(text: Any) -> float | None:
    """Seconds in a reset header: ``"20ms"``, ``"1s"``, ``"6m0s"``, ``"1h2m3.5s"`` or a plain number."""
    if text is None:
        return None
    text = str(text).strip()
    plain = _number(text)
    if plain is not None:
        return max(plain, 0.0)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def _quota_spent(headers: Mapping[str, str] | None) -> tuple[bool, float | None]:
    """(quota spent?, seconds until it resets) from ``x-ratelimit-remaining-*`` / ``x-ratelimit-reset-*``."""
    if not headers:
        return False, None
    lowered = {str(k).lower(): v for k, v in headers.items()}
    spent, reset = False, None
    for kind in ("requests", "tokens"):
        remaining = _number(lowered.get(f"x-ratelimit-remaining-{kind}"))
        if remaining is not None and remaining <= 0:
            spent = True
            seconds = _duration(lowered.get(f"x-ratelimit-reset-{kind}"))
            if seconds is not None:
                reset = max(reset or 0.0, seconds)
    return spent, reset


# --------------------------------------------------------------------------- Redis store

_TIME = """
local now
if ARGV[{i}] ~= '' then now = tonumber(ARGV[{i}]) else
  local t = redis.call('TIME'); now = tonumber(t[1]) + tonumber(t[2]) / 1000000 end
"""

# KEYS: state, lease:interactive, lease:bulk, wait:interactive, wait:bulk, waitexp, req, tok, budgets
# ARGV: budget, lane, lease_id, waiter_id, now|'', initial, ceiling, rpm|0, tpm|0, reserve, lease_s,
#       tokens, waited_ms, waiter_ttl
_ACQUIRE = _TIME.format(i=5) + """
local st = KEYS[1]
local lane = ARGV[2]
local waiter = ARGV[4]
local initial, ceiling = tonumber(ARGV[6]), tonumber(ARGV[7])
local rpm, tpm = tonumber(ARGV[8]), tonumber(ARGV[9])
local reserve, lease_s = tonumber(ARGV[10]), tonumber(ARGV[11])
local tokens, waited_ms, ttl = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
redis.call('SADD', KEYS[9], ARGV[1])
local limit = tonumber(redis.call('HGET', st, 'limit'))
if not limit then
  limit = math.min(initial, ceiling)
  redis.call('HSET', st, 'limit', limit, 'ssthresh', ceiling, 'epoch', 0, 'acc', 0)
elseif limit > ceiling then
  limit = ceiling
  redis.call('HSET', st, 'limit', limit)
end
local epoch = tonumber(redis.call('HGET', st, 'epoch')) or 0
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
for _, w in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now)) do
  redis.call('ZREM', KEYS[4], w); redis.call('ZREM', KEYS[5], w); redis.call('ZREM', KEYS[6], w)
end
local n_i, n_b = redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3])
local queue = KEYS[4]
if lane == 'bulk' then queue = KEYS[5] end
local function deny(reason, retry_in, ahead)
  redis.call('ZADD', queue, 'NX', now, waiter)
  redis.call('ZADD', KEYS[6], now + ttl, waiter)
  return {0, reason, string.format('%.6f', retry_in), string.format('%.6f', now), limit, epoch, 0, ahead or 0}
end
local paused = tonumber(redis.call('HGET', st, 'paused_until')) or 0
if paused > now then return deny('paused', paused - now) end
local rank = redis.call('ZRANK', queue, waiter)
if not rank then rank = redis.call('ZCARD', queue) end
local free = limit - n_i - n_b
if lane == 'bulk' then
  local cap = math.max(1, math.floor((1 - reserve) * limit + 1e-9))
  free = math.min(cap - n_b, free - redis.call('ZCARD', KEYS[4]))
end
if rank >= free then
  local lat = tonumber(redis.call('HGET', st, 'lat')) or 1.0
  local ahead = rank - math.max(free, 0) + 1
  return deny('limit', math.min(60, math.max(0.05, lat * ahead / limit)), ahead)
end
local est = tokens
if est <= 0 then est = math.floor((tonumber(redis.call('HGET', st, 'tok')) or 0) + 0.5) end
local sec = math.floor(now)
local function window(key)
  local flat = redis.call('HGETALL', key)
  local used, buckets = 0, {}
  for i = 1, #flat, 2 do
    local b, v = tonumber(flat[i]), tonumber(flat[i + 1])
    if b <= sec - 60 then redis.call('HDEL', key, flat[i])
    else used = used + v; table.insert(buckets, {b, v}) end
  end
  table.sort(buckets, function(x, y) return x[1] < y[1] end)
  return used, buckets
end
local function wait_for(buckets, excess)
  local freed = 0
  for _, bv in ipairs(buckets) do
    freed = freed + bv[2]
    if freed >= excess then return math.max(0.05, bv[1] + 60 - now) end
  end
  return 60
end
if rpm > 0 then
  local used, buckets = window(KEYS[7])
  if used + 1 > rpm then return deny('rpm', wait_for(buckets, used + 1 - rpm)) end
end
if tpm > 0 then
  local used, buckets = window(KEYS[8])
  if used > 0 and used + est > tpm then return deny('tpm', wait_for(buckets, used + est - tpm)) end
end
redis.call('ZADD', lane == 'bulk' and KEYS[3] or KEYS[2], now + lease_s, ARGV[3])
redis.call('ZREM', queue, waiter)
redis.call('ZREM', KEYS[6], waiter)
redis.call('HINCRBY', st, 'admitted', 1)
redis.call('HINCRBYFLOAT', st, 'wait_sum_ms', waited_ms)
if waited_ms > (tonumber(redis.call('HGET', st, 'wait_max_ms')) or 0) then
  redis.call('HSET', st, 'wait_max_ms', waited_ms)
end
if rpm > 0 then redis.call('HINCRBY', KEYS[7], sec, 1); redis.call('EXPIRE', KEYS[7], 120) end
if tpm > 0 and est > 0 then redis.call('HINCRBY', KEYS[8], sec, est); redis.call('EXPIRE', KEYS[8], 120) end
return {1, 'ok', '0', string.format('%.6f', now), limit, epoch, est, 0}
"""

# KEYS: state, lease:interactive, lease:bulk, tok
# ARGV: lane, lease_id, now|'', initial, ceiling, epoch, rate_limited, spent, pause, failed, tokens,
#       reserved, latency, rpm|0, tpm|0, hold_rounds, hold_rounds_max
_RELEASE = _TIME.format(i=3) + """
local st = KEYS[1]
local initial, ceiling = tonumber(ARGV[4]), tonumber(ARGV[5])
local rate_limited, spent, pause = ARGV[7] == '1', ARGV[8] == '1', tonumber(ARGV[9])
local failed, tokens, reserved = ARGV[10] == '1', tonumber(ARGV[11]), tonumber(ARGV[12])
local latency, rpm, tpm = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
local hold_rounds, hold_max = tonumber(ARGV[16]), tonumber(ARGV[17])
local in_flight = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
  + redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf')
local lease_key = ARGV[1] == 'bulk' and KEYS[3] or KEYS[2]
local expiry = tonumber(redis.call('ZSCORE', lease_key, ARGV[2]))
redis.call('ZREM', lease_key, ARGV[2])
local held = 0  -- 1 when this release frees a slot (its lease had not expired)
if expiry and expiry > now then held = 1 end
-- the budget's other calls in flight when the provider refused this one: what it was serving
local others = in_flight - held
local limit = tonumber(redis.call('HGET', st, 'limit')) or math.min(initial, ceiling)
local ssthresh = tonumber(redis.call('HGET', st, 'ssthresh')) or ceiling
local epoch = tonumber(redis.call('HGET', st, 'epoch')) or 0
local acc = tonumber(redis.call('HGET', st, 'acc')) or 0
local hold = tonumber(redis.call('HGET', st, 'hold')) or 0
local plateau = tonumber(redis.call('HGET', st, 'plateau')) or hold_rounds
local old_limit = limit
if rate_limited or spent then
  if rate_limited then redis.call('HINCRBY', st, 'rate_limited', 1) end
  local granted_in = tonumber(ARGV[6])
  if granted_in == epoch then
    local held_at = hold
    limit = math.max(1, math.floor(limit / 2)); ssthresh = limit; acc = 0; epoch = epoch + 1; hold = 0
    if rate_limited and others > limit then
      ssthresh = math.min(others, ceiling); hold = ssthresh
    end
    -- a probe above the held level that finds the same capacity: hold twice as long next time
    if hold > 0 and hold == held_at then plateau = math.min(plateau * 2, hold_max)
    else plateau = hold_rounds end
  elseif rate_limited and granted_in == epoch - 1 and others > limit and others < ssthresh then
    ssthresh = others; hold = others
  end
  if pause > 0 and now + pause > (tonumber(redis.call('HGET', st, 'paused_until')) or 0) then
    redis.call('HSET', st, 'paused_until', string.format('%.6f', now + pause))
  end
elseif not failed then
  local lat = tonumber(redis.call('HGET', st, 'lat'))
  if lat then lat = lat + 0.2 * (latency - lat) else lat = latency end
  redis.call('HSET', st, 'lat', string.format('%.6f', lat))
  local tok = tonumber(redis.call('HGET', st, 'tok'))
  if tokens > 0 then
    if tok then tok = tok + 0.2 * (tokens - tok) else tok = tokens end
    redis.call('HSET', st, 'tok', string.format('%.6f', tok))
  end
  if in_flight * 2 >= limit then
    if limit < ssthresh then limit = limit + 1
    else
      acc = acc + 1
      local need = limit
      if limit == hold then need = limit * plateau end
      if acc >= need then limit = limit + 1; acc = 0 end
    end
  end
  if limit < ssthresh and (rpm > 0 or (tpm > 0 and tok and tok > 0)) then
    local est = nil
    if rpm > 0 then est = rpm / 60 * lat end
    if tpm > 0 and tok and tok > 0 then
      local by_tokens = tpm / 60 / tok * lat
      if est == nil or by_tokens < est then est = by_tokens end
    end
    est = math.floor(0.85 * est + 1e-9)
    if est > limit then limit = math.min(est, ssthresh) end
  end
  limit = math.max(1, math.min(limit, ceiling))
end
if tpm > 0 and not rate_limited and tokens > 0 and tokens ~= reserved then
  redis.call('HINCRBY', KEYS[4], math.floor(now), tokens - reserved)
  redis.call('EXPIRE', KEYS[4], 120)
end
redis.call('HSET', st, 'limit', limit, 'ssthresh', ssthresh, 'epoch', epoch, 'acc', acc, 'hold', hold,
           'plateau', plateau)
return {held, limit, epoch, held + math.max(0, limit - old_limit)}
"""

# KEYS: lease key;  ARGV: lease_id, now|'', lease_s
_RENEW = _TIME.format(i=2) + """
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1
"""

# KEYS: state, lease:interactive, lease:bulk, waitexp;  ARGV: now|''
_STATS = _TIME.format(i=1) + """
local st = KEYS[1]
local function num(field) return redis.call('HGET', st, field) or '0' end
local paused = tonumber(num('paused_until')) - now
if paused < 0 then paused = 0 end
return {num('limit'), redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'),
        redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf'), redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf'),
        num('admitted'), num('rate_limited'), num('wait_sum_ms'), num('wait_max_ms'),
        string.format('%.6f', paused)}
"""


class _RedisStore:
    """The shared store: every operation is one Lua script (or one ZREM) against Redis."""

    name = "redis"

    def __init__(self, url: str, namespace: str, clock: Callable[[], float] | None):
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # No client-side retries: a script must not run twice, and a down Redis must fail fast
        # (the governor falls back to its local store instead of waiting).
        self.client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=0.5,
                                           retry=Retry(NoBackoff(), 0), decode_responses=True)
        self.namespace = namespace
        self.clock = clock
        self.location = _redact(url)
        self._acquire = self.client.register_script(_ACQUIRE)
        self._release = self.client.register_script(_RELEASE)
        self._renew = self.client.register_script(_RENEW)
        self._stats = self.client.register_script(_STATS)

    def _now(self) -> str:
        return "" if self.clock is None else repr(float(self.clock()))

    def _key(self, budget: str, part: str) -> str:
        return f"{self.namespace}:{{{budget}}}:{part}"

    def try_acquire(self, budget: str, lane: str, lease_id: str, config: BudgetConfig, tokens: int,
                    waited_ms: float) -> _Answer:
        k = self._key
        keys = [k(budget, "state"), k(budget, "lease:interactive"), k(budget, "lease:bulk"),
                k(budget, "wait:interactive"), k(budget, "wait:bulk"), k(budget, "waitexp"),
                k(budget, "req"), k(budget, "tok"), f"{self.namespace}:budgets"]
        args = [budget, lane, lease_id, lease_id, self._now(), config.initial, config.ceiling,
                config.rpm or 0, config.tpm or 0, repr(float(config.bulk_reserve)),
                repr(float(config.lease_seconds)), int(tokens), f"{waited_ms:.3f}", repr(WAITER_TTL)]
        granted, reason, retry_in, now, limit, epoch, est, ahead = self._acquire(keys=keys, args=args)
        return _Answer(granted=bool(int(granted)), reason=reason, retry_in=float(retry_in), now=float(now),
                       limit=int(limit), epoch=int(epoch), tokens=int(est), ahead=int(ahead))

    def cancel_wait(self, budget: str, lane: str, lease_id: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(self._key(budget, f"wait:{lane}"), lease_id)
        pipe.zrem(self._key(budget, "waitexp"), lease_id)
        pipe.execute()

    def release(self, permit: Permit, outcome: _Outcome) -> int:
        """Give the slot back; returns how many slots that freed (a grown limit frees more than one)."""
        k, budget, config = self._key, permit.budget, permit._config
        keys = [k(budget, "state"), k(budget, "lease:interactive"), k(budget, "lease:bulk"), k(budget, "tok")]
        args = [permit.lane, permit.lease_id, self._now(), config.initial, config.ceiling, permit._epoch,
                int(outcome.rate_limited), int(outcome.spent), repr(outcome.pause), int(outcome.failed),
                outcome.tokens, permit._tokens, repr(outcome.latency), config.rpm or 0, config.tpm or 0,
                HOLD_ROUNDS, HOLD_ROUNDS_MAX]
        return int(self._release(keys=keys, args=args)[3])

    def renew(self, permit: Permit) -> None:
        self._renew(keys=[self._key(permit.budget, f"lease:{permit.lane}")],
                    args=[permit.lease_id, self._now(), repr(float(permit._config.lease_seconds))])

    def stats(self) -> list[dict[str, Any]]:
        budgets = sorted(self.client.smembers(f"{self.namespace}:budgets"))
        pipe = self.client.pipeline(transaction=False)
        for budget in budgets:
            k = self._key
            self._stats(keys=[k(budget, "state"), k(budget, "lease:interactive"), k(budget, "lease:bulk"),
                              k(budget, "waitexp")], args=[self._now()], client=pipe)
        rows = pipe.execute() if budgets else []
        out = []
        for budget, row in zip(budgets, rows):
            limit, n_i, n_b, waiting, admitted, rate_limited, wait_sum, wait_max, paused = row
            out.append(_stats_row(budget, self.name, int(float(limit)), int(n_i), int(n_b), int(waiting),
                                  int(float(admitted)), int(float(rate_limited)), float(wait_sum),
                                  float(wait_max), float(paused)))
        return out

    def close(self) -> None:
        self.client.close()


def _redact(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//***@", url)


def _stats_row(budget: str, backend: str, limit: int, n_i: int, n_b: int, waiting: int, admitted: int,
               rate_limited: int, wait_sum_ms: float, wait_max_ms: float, paused: float) -> dict[str, Any]:
    return {"budget": budget, "backend": backend, "limit": limit, "in_flight": n_i + n_b,
            "in_flight_interactive": n_i, "in_flight_bulk": n_b, "waiting": waiting, "admitted": admitted,
            "rate_limited": rate_limited, "mean_wait_ms": wait_sum_ms / admitted if admitted else 0.0,
            "max_wait_ms": wait_max_ms, "paused_for": paused}


# --------------------------------------------------------------------------- local store

@dataclass
class _LocalBudget:
    limit: int
    ssthresh: int
    epoch: int = 0
    acc: int = 0
    paused_until: float = 0.0
    hold: int = 0
    plateau: int = HOLD_ROUNDS
    lat: float | None = None
    tok: float | None = None
    admitted: int = 0
    rate_limited: int = 0
    wait_sum_ms: float = 0.0
    wait_max_ms: float = 0.0
    leases: dict[str, dict[str, float]] = field(default_factory=lambda: {lane: {} for lane in LANES})
    #: lane -> waiter id -> arrival, in arrival order (dicts keep insertion order).
    queues: dict[str, dict[str, float]] = field(default_factory=lambda: {lane: {} for lane in LANES})
    waiter_exp: dict[str, float] = field(default_factory=dict)
    req: dict[int, int] = field(default_factory=dict)
    tok_window: dict[int, int] = field(default_factory=dict)


class _LocalStore:
    """The same semantics as the Lua scripts, in memory for one process (the fallback, or no Redis)."""

    name = "local"

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self._lock = threading.Lock()
        self._budgets: dict[str, _LocalBudget] = {}

    def _budget(self, budget: str, config: BudgetConfig) -> _LocalBudget:
        state = self._budgets.get(budget)
        if state is None:
            state = self._budgets[budget] = _LocalBudget(limit=min(config.initial, config.ceiling),
                                                         ssthresh=config.ceiling)
        state.limit = min(state.limit, config.ceiling)
        return state

    def try_acquire(self, budget: str, lane: str, lease_id: str, config: BudgetConfig, tokens: int,
                    waited_ms: float) -> _Answer:
        with self._lock:
            now = self.clock()
            s = self._budget(budget, config)
            for held in s.leases.values():
                for lid in [lid for lid, expiry in held.items() if expiry <= now]:
                    del held[lid]
            for waiter in [w for w, expiry in s.waiter_exp.items() if expiry <= now]:
                del s.waiter_exp[waiter]
                for queue in s.queues.values():
                    queue.pop(waiter, None)
            n_i, n_b = len(s.leases["interactive"]), len(s.leases["bulk"])
            queue = s.queues[lane]

            def deny(reason: str, retry_in: float, ahead: int = 0) -> _Answer:
                queue.setdefault(lease_id, now)
                s.waiter_exp[lease_id] = now + WAITER_TTL
                return _Answer(False, reason, retry_in, now, s.limit, s.epoch, ahead=ahead)

            if s.paused_until > now:
                return deny("paused", s.paused_until - now)
            rank = list(queue).index(lease_id) if lease_id in queue else len(queue)
            free = s.limit - n_i - n_b
            if lane == "bulk":
                free = min(_bulk_cap(s.limit, config.bulk_reserve) - n_b, free - len(s.queues["interactive"]))
            if rank >= free:
                ahead = rank - max(free, 0) + 1
                lat = s.lat if s.lat is not None else DEFAULT_LATENCY
                return deny("limit", min(60.0, max(0.05, lat * ahead / s.limit)), ahead)
            est = tokens if tokens > 0 else int(math.floor((s.tok or 0.0) + 0.5))
            sec = int(math.floor(now))
            if config.rpm:
                used, buckets = _window(s.req, sec)
                if used + 1 > config.rpm:
                    return deny("rpm", _wait_for(buckets, used + 1 - config.rpm, now))
            if config.tpm:
                used, buckets = _window(s.tok_window, sec)
                if used > 0 and used + est > config.tpm:
                    return deny("tpm", _wait_for(buckets, used + est - config.tpm, now))
            s.leases[lane][lease_id] = now + config.lease_seconds
            queue.pop(lease_id, None)
            s.waiter_exp.pop(lease_id, None)
            s.admitted += 1
            s.wait_sum_ms += waited_ms
            s.wait_max_ms = max(s.wait_max_ms, waited_ms)
            if config.rpm:
                s.req[sec] = s.req.get(sec, 0) + 1
            if config.tpm and est > 0:
                s.tok_window[sec] = s.tok_window.get(sec, 0) + est
            return _Answer(True, "ok", 0.0, now, s.limit, s.epoch, est)

    def cancel_wait(self, budget: str, lane: str, lease_id: str) -> None:
        with self._lock:
            state = self._budgets.get(budget)
            if state is not None:
                state.queues[lane].pop(lease_id, None)
                state.waiter_exp.pop(lease_id, None)

    def release(self, permit: Permit, outcome: _Outcome) -> int:
        config = permit._config
        with self._lock:
            now = self.clock()
            s = self._budget(permit.budget, config)
            in_flight = sum(1 for held in s.leases.values() for expiry in held.values() if expiry > now)
            expiry = s.leases[permit.lane].pop(permit.lease_id, None)
            held = int(expiry is not None and expiry > now)
            others = in_flight - held  # what the provider was serving when it refused this call
            old_limit = s.limit
            if outcome.rate_limited or outcome.spent:
                if outcome.rate_limited:
                    s.rate_limited += 1
                if permit._epoch == s.epoch:
                    s.limit = max(1, s.limit // 2)
                    held_at = s.hold
                    s.ssthresh, s.acc, s.epoch, s.hold = s.limit, 0, s.epoch + 1, 0
                    if outcome.rate_limited and others > s.limit:
                        s.ssthresh = s.hold = min(others, config.ceiling)
                    same = s.hold > 0 and s.hold == held_at  # a probe found the same capacity again
                    s.plateau = min(s.plateau * 2, HOLD_ROUNDS_MAX) if same else HOLD_ROUNDS
                elif outcome.rate_limited and permit._epoch == s.epoch - 1 and s.limit < others < s.ssthresh:
                    s.ssthresh = s.hold = others
                if outcome.pause > 0:
                    s.paused_until = max(s.paused_until, now + outcome.pause)
            elif not outcome.failed:
                s.lat = outcome.latency if s.lat is None else s.lat + EWMA_ALPHA * (outcome.latency - s.lat)
                if outcome.tokens > 0:
                    s.tok = outcome.tokens if s.tok is None else s.tok + EWMA_ALPHA * (outcome.tokens - s.tok)
                s.limit, s.acc = _grow(s.limit, s.ssthresh, s.acc, in_flight, hold=s.hold, plateau=s.plateau)
                if s.limit < s.ssthresh:
                    estimate = _little(config, s.lat, s.tok)
                    if estimate is not None and estimate > s.limit:
                        s.limit = min(estimate, s.ssthresh)
                s.limit = max(1, min(s.limit, config.ceiling))
            correction = outcome.tokens - permit._tokens
            if config.tpm and not outcome.rate_limited and outcome.tokens > 0 and correction:
                sec = int(math.floor(now))
                s.tok_window[sec] = s.tok_window.get(sec, 0) + correction
            return held + max(0, s.limit - old_limit)

    def renew(self, permit: Permit) -> None:
        with self._lock:
            state = self._budget(permit.budget, permit._config)
            state.leases[permit.lane][permit.lease_id] = self.clock() + permit._config.lease_seconds

    def stats(self) -> list[dict[str, Any]]:
        with self._lock:
            now = self.clock()
            rows = []
            for budget in sorted(self._budgets):
                s = self._budgets[budget]
                n_i = sum(1 for e in s.leases["interactive"].values() if e > now)
                n_b = sum(1 for e in s.leases["bulk"].values() if e > now)
                waiting = sum(1 for e in s.waiter_exp.values() if e > now)
                rows.append(_stats_row(budget, self.name, s.limit, n_i, n_b, waiting, s.admitted,
                                       s.rate_limited, s.wait_sum_ms, s.wait_max_ms,
                                       max(0.0, s.paused_until - now)))
            return rows

    def close(self) -> None:
        pass


def _bulk_cap(limit: int, reserve: float) -> int:
    return max(1, math.floor((1 - reserve) * limit + _EPSILON))


def _grow(limit: int, ssthresh: int, acc: int, in_flight: int, *, hold: int = 0,
          plateau: int = HOLD_ROUNDS) -> tuple[int, int]:
    """Slow start below ``ssthresh`` (+1 a success), then additive increase (+1 per ``limit`` successes).

    ``hold``: the capacity the provider showed at its last 429; at that limit the increase
    waits ``plateau`` times longer (a plateau, not a probe above it every round).
    """
    if in_flight * 2 < limit:
        return limit, acc
    if limit < ssthresh:
        return limit + 1, acc
    acc += 1
    need = limit * plateau if limit == hold else limit
    return (limit + 1, 0) if acc >= need else (limit, acc)


def _little(config: BudgetConfig, latency: float | None, tokens: float | None) -> int | None:
    """Little's law: the concurrency the rpm/tpm quota sustains at the observed latency (x 0.85)."""
    if latency is None:
        return None
    estimates = []
    if config.rpm:
        estimates.append(config.rpm / 60 * latency)
    if config.tpm and tokens:
        estimates.append(config.tpm / 60 / tokens * latency)
    if not estimates:
        return None
    return math.floor(LITTLE_FACTOR * min(estimates) + _EPSILON)


def _window(buckets: dict[int, int], sec: int) -> tuple[int, list[tuple[int, int]]]:
    for old in [b for b in buckets if b <= sec - WINDOW_SECONDS]:
        del buckets[old]
    return sum(buckets.values()), sorted(buckets.items())


def _wait_for(buckets: list[tuple[int, int]], excess: int, now: float) -> float:
    """Seconds until the oldest buckets holding ``excess`` units leave the window."""
    freed = 0
    for second, value in buckets:
        freed += value
        if freed >= excess:
            return max(0.05, second + WINDOW_SECONDS - now)
    return float(WINDOW_SECONDS)


# --------------------------------------------------------------------------- governor

_STORE_ERRORS: tuple[type[BaseException], ...] = (OSError,)
try:
    import redis.exceptions as _redis_exceptions

    _STORE_ERRORS = (_redis_exceptions.RedisError, OSError)
except ImportError:  # pragma: no cover - redis is a dependency; local-only governors do not need it
    pass


class Governor:
    """Shared provider budgets. Thread-safe; create one per process and share it.

    ``redis_url`` None: a local, per-process governor only. ``clock`` (tests):
    seconds as a float; it replaces the Redis server clock in the scripts (so all
    governors sharing a budget must share it) and times the local store.
    ``reconnect_after``: seconds on the local fallback before Redis is tried again.
    """

    def __init__(self, redis_url: str | None, *, namespace: str = "evaljobs:gov",
                 clock: Callable[[], float] | None = None, reconnect_after: float = 30.0):
        self._local = _LocalStore(clock or time.monotonic)
        self._redis = _RedisStore(redis_url, namespace, clock) if redis_url else None
        self._configs: dict[str, BudgetConfig] = {}
        self._reconnect_after = reconnect_after
        self._lock = threading.Lock()
        self._down_until: float | None = None
        self._renewer = _Renewer()
        # Slots freed in this process so far, per budget (releases, a grown limit, cancelled waits).
        # A waiter told it is `ahead` slots from its turn sleeps until that many more were freed here:
        # only the waiter whose turn came is woken, not every waiting thread (a herd of Redis round
        # trips on each release delays the one that matters). Releases in other processes are seen
        # at the next poll.
        self._wakeup = threading.Lock()
        self._freed: dict[str, int] = {}
        self._sleepers: dict[str, list[tuple[int, int, threading.Event]]] = {}
        self._sleeper_ids = itertools.count()

    def __repr__(self) -> str:
        where = self._redis.location if self._redis else "local"
        return f"<Governor {where} backend={self.backend}>"

    @property
    def backend(self) -> str:
        """Where new permits come from now: ``"redis"``, or ``"local"`` (no Redis, or it is down)."""
        return self._current().name

    def configure(self, budget: str, config: BudgetConfig) -> None:
        """Set how ``budget`` behaves in this process (sent with every call: Redis needs no setup)."""
        _check_budget(budget)
        if not isinstance(config, BudgetConfig):
            raise TypeError(f"configure({budget!r}, ...) needs a BudgetConfig, not {type(config).__name__}")
        with self._lock:
            self._configs[budget] = config

    def config(self, budget: str) -> BudgetConfig:
        """The configuration of ``budget`` (defaults when it was never configured)."""
        return self._configs.get(budget) or _DEFAULT_CONFIG

    def acquire(self, budget: str, lane: str = "bulk", *, max_wait: float = 2.0, tokens: int = 0,
                keep_alive: bool = True) -> Permit:
        """A permit for one call against ``budget``, waiting at most ``max_wait`` seconds, else ``Busy``.

        ``tokens``: the call's expected tokens, for a ``tpm`` window (0: the moving average).
        ``keep_alive``: renew the lease in the background until the permit is released.
        """
        _check_budget(budget)
        if lane not in LANES:
            raise ValueError(f"governor lane must be one of {', '.join(LANES)}, not {lane!r}")
        if not isinstance(max_wait, (int, float)) or not max_wait >= 0:
            raise ValueError(f"governor max_wait must be a number of seconds >= 0, not {max_wait!r}")
        config = self.config(budget)
        lease_id = uuid.uuid4().hex
        started = time.monotonic()
        deadline = started + max_wait
        backoff = POLL_MIN
        queued_in: _RedisStore | _LocalStore | None = None
        permit: Permit | None = None
        try:
            while True:
                waited_ms = (time.monotonic() - started) * 1000.0
                with self._wakeup:
                    seen = self._freed.get(budget, 0)
                store, answer = self._attempt(budget, lane, lease_id, config, int(tokens), waited_ms)
                if queued_in is not None and queued_in is not store:
                    self._cancel(queued_in, budget, lane, lease_id)
                    queued_in = None
                if answer.granted:
                    permit = Permit(self, store.name, budget, lane, lease_id, answer.now, answer.epoch,
                                    answer.tokens, config, waited_ms / 1000.0)
                    if keep_alive:
                        self._renewer.add(permit)
                    return permit
                queued_in = store
                remaining = deadline - time.monotonic()
                exact = answer.reason != "limit"  # a pause or a window ends at a known time
                if remaining <= 0 or (exact and answer.retry_in > remaining):
                    raise Busy(budget, answer.retry_in, answer.reason)
                if exact:
                    pause, turn = answer.retry_in, 1
                else:
                    # Poll (for releases in other processes) often at the head of the line (about
                    # four times per expected wait), and about twice per expected wait further back.
                    turn = max(1, answer.ahead)
                    pause = backoff * (0.5 + random.random())
                    if turn > 1:
                        pause = max(pause, min(answer.retry_in / 2, SLEEP_CAP))
                    else:
                        pause = min(pause, max(POLL_MIN, answer.retry_in / 4))
                    backoff = min(backoff * 2, POLL_MAX)
                self._sleep(budget, seen + turn, max(0.0, min(pause, remaining, SLEEP_CAP)))
        finally:
            if permit is None and queued_in is not None:
                self._cancel(queued_in, budget, lane, lease_id)
                self._wake(budget)

    def stats(self) -> list[dict[str, Any]]:
        """One row per known budget (a set in Redis, never a key scan).

        Keys: budget, backend, limit, in_flight (and by lane), waiting, admitted,
        rate_limited, mean_wait_ms, max_wait_ms, paused_for (seconds).
        """
        store = self._current()
        if store is self._redis:
            try:
                rows = store.stats()
            except _STORE_ERRORS as exc:
                self._redis_failed(exc)
            else:
                self._redis_ok()
                return rows
        return self._local.stats()

    def close(self) -> None:
        """Stop the lease renewer and close the Redis connections (held permits then expire)."""
        self._renewer.stop()
        if self._redis is not None:
            self._redis.close()

    # -- internals

    def _current(self) -> _RedisStore | _LocalStore:
        if self._redis is None:
            return self._local
        with self._lock:
            if self._down_until is not None and time.monotonic() < self._down_until:
                return self._local
        return self._redis

    def _attempt(self, budget: str, lane: str, lease_id: str, config: BudgetConfig, tokens: int,
                 waited_ms: float) -> tuple[_RedisStore | _LocalStore, _Answer]:
        store = self._current()
        if store is self._redis:
            try:
                answer = store.try_acquire(budget, lane, lease_id, config, tokens, waited_ms)
            except _STORE_ERRORS as exc:
                self._redis_failed(exc)
            else:
                self._redis_ok()
                return store, answer
        return self._local, self._local.try_acquire(budget, lane, lease_id, config, tokens, waited_ms)

    def _cancel(self, store: _RedisStore | _LocalStore, budget: str, lane: str, lease_id: str) -> None:
        try:
            store.cancel_wait(budget, lane, lease_id)
        except _STORE_ERRORS as exc:  # the queue entry expires within WAITER_TTL anyway
            self._redis_failed(exc)

    def _on_permit_store(self, permit: Permit, operation: Callable[[Any], Any]) -> Any:
        """``operation(store)`` on the store holding ``permit``'s lease; None when that store is down."""
        if permit.backend == "local":
            return operation(self._local)
        if self._current() is not self._redis:
            return None  # Redis is down: the lease expires there by itself
        try:
            return operation(self._redis)
        except _STORE_ERRORS as exc:
            self._redis_failed(exc)
            return None

    def _release(self, permit: Permit, outcome: _Outcome) -> None:
        self._renewer.discard(permit)
        freed = self._on_permit_store(permit, lambda store: store.release(permit, outcome))
        self._wake(permit.budget, max(1, freed or 0))  # unknown (store down): wake the next waiter anyway

    def _wake(self, budget: str, slots: int = 1) -> None:
        """``slots`` of ``budget`` were freed in this process: wake the waiters whose turn that is."""
        with self._wakeup:
            freed = self._freed[budget] = self._freed.get(budget, 0) + slots
            sleepers = self._sleepers.get(budget)
            while sleepers and sleepers[0][0] <= freed:
                heapq.heappop(sleepers)[2].set()

    def _sleep(self, budget: str, until_freed: int, timeout: float) -> None:
        """Sleep until ``until_freed`` slots of ``budget`` were freed in this process, or ``timeout`` s."""
        with self._wakeup:
            if self._freed.get(budget, 0) >= until_freed:
                return
            entry = (until_freed, next(self._sleeper_ids), threading.Event())
            heapq.heappush(self._sleepers.setdefault(budget, []), entry)
        if not entry[2].wait(timeout):
            with self._wakeup:
                sleepers = self._sleepers.get(budget, [])
                if entry in sleepers:
                    sleepers.remove(entry)
                    heapq.heapify(sleepers)

    def _renew(self, permit: Permit) -> None:
        permit._renew_at = time.monotonic() + permit._config.lease_seconds / 2
        self._on_permit_store(permit, lambda store: store.renew(permit))

    def _redis_failed(self, exc: BaseException) -> None:
        with self._lock:
            first = self._down_until is None
            self._down_until = time.monotonic() + self._reconnect_after
        if first:
            log.warning("governor: Redis at %s unavailable (%s: %s); using a local per-process governor, "
                        "retrying Redis every %gs", self._redis.location if self._redis else "?",
                        type(exc).__name__, exc, self._reconnect_after)

    def _redis_ok(self) -> None:
        if self._down_until is None:
            return
        with self._lock:
            was_down, self._down_until = self._down_until is not None, None
        if was_down:
            log.info("governor: Redis at %s is back; budgets are shared again",
                     self._redis.location if self._redis else "?")


_DEFAULT_CONFIG = BudgetConfig()


def _check_budget(budget: Any) -> None:
    if not isinstance(budget, str) or not budget:
        raise ValueError(f"governor budget must be a non-empty string like 'openai:gpt-4o-mini', "
                         f"not {budget!r}")


class _Renewer:
    """One daemon thread per governor renewing held permits every ``lease_seconds / 2``.

    Permits are held weakly: a permit dropped without ``release()`` stops being
    renewed and its lease expires, like a dead worker's.
    """

    def __init__(self) -> None:
        self._permits: weakref.WeakSet[Permit] = weakref.WeakSet()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, permit: Permit) -> None:
        with self._cond:
            self._permits.add(permit)
            if self._thread is None or not self._thread.is_alive():
                self._stopped = False
                self._thread = threading.Thread(target=self._run, name="evaljobs-governor-renewer",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def discard(self, permit: Permit) -> None:
        with self._cond:
            self._permits.discard(permit)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._permits.clear()
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                permits = list(self._permits)
                due = [p for p in permits if p._renew_at <= now]
                if not due:
                    later = [p._renew_at for p in permits]
                    self._cond.wait(timeout=min(later) - now if later else None)
                    continue
            for permit in due:
                try:
                    permit.renew()
                except Exception:  # noqa: BLE001 - a failed renewal must not kill the renewer
                    log.debug("governor: renewing %r failed", permit, exc_info=True)
