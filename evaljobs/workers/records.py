"""Pool records: each elastic pool's live state in the Redis hash ``evaljobs:pools``.

A pool (:mod:`evaljobs.workers.pool`) rewrites its record every second, timed by
the Redis server clock so hosts agree on its age; readers (``evaljobs status``)
get the live ones and remove records a killed pool left behind.
"""
from __future__ import annotations

import json
from typing import Any

STATE_KEY = "evaljobs:pools"
#: Records not refreshed for this many seconds belong to dead pools: readers ignore and remove them.
STATE_MAX_AGE = 30.0

# Deletes a pool's record only if it is still the (stale) value the reader saw.
_DELETE_IF_SAME = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
"""


def _server_time(client) -> float:
    """The Redis server's clock, so that records written and read on different hosts agree on age."""
    seconds, micros = client.time()
    return seconds + micros / 1e6


def read_pools(client, *, max_age: float = STATE_MAX_AGE) -> list[dict[str, Any]]:
    """The live pools' records (``evaljobs status``), oldest id first; removes records older than ``max_age``.

    ``client`` is a ``redis.Redis``. A record is stale when its pool has not
    rewritten it for ``max_age`` seconds of the Redis server's clock (the pool
    was killed or lost Redis); it is deleted only if nobody refreshed it meanwhile.
    """
    now = _server_time(client)
    live, stale = [], []
    for field_name, raw in client.hgetall(STATE_KEY).items():
        try:
            record = json.loads(raw)
            age = now - float(record["updated_at"])
        except (ValueError, KeyError, TypeError):
            stale.append((field_name, raw))
            continue
        if age > max_age:
            stale.append((field_name, raw))
        else:
            record["age"] = round(max(0.0, age), 3)
            live.append(record)
    if stale:
        script = client.register_script(_DELETE_IF_SAME)
        for field_name, raw in stale:
            script(keys=[STATE_KEY], args=[field_name, raw])
    return sorted(live, key=lambda r: str(r.get("id")))


__all__ = ["read_pools", "STATE_KEY", "STATE_MAX_AGE"]
