"""Issue 44, item 3: an idle worker process is quiet on Redis (at most 10 commands a second).

A real ``evaljobs worker`` process on a private ``redis-server`` (so every command counted is the
worker's), with the default heartbeat: once its consumers wait on their queues, Redis's own
``INFO commandstats`` is read before and after a 10 s window. The counts include the commands Lua
scripts run inside Redis (the heartbeat's), so they are what Redis does, not only what is sent.
Before this change an idle worker polled its two queues every 20 ms: 1,276 commands in 10 s.
"""
from __future__ import annotations

import time

import pytest
import redis as redis_lib

from helpers import WorkerProcess, wait_until
from helpers.servers import RedisServer

#: The acceptance bound: commands a second of one idle worker process.
IDLE_BOUND = 10.0
WINDOW = 10.0


def commands(client: redis_lib.Redis) -> dict[str, int]:
    """Calls per command since Redis started (``INFO commandstats``), the test's own INFO left out."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()
            if name != "cmdstat_info"}


def _ready(client: redis_lib.Redis, log) -> bool:
    """The worker process said it is ready (its consumers started; a pool: its members) and has been seen
    on Redis."""
    text = log.read_text() if log.exists() else ""
    said = "ready for action" in text or "members on agents" in text
    return said and client.zcard("dramatiq:__heartbeats__") > 0


@pytest.mark.redis
@pytest.mark.parametrize("shape", [["--threads", "1"], ["--threads", "8"], ["--min", "1", "--max", "4"]],
                         ids=["threads1", "threads8", "pool"])
def test_an_idle_worker_process_costs_at_most_ten_redis_commands_a_second(shape, tmp_path):
    """A fixed worker (1 and 8 threads) and an elastic pool (its controller looked at the backlog every
    50 ms: 47 commands a second) at rest."""
    with RedisServer() as server:
        client = redis_lib.Redis.from_url(server.url, decode_responses=True)
        worker = WorkerProcess(server.url, f"sqlite:///{tmp_path}/evaljobs.db", log=tmp_path / "worker.log")
        worker.args = [*worker.args[:4], *shape]  # python -m evaljobs worker + the shape
        worker.env.pop("EVALJOBS_HEARTBEAT_TIMEOUT_MS", None)  # the defaults are what this test measures
        log = tmp_path / "worker.log"
        with worker:
            assert wait_until(lambda: _ready(client, log), 60), log.read_text()
            before, started = commands(client), time.monotonic()
            time.sleep(WINDOW)  # the window the rate is measured over: nothing to wait for, by design
            after, elapsed = commands(client), time.monotonic() - started
            assert worker.proc is not None and worker.proc.poll() is None, log.read_text()
        client.close()
    spent = {name: after[name] - before.get(name, 0) for name in after if after[name] > before.get(name, 0)}
    rate = sum(spent.values()) / elapsed
    print(f"BENCH idle worker {' '.join(shape)}: {sum(spent.values())} Redis commands in {elapsed:.1f} s "
          f"({rate:.1f}/s): {spent}")
    assert rate <= IDLE_BOUND, spent
    assert "keys" not in spent and "scan" not in spent  # invariant 9, Lua included
