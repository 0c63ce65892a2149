"""`evaljobs status`: active runs, queue depths, workers, governor and pools — from a real Redis."""
from __future__ import annotations

import json

import pytest
import redis as redis_lib

from evaljobs.pipeline import broker, events
from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.cli import Group
from evaljobs.cli.ops import status as status_command
from evaljobs.governor import Governor
from evaljobs.evaluation.result import Result
from evaljobs.workers.status import collect, render
from evaljobs.reports.build import build_report
from helpers import free_port

CATALOG = "name: st\nscenarios:\n" + "".join(
    f"  - key: k{i}\n    prompt: \"[sim: say {i}]\"\n" for i in range(4))


@pytest.fixture
def db(tmp_path, monkeypatch) -> str:
    url = f"sqlite:///{tmp_path}/status.db"
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", url)
    store.connect(url)
    return url


def runs_in_every_state() -> tuple[store.RunInfo, store.RunInfo, store.RunInfo]:
    cat = loads_catalog(CATALOG, source="st.yaml")
    running = store.create_run(cat, ["sim/a", "sim/b"], strategy="fanout")
    store.mark_running(running.id)
    store.record_result(running.id, Result("k0", "sim/a", "passed", score=1.0))
    store.record_result(running.id, Result("k1", "sim/a", "failed"))
    store.record_result(running.id, Result.errored("k2", "sim/a", "down"))
    pending = store.create_run(cat, ["sim/a"], strategy="per-model")
    done = store.create_run(cat, ["sim/a"], strategy="fanout")
    for key in cat.keys:
        store.record_result(done.id, Result(key, "sim/a", "passed"))
    store.finalize(done.id, build_report)
    return running, pending, done


def test_memory_broker_shows_active_runs_and_says_there_are_no_shared_queues(db):
    running, pending, done = runs_in_every_state()
    status = collect("memory")
    assert [r.id for r in status.runs] == [pending.id, running.id]  # newest first, finished ones left out
    mine = status.runs[1]
    assert (mine.status, mine.expected, mine.persisted, mine.passed, mine.failed, mine.errored) == \
        ("running", 8, 3, 1, 1, 1)
    assert status.queues is None and status.workers is None
    assert status.notes == ["in-process broker: no shared queues (each `evaljobs run` has its own workers)"]
    text = render(status)
    assert "runs: 2 active" in text and f"{running.id}" in text and "3/8" in text and done.id not in text


@pytest.mark.redis
def test_redis_queue_depths_workers_governor_and_pools(cli, db, redis_url):
    running, _, _ = runs_in_every_state()
    binding = broker.configure(redis_url)
    client = redis_lib.Redis.from_url(redis_url)
    gov = Governor(redis_url)
    try:
        actors = binding.actors
        for i in range(5):
            actors.start_run.send(f"r_ready{i}")
        actors.finalize_run.send_with_options(args=("r_later",), delay=60_000)
        # A consumer (what a worker thread runs) fetches two: one it holds, one it dead-letters.
        consumer = binding.broker.consume(binding.queue, prefetch=2, timeout=100)
        held = next(consumer)
        dead = next(consumer)
        consumer.nack(dead)
        assert held is not None and dead is not None
        with gov.acquire("sim:fast", "bulk"):
            pass
        seconds, micros = client.time()
        server_now = seconds + micros / 1e6
        client.hset("evaljobs:pools", "box:42", json.dumps({
            "id": "box:42", "lane": "bulk", "members": 3, "busy": 2, "min": 1, "max": 8, "started": 17,
            "queues": ["interactive-q"], "updated_at": server_now}))

        status = collect(redis_url, queues=["extra"], window=30)

        queues = {q.name: q for q in status.queues}
        assert list(queues) == ["agents", "extra", "interactive-q"]
        agents = queues["agents"]
        assert (agents.ready, agents.in_flight, agents.delayed, agents.dead_lettered) == (3, 1, 1, 1)
        assert (queues["extra"].ready, queues["extra"].dead_lettered) == (0, 0)
        assert len(status.workers) == 1 and status.workers[0].holding == 1  # this process's broker id
        assert status.workers[0].seen_ago < 30
        assert [g["budget"] for g in status.governor] == ["sim:fast"] and status.governor[0]["admitted"] == 1
        assert [(p["id"], p["members"], p["busy"]) for p in status.pools] == [("box:42", 3, 2)]
        assert [r.id for r in status.runs][-1] == running.id and status.notes == []

        text = render(status)
        assert "QUEUE" in text and "agents" in text and "interactive-q" in text
        assert "workers seen in the last 30 s: 1 (1 holding messages)" in text
        assert "sim:fast" in text and "box:42" in text

        group = Group(commands={"status": status_command})
        out = cli("status", "--json", "--broker", redis_url, command=group)
        assert out.exit_code == 0, out.output
        data = json.loads(out.output)
        assert data["queues"][0] == {"name": "agents", "ready": 3, "in_flight": 1, "delayed": 1,
                                     "dead_lettered": 1}
        assert data["runs"][-1]["id"] == running.id and data["broker"] == redis_url
        consumer.close()
    finally:
        gov.close()
        client.close()
        binding.broker.close()
        events.bind_redis(None)  # later tests follow runs in-process


@pytest.mark.redis
def test_workers_outside_the_window_are_not_listed(db, redis_url):
    client = redis_lib.Redis.from_url(redis_url)
    import time

    now_ms = time.time() * 1000
    client.zadd("dramatiq:__heartbeats__", {"fresh": now_ms - 1000, "stale": now_ms - 120_000})
    status = collect(redis_url, window=60)
    assert [w.id for w in status.workers] == ["fresh"] and status.workers[0].holding == 0
    client.close()


def test_unreachable_redis_still_shows_the_runs_and_says_what_failed(cli, db):
    running, _, _ = runs_in_every_state()
    url = f"redis://127.0.0.1:{free_port()}/0"
    group = Group(commands={"status": status_command})
    out = cli("status", "--broker", url, command=group)
    assert out.exit_code == 2, out.output  # what it could read is shown, and a monitor still sees the outage
    assert running.id in out.output
    assert f"note: cannot read {url}:" in out.output and "Traceback" not in out.output


def test_render_governor_and_pools_tables_line_up_under_their_headers():
    from evaljobs.workers.status import Status
    status = Status(broker="redis://x", runs=[], queues=[], workers=None, window=30,
                    governor=[{"budget": "openai:acct", "limit": 8, "in_flight": 3, "waiting": 1,
                               "admitted": 120, "rate_limited": 2, "mean_wait_ms": 41.6}],
                    pools=[{"id": "p1", "lane": "bulk", "members": 3, "busy": 2, "min": 1, "max": 8,
                            "started": 5}], notes=[])
    lines = render(status).splitlines()
    gov_header = next(line for line in lines if line.startswith("governor: "))
    gov_row = lines[lines.index(gov_header) + 1]
    # Each right-aligned value ends where its header ends.
    for header, value in (("LIMIT", "8"), ("ADMITTED", "120"), ("429s", "2"), ("MEAN WAIT", "42ms")):
        end = gov_header.index(header) + len(header)
        assert gov_row[:end].endswith(value), (header, gov_row)
    assert gov_row.startswith(" " * len("governor: ") + "openai:acct")
    pool_header = next(line for line in lines if line.startswith("pools: "))
    pool_row = lines[lines.index(pool_header) + 1]
    assert pool_row.startswith(" " * len("pools: ") + "p1")
    assert pool_row[pool_header.index("LANE"):].startswith("bulk")
    assert pool_row[:pool_header.index("STARTED") + len("STARTED")].endswith("5")
    status.governor, status.pools = [], []
    text = render(status)
    assert "governor: no budgets yet" in text and "pools: none running" in text
