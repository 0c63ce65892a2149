"""The raw stack: the same per-pair message, provider call and insert with no evaluation code.

The comparison point of the zero-latency throughput figure (issue 20): plain Dramatiq (its
``RedisBroker`` and default middleware) + Redis + ``sqlite3`` + ``httpx``. Per pair, one message
``raw_pair(run, i, expected)`` whose worker thread makes one chat-completions call to the
simulated provider (an ``httpx.Client`` per thread), then in one SQLite transaction inserts the answer
(``INSERT OR IGNORE`` on ``UNIQUE(run, i)``) and counts the run's rows — the least a barrier can
do — and the thread that stores the last row pushes to a Redis list the driver waits on. No
catalog, grading, governor, context, crash counting, events, report.

    python -m evaljobs.bench.raw_stack serve BROKER DB SIM_URL QUEUE THREADS   (a worker process)

:func:`measure_raw_stack` starts ``processes`` such workers, sends ``pairs`` messages per repeat
(``actor.send``, one by one, as a Dramatiq user would) and times send → last row. ``scripts/bench
raw-stack`` runs it beside ``evaljobs bench``'s fan-out cell on the same Redis, provider settings
and machine (:func:`compare`). Settings come as arguments: nothing here reads the environment.
"""
from __future__ import annotations

import json
import secrets
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from evaljobs import bench  # the faces only: a raw-stack worker (`serve`) loads none of evaljobs' code

#: How long a worker process may take to say it is ready.
READY_TIMEOUT = 60.0
_READY = "raw-stack worker ready"
_SCHEMA = ("CREATE TABLE IF NOT EXISTS results (run TEXT NOT NULL, i INTEGER NOT NULL, answer TEXT NOT NULL, "
           "UNIQUE(run, i))")


def _done_key(run_id: str) -> str:
    return f"rawstack:done:{run_id}"


def open_db(path: str) -> sqlite3.Connection:
    """A connection as the store opens SQLite: WAL, synchronous NORMAL, a busy timeout."""
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=wal")
    conn.execute("PRAGMA synchronous=normal")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute(_SCHEMA)
    return conn


class _Pair:
    """What one worker process holds: the provider client, a connection per thread, Redis."""

    def __init__(self, db: str, sim_url: str, redis_client: Any):
        self.db = db
        self.sim_url = sim_url
        self.redis = redis_client
        self.local = threading.local()

    def http(self) -> Any:
        """This thread's ``httpx.Client``: one shared by the worker threads failed now and then with
        ``EBADF`` (a connection closed by one thread while another used it; see providers/client.py),
        and Dramatiq's retry backoff (15 s and up) then made a round take 30 s."""
        client = getattr(self.local, "http", None)
        if client is None:
            import httpx

            client = self.local.http = httpx.Client(base_url=self.sim_url, timeout=30)
        return client

    def conn(self) -> sqlite3.Connection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = open_db(self.db)
        return conn

    def __call__(self, run_id: str, i: int, expected: int) -> None:
        response = self.http().post("/chat/completions", json={
            "model": "fast", "messages": [{"role": "user", "content": f"[sim: say answer {i}]"}]})
        response.raise_for_status()
        answer = response.json()["choices"][0]["message"]["content"]
        conn = self.conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            inserted = conn.execute("INSERT OR IGNORE INTO results (run, i, answer) VALUES (?, ?, ?)",
                                    (run_id, i, answer)).rowcount
            count = conn.execute("SELECT count(*) FROM results WHERE run = ?", (run_id,)).fetchone()[0]
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if inserted and count == expected:
            self.redis.lpush(_done_key(run_id), "1")


def declare(broker: Any, queue: str, fn: Callable[..., None]) -> Any:
    """The one actor, ``raw_pair``, on ``broker``."""
    import dramatiq

    return dramatiq.Actor(fn, broker=broker, actor_name="raw_pair", queue_name=queue, priority=0,
                          options={"max_retries": 3})


def serve(broker_url: str, db: str, sim_url: str, queue: str, threads: int) -> None:
    """A worker process: plain Dramatiq, ``threads`` worker threads, until SIGTERM."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=broker_url)
    dramatiq.set_broker(broker)
    pair = _Pair(db, sim_url, broker.client)
    declare(broker, queue, pair)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    worker = dramatiq.Worker(broker, worker_threads=threads)
    worker.start()
    print(_READY, flush=True)
    stop.wait()
    worker.stop()


def _start_workers(args: list[str], processes: int, log: Path) -> list[subprocess.Popen]:
    procs = []
    with open(log, "ab") as out:
        for _ in range(processes):
            procs.append(subprocess.Popen([sys.executable, "-m", "evaljobs.bench.raw_stack", "serve", *args],
                                          stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + READY_TIMEOUT
    for proc in procs:
        line = b""
        while _READY.encode() not in line:
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop_workers(procs)
                raise RuntimeError(f"a raw-stack worker did not start; see {log}")
            assert proc.stdout is not None  # started with stdout=PIPE
            line = proc.stdout.readline()  # the ready line, or EOF when it died
    return procs


def _stop_workers(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def measure_raw_stack(
    broker_url: str,
    sim_url: str,
    *,
    pairs: int = 1000,
    processes: int = 2,
    threads: int = 2,
    repeat: int = 3,
    out: str | Path = ".",
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Wall clock from the first send to the last row, per repeat, with ``processes`` × ``threads``
    workers."""
    import redis
    from dramatiq.brokers.redis import RedisBroker

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    db = out / "raw-stack.db"
    open_db(str(db)).close()
    queue = f"raw-{secrets.token_hex(4)}"
    procs = _start_workers(
        [broker_url, str(db), sim_url, queue, str(threads)], processes, out / "raw-stack.log"
    )
    broker = RedisBroker(url=broker_url)
    client = redis.Redis.from_url(broker_url)
    try:
        actor = declare(broker, queue, lambda *args: None)
        # One untimed warm-up round: connections open, code loaded (as evaljobs' cells are warmed up).
        rounds: list[dict[str, Any]] = []
        for index in range(repeat + 1):
            run_id = secrets.token_hex(6)
            meter = bench.ProcessMeter(lambda: [p.pid for p in procs])
            meter.start()
            started = time.perf_counter()
            for i in range(pairs):
                actor.send(run_id, i, pairs)
            done, deadline = None, started + timeout
            while done is None and time.perf_counter() < deadline:  # short waits: under the socket timeout
                done = client.blpop([_done_key(run_id)], timeout=1)
            wall = time.perf_counter() - started
            cpu, peak = meter.stop()
            if done is None:
                raise RuntimeError(f"raw stack: {pairs} pairs not stored within {timeout:.0f} s; see {out}")
            if index:
                rounds.append({"wall_s": round(wall, 4), "cpu_s": cpu, "peak_mb": peak})
        check = sqlite3.connect(str(db))
        stored = check.execute("SELECT count(*) FROM results").fetchone()[0]
        check.close()
        if stored != pairs * (repeat + 1):
            raise RuntimeError(f"raw stack: {stored} rows stored for {pairs * (repeat + 1)} pairs; see {out}")
    finally:
        broker.flush(queue)
        broker.close()
        client.close()
        _stop_workers(procs)
    walls = [r["wall_s"] for r in rounds]
    median = statistics.median(walls)
    return {"strategy": "raw-stack", "pairs": pairs, "processes": processes, "width": threads,
            "wall_s": median, "pairs_per_s": round(pairs / median, 1), "walls": walls,
            "cpu_s": statistics.median(r["cpu_s"] for r in rounds)}


def compare(catalog: str, broker_url: str, *, widths: tuple[int, ...] = (2, 8), processes: int = 2,
            repeat: int = 3, out: str | Path = ".", governor: bool = False,
            pairs_per_message: tuple[int, ...] = (1,)) -> list[dict[str, Any]]:
    """For each width: the raw stack, then evaljobs' fan-out cell (``evaljobs bench``, run as the
    command, with ``EVALJOBS_PAIRS_PER_MESSAGE`` set) once per ``pairs_per_message``, same Redis and
    provider settings (zero latency), back to back, so the ratio is of one moment of the machine."""
    # the driver only: the raw-stack workers (`serve`) load none of evaljobs' code
    from evaljobs import config
    from evaljobs.catalog import load_catalog
    from evaljobs.simulated import SimulatedProvider

    out = Path(out)
    pairs = len(load_catalog(catalog).scenarios)
    rows = []
    for width in widths:
        sim = SimulatedProvider(latency=0.0).start()
        try:
            raw = measure_raw_stack(broker_url, sim.url, pairs=pairs, processes=processes, threads=width,
                                    repeat=repeat, out=out / f"raw-w{width}")
        finally:
            sim.stop()
        for batch in pairs_per_message:
            cell_out = out / f"evaljobs-w{width}-b{batch}"
            # The submitting process's setting: the run carries it to the workers (its options).
            env = config.child_environment({"EVALJOBS_PAIRS_PER_MESSAGE": str(batch)})
            subprocess.run([sys.executable, "-m", "evaljobs", "bench", catalog, "-m", "sim/fast",
                            "--strategies", "fanout", "--widths", str(width), "--repeat", str(repeat),
                            "--broker", broker_url, "--simulate", "latency=0", "--processes", str(processes),
                            "--out", str(cell_out), "--governor" if governor else "--no-governor"],
                           env=env, check=True, stdout=subprocess.DEVNULL)
            result = bench.load_result(cell_out / "bench.json")
            cell = result.cells[0]
            rows.append({"width": width, "processes": processes, "pairs": pairs, "pairs_per_message": batch,
                         "raw_stack_wall_s": raw["wall_s"], "raw_stack_pairs_per_s": raw["pairs_per_s"],
                         "raw_stack_cpu_s": raw["cpu_s"], "evaljobs_wall_s": cell.wall_s,
                         "evaljobs_pairs_per_s": round(pairs / cell.wall_s, 1), "evaljobs_cpu_s": cell.cpu_s,
                         "ratio": round(raw["wall_s"] / cell.wall_s, 3), "raw_stack_walls": raw["walls"],
                         "load_average": [result.environment.get("load_average_at_start"),
                                          result.environment.get("load_average_at_end")]})
    return rows


def _main(argv: list[str]) -> int:
    if argv[:1] == ["serve"] and len(argv) == 6:
        serve(argv[1], argv[2], argv[3], argv[4], int(argv[5]))
        return 0
    if argv[:1] == ["compare"]:
        import argparse

        parser = argparse.ArgumentParser(prog="python -m evaljobs.bench.raw_stack compare")
        parser.add_argument("catalog")
        parser.add_argument("--broker", required=True)
        parser.add_argument("--widths", default="2,8")
        parser.add_argument("--processes", type=int, default=2)
        parser.add_argument("--repeat", type=int, default=3)
        parser.add_argument("--out", default=".")
        parser.add_argument("--governor", action="store_true", help="evaljobs' cells with the governor on")
        parser.add_argument("--pairs-per-message", default="1",
                            help="evaljobs' cells once per value (EVALJOBS_PAIRS_PER_MESSAGE), e.g. 1,8")
        ns = parser.parse_args(argv[1:])
        rows = compare(ns.catalog, ns.broker, widths=tuple(int(w) for w in ns.widths.split(",")),
                       processes=ns.processes, repeat=ns.repeat, out=ns.out, governor=ns.governor,
                       pairs_per_message=tuple(int(b) for b in ns.pairs_per_message.split(",")))
        Path(ns.out, "raw-stack.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
        print(
            "| processes × width | pairs/message | raw stack pairs/s | evaljobs pairs/s | evaljobs / raw "
            "stack | raw CPU s | evaljobs CPU s |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for row in rows:
            print(f"| {row['processes']} × {row['width']} | {row['pairs_per_message']} | "
                  f"{row['raw_stack_pairs_per_s']} | {row['evaljobs_pairs_per_s']} | {row['ratio']:.2f} | "
                  f"{row['raw_stack_cpu_s']} | {row['evaljobs_cpu_s']} |")
        return 0
    print("usage: python -m evaljobs.bench.raw_stack serve BROKER DB SIM_URL QUEUE THREADS\n"
          "       python -m evaljobs.bench.raw_stack compare CATALOG --broker URL [--widths 2,8] "
          "[--processes 2] [--repeat 3] [--out DIR] [--pairs-per-message 1,8]", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover - exercised through subprocesses
    sys.exit(_main(sys.argv[1:]))
