"""The shared store: budget state in Redis, every change one Lua script timed by the Redis clock."""
from __future__ import annotations

from typing import Any, Callable, cast

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from evaljobs.governor.budgets import (HOLD_ROUNDS, HOLD_ROUNDS_MAX, INTERACTIVE_RECENT, SCOUT_SECONDS,
                                                 WAITER_TTL, BudgetConfig, Learned, _Answer, _Outcome,
                                                 _stats_row)
from evaljobs.governor.permits import Permit
from evaljobs.redact import redact


_TIME = """
local now
if ARGV[{i}] ~= '' then now = tonumber(ARGV[{i}]) else
  local t = redis.call('TIME'); now = tonumber(t[1]) + tonumber(t[2]) / 1000000 end
"""

# KEYS: state, lease:interactive, lease:bulk, wait:interactive, wait:bulk, waitexp, req, tok, budgets
# ARGV: budget, lane, lease_id, waiter_id, now|'', start limit, ceiling, rpm|0, tpm|0, reserve, lease_s,
#       tokens, waited_ms, waiter_ttl, start ssthresh, start hold, start plateau, interactive_recent,
#       scout seconds (0: a start that needs no scout)
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
  redis.call('HSET', st, 'limit', limit, 'ssthresh', ARGV[15], 'hold', ARGV[16], 'plateau', ARGV[17],
             'epoch', 0, 'acc', 0)
  local scout = tonumber(ARGV[19]) or 0
  if scout > 0 then
    -- a cold start: one call goes first; its answer's rate-limit headers size the budget
    redis.call('HSET', st, 'opens_at', limit, 'scout_until', string.format('%.6f', now + scout))
    limit = 1
    redis.call('HSET', st, 'limit', limit)
  end
end
local scout_until = tonumber(redis.call('HGET', st, 'scout_until')) or 0
if scout_until > 0 and now >= scout_until then
  -- no answer in time: open blind, where the budget would have started
  limit = math.max(limit, tonumber(redis.call('HGET', st, 'opens_at')) or limit)
  redis.call('HSET', st, 'limit', limit, 'scout_until', 0)
end
if limit > ceiling then
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
if lane == 'interactive' then redis.call('HSET', st, 'interactive_at', string.format('%.6f', now)) end
local paused = tonumber(redis.call('HGET', st, 'paused_until')) or 0
if paused > now then return deny('paused', paused - now) end
local rank = redis.call('ZRANK', queue, waiter)
if not rank then rank = redis.call('ZCARD', queue) end
local free = limit - n_i - n_b
if lane == 'bulk' then
  -- the reserve is held back only while the interactive lane is in use (a call in flight or recent)
  local seen = tonumber(redis.call('HGET', st, 'interactive_at'))
  if n_i == 0 and not (seen and now - seen < tonumber(ARGV[18])) then reserve = 0 end
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
# ARGV: lane, lease_id, now|'', start limit, ceiling, epoch, rate_limited, spent, pause, failed, tokens,
#       reserved, latency, rpm|0, tpm|0, hold_rounds, hold_rounds_max, announced request limit|0
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
local announced = tonumber(ARGV[18]) or 0
if announced > 0 then redis.call('HSET', st, 'announced', announced) end
local cap = tonumber(redis.call('HGET', st, 'announced')) or 0
if (tonumber(redis.call('HGET', st, 'scout_until')) or 0) > 0 then
  -- the scout's answer: open at the announced limit, else where the budget would have started
  redis.call('HSET', st, 'scout_until', 0)
  if announced > 0 then limit = math.min(announced, ceiling)
  elseif not (rate_limited or spent) then
    limit = math.max(limit, tonumber(redis.call('HGET', st, 'opens_at')) or limit)
  end
end
if rate_limited or spent then
  if rate_limited then redis.call('HINCRBY', st, 'rate_limited', 1) end
  local granted_in = tonumber(ARGV[6])
  if granted_in == epoch then
    local held_at = hold
    -- halve the width in use (a limit above it was never tested), once per burst
    limit = math.max(1, math.floor(math.min(limit, in_flight) / 2)); ssthresh = limit; acc = 0
    epoch = epoch + 1; hold = 0
    redis.call('HSET', st, 'halved', limit)
    if rate_limited and others > limit then
      ssthresh = math.min(others, ceiling); hold = ssthresh
    end
    -- a probe above the held level that finds the same capacity: hold twice as long next time
    if hold > 0 and hold == held_at then plateau = math.min(plateau * 2, hold_max)
    else plateau = hold_rounds end
  elseif rate_limited and granted_in == epoch - 1 and hold > 0 then
    if others == 0 then
      -- every call of the burst was refused: no capacity shown (a quota, not a concurrency cap)
      local halved = tonumber(redis.call('HGET', st, 'halved')) or limit
      hold = 0; ssthresh = halved; limit = math.max(limit, halved)
    elseif others < hold then
      -- a later 429 of the burst: the provider refused while serving fewer of ours; never stay above it
      ssthresh = others; hold = others; limit = math.min(limit, others)
    end
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
-- never wider than the request limit the provider announced
if cap > 0 then limit = math.max(1, math.min(limit, cap)) end
if tpm > 0 and not rate_limited and tokens > 0 and tokens ~= reserved then
  redis.call('HINCRBY', KEYS[4], math.floor(now), tokens - reserved)
  redis.call('EXPIRE', KEYS[4], 120)
end
redis.call('HSET', st, 'limit', limit, 'ssthresh', ssthresh, 'epoch', epoch, 'acc', acc, 'hold', hold,
           'plateau', plateau)
return {held, limit, epoch, held + math.max(0, limit - old_limit), ssthresh, hold, plateau}
"""

# KEYS: lease key;  ARGV: lease_id, now|'', lease_s
_RENEW = _TIME.format(i=2) + """
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1
"""

# KEYS: state, lease:interactive, lease:bulk, waitexp, wait:interactive, wait:bulk;  ARGV: now|''
_STATS = _TIME.format(i=1) + """
local st = KEYS[1]
local function num(field) return redis.call('HGET', st, field) or '0' end
local paused = tonumber(num('paused_until')) - now
if paused < 0 then paused = 0 end
local function live_waiters(queue)
  local n = 0
  for _, waiter in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
    local expiry = redis.call('ZSCORE', KEYS[4], waiter)
    if expiry and tonumber(expiry) > now then n = n + 1 end
  end
  return n
end
return {num('limit'), redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'),
        redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf'), redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf'),
        num('admitted'), num('rate_limited'), num('wait_sum_ms'), num('wait_max_ms'),
        string.format('%.6f', paused), live_waiters(KEYS[5]), live_waiters(KEYS[6])}
"""


def _answer(reply: list[Any]) -> _Answer:
    granted, reason, retry_in, now, limit, epoch, est, ahead = reply
    return _Answer(granted=bool(int(granted)), reason=reason, retry_in=float(retry_in), now=float(now),
                   limit=int(limit), epoch=int(epoch), tokens=int(est), ahead=int(ahead))


def _released(reply: list[Any]) -> tuple[int, Learned]:
    _, limit, _, freed, ssthresh, hold, plateau = reply
    return int(freed), Learned(int(limit), int(ssthresh), int(hold), int(plateau))


class _RedisStore:
    """The shared store: every operation is one Lua script (or one ZREM) against Redis."""

    name = "redis"

    def __init__(self, url: str, namespace: str, clock: Callable[[], float] | None):
        # No client-side retries: a script must not run twice, and a down Redis must fail fast
        # (the governor falls back to its local store instead of waiting).
        self.client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=0.5,
                                           retry=Retry(NoBackoff(), 0), decode_responses=True)
        self.namespace = namespace
        self.clock = clock
        self.location = redact(url)
        self._acquire = self.client.register_script(_ACQUIRE)
        self._release = self.client.register_script(_RELEASE)
        self._renew = self.client.register_script(_RENEW)
        self._stats = self.client.register_script(_STATS)

    def _now(self) -> str:
        return "" if self.clock is None else repr(float(self.clock()))

    def _key(self, budget: str, part: str) -> str:
        return f"{self.namespace}:{{{budget}}}:{part}"

    def try_acquire(self, budget: str, lane: str, lease_id: str, config: BudgetConfig, tokens: int,
                    waited_ms: float, start: Learned) -> _Answer:
        keys, args = self._acquire_keys_args(budget, lane, lease_id, config, tokens, waited_ms, start)
        return _answer(self._acquire(keys=keys, args=args))

    def acquire_command(self, budget: str, lane: str, lease_id: str, config: BudgetConfig, tokens: int,
                        start: Learned) -> tuple[Any, ...]:
        """:meth:`try_acquire` as a raw ``EVALSHA`` for another client's pipeline (one round trip shared).

        Raw, not a ``Script`` in a pipeline: redis-py checks ``SCRIPT EXISTS`` first, a round trip of
        its own. A ``NOSCRIPT`` reply (a restarted or flushed Redis) goes to :meth:`acquire_reply`.
        """
        keys, args = self._acquire_keys_args(budget, lane, lease_id, config, tokens, 0.0, start)
        return ("EVALSHA", self._acquire.sha, len(keys), *keys, *args)

    def acquire_reply(self, reply: Any) -> _Answer | None:
        """The answer in a reply to :meth:`acquire_command`; None (script loaded for next time) on NOSCRIPT.

        Raises the reply when it is another error (the caller treats it like a failed ``try_acquire``).
        """
        if isinstance(reply, redis.exceptions.NoScriptError):
            self.client.script_load(_ACQUIRE)
            return None
        if isinstance(reply, Exception):
            raise reply
        return _answer([item.decode() if isinstance(item, bytes) else item for item in reply])

    def _acquire_keys_args(self, budget: str, lane: str, lease_id: str, config: BudgetConfig, tokens: int,
                           waited_ms: float, start: Learned) -> tuple[list[str], list[Any]]:
        k = self._key
        keys = [k(budget, "state"), k(budget, "lease:interactive"), k(budget, "lease:bulk"),
                k(budget, "wait:interactive"), k(budget, "wait:bulk"), k(budget, "waitexp"),
                k(budget, "req"), k(budget, "tok"), f"{self.namespace}:budgets"]
        args = [budget, lane, lease_id, lease_id, self._now(), start.limit, config.ceiling,
                config.rpm or 0, config.tpm or 0, repr(float(config.bulk_reserve)),
                repr(float(config.lease_seconds)), int(tokens), f"{waited_ms:.3f}", repr(WAITER_TTL),
                start.ssthresh, start.hold, start.plateau, repr(INTERACTIVE_RECENT),
                repr(SCOUT_SECONDS if start.scout else 0.0)]
        return keys, args

    def cancel_wait(self, budget: str, lane: str, lease_id: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(self._key(budget, f"wait:{lane}"), lease_id)
        pipe.zrem(self._key(budget, "waitexp"), lease_id)
        pipe.execute()

    def release(self, permit: Permit, outcome: _Outcome) -> tuple[int, Learned]:
        """Give the slot back: (slots that freed — a grown limit frees more than one, the learned state)."""
        keys, args = self._release_keys_args(permit, outcome)
        return _released(self._release(keys=keys, args=args))

    def release_command(self, permit: Permit, outcome: _Outcome) -> tuple[Any, ...]:
        """:meth:`release` as a raw ``EVALSHA`` for another client's pipeline (see
        :meth:`acquire_command`)."""
        keys, args = self._release_keys_args(permit, outcome)
        return ("EVALSHA", self._release.sha, len(keys), *keys, *args)

    def release_reply(self, reply: Any) -> tuple[int, Learned] | None:
        """What :meth:`release` returns, from a reply to :meth:`release_command`; None on NOSCRIPT (loaded
        now)."""
        if isinstance(reply, redis.exceptions.NoScriptError):
            self.client.script_load(_RELEASE)
            return None
        if isinstance(reply, Exception):
            raise reply
        return _released(reply)

    def _release_keys_args(self, permit: Permit, outcome: _Outcome) -> tuple[list[str], list[Any]]:
        k, budget, config = self._key, permit.budget, permit._config
        keys = [k(budget, "state"), k(budget, "lease:interactive"), k(budget, "lease:bulk"), k(budget, "tok")]
        args = [permit.lane, permit.lease_id, self._now(), permit._start.limit, config.ceiling, permit._epoch,
                int(outcome.rate_limited), int(outcome.spent), repr(outcome.pause), int(outcome.failed),
                outcome.tokens, permit._tokens, repr(outcome.latency), config.rpm or 0, config.tpm or 0,
                HOLD_ROUNDS, HOLD_ROUNDS_MAX, int(outcome.announced)]
        return keys, args

    def renew(self, permit: Permit) -> None:
        self._renew(keys=[self._key(permit.budget, f"lease:{permit.lane}")],
                    args=[permit.lease_id, self._now(), repr(float(permit._config.lease_seconds))])

    def stats(self) -> list[dict[str, Any]]:
        # str members: the client decodes responses, which redis-py's types cannot know
        budgets = sorted(cast("set[str]", self.client.smembers(f"{self.namespace}:budgets")))
        pipe = self.client.pipeline(transaction=False)
        for budget in budgets:
            k = self._key
            self._stats(keys=[k(budget, "state"), k(budget, "lease:interactive"), k(budget, "lease:bulk"),
                              k(budget, "waitexp"), k(budget, "wait:interactive"), k(budget, "wait:bulk")],
                        args=[self._now()], client=pipe)
        rows = pipe.execute() if budgets else []
        out = []
        for budget, row in zip(budgets, rows):
            limit, n_i, n_b, waiting, admitted, rate_limited, wait_sum, wait_max, paused, w_i, w_b = row
            out.append(_stats_row(budget, self.name, int(float(limit)), int(n_i), int(n_b), int(waiting),
                                  int(float(admitted)), int(float(rate_limited)), float(wait_sum),
                                  float(wait_max), float(paused), waiting_by_lane=(int(w_i), int(w_b))))
        return out

    def close(self) -> None:
        self.client.close()
