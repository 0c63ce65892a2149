"""The heartbeat script hands a dead evaljobs process's unacked messages back by name (no KEYS), and leaves
everything else alone (evaljobs/pipeline/heartbeats.py)."""
from __future__ import annotations

import pytest
import redis as redis_lib
from dramatiq.common import current_millis

from evaljobs.config import Settings
from evaljobs.pipeline.broker import make_broker
from evaljobs.pipeline.heartbeats import period

NS = "dramatiq"


def _held(client, worker: str, queue: str, ids: list[str], *, stored: bool = True) -> None:
    """``worker`` fetched ``ids`` from ``queue`` and did not ack them (Dramatiq's layout)."""
    for message_id in ids:
        client.sadd(f"{NS}:__acks__.{worker}.{queue}", message_id)
        if stored:
            client.hset(f"{NS}:{queue}.msgs", message_id, b"{}")


@pytest.mark.redis
def test_a_beat_hands_back_a_dead_processes_messages_on_every_queue_it_registered(redis_url):
    client = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    broker = make_broker(redis_url, settings=Settings(heartbeat_timeout_ms=10_000))
    try:
        long_ago = current_millis() - 60_000
        # A dead evaljobs worker: its last beat a minute ago, its queues registered, messages held on two.
        client.zadd(f"{NS}:__evaljobs_heartbeats__", {"dead": long_ago})
        now = current_millis()
        client.zadd(f"{NS}:__heartbeats__", {"dead": long_ago, "foreign": long_ago, "alive": now})
        client.hset(f"{NS}:__evaljobs_queues__", "dead", "lane-a,lane-a.DQ,lane-b")
        _held(client, "dead", "lane-a", ["a1", "a2"])
        _held(client, "dead", "lane-a.DQ", ["d1"])
        _held(client, "dead", "lane-b", ["gone"], stored=False)  # acked meanwhile by a redelivery: not pushed
        # Another Dramatiq application's dead worker: not ours to reap (its own maintenance does).
        _held(client, "foreign", "theirs", ["f1"])
        # A live evaljobs process holding a message: untouched.
        client.zadd(f"{NS}:__evaljobs_heartbeats__", {"alive": current_millis()})
        client.hset(f"{NS}:__evaljobs_queues__", "alive", "lane-a")
        _held(client, "alive", "lane-a", ["busy"])

        assert broker.heart.beat(force=True) == (3, 1)

        assert sorted(client.lrange(f"{NS}:lane-a", 0, -1)) == ["a1", "a2"]
        assert client.lrange(f"{NS}:lane-a.DQ", 0, -1) == ["d1"]
        assert client.llen(f"{NS}:lane-b") == 0
        for queue in ("lane-a", "lane-a.DQ", "lane-b"):
            assert not client.exists(f"{NS}:__acks__.dead.{queue}")
        assert client.zscore(f"{NS}:__heartbeats__", "dead") is None  # forgotten everywhere
        assert client.zscore(f"{NS}:__evaljobs_heartbeats__", "dead") is None
        assert client.hget(f"{NS}:__evaljobs_queues__", "dead") is None
        assert client.smembers(f"{NS}:__acks__.foreign.theirs") == {"f1"}
        assert client.zscore(f"{NS}:__heartbeats__", "foreign") is not None
        assert client.smembers(f"{NS}:__acks__.alive.lane-a") == {"busy"}
        # The beating process registered itself, in both heartbeat sets.
        assert client.zscore(f"{NS}:__evaljobs_heartbeats__", broker.broker_id) is not None
        assert client.zscore(f"{NS}:__heartbeats__", broker.broker_id) is not None
        assert broker.heart.beat() is None  # throttled: the next is due a period later
    finally:
        broker.close()
        client.close()


def test_a_process_beats_five_times_per_heartbeat_timeout():
    assert period(10_000) == 2.0 and period(2_500) == 0.5
