"""``evaljobs status``: what is running, what is queued, who is working — read without scanning anything.

Every number comes from a key or an index that is known in advance:

* runs: the pending, running and interrupted runs (the ``run(status, created_at)`` index) and
  each one's progress (one GROUP BY on the per-run index);
* queues, from Dramatiq's Redis layout (``brokers/redis/dispatch.lua``), per
  queue ``Q`` under the namespace ``dramatiq``: *ready* = ``LLEN dramatiq:Q``
  (message ids waiting), *in flight* = ``HLEN dramatiq:Q.msgs`` − ready (fetched
  by a worker, not acked yet), *delayed* = ``HLEN dramatiq:Q.DQ.msgs`` (retries
  and re-sends waiting for their time: workers fetch them from the ``Q.DQ`` list
  at once and hold them until due, so the hash, not the list, counts them),
  *dead-lettered* = ``ZCARD dramatiq:Q.XQ``;
* workers: ``dramatiq:__heartbeats__`` is a sorted set of broker ids scored by
  their last command; the members seen within the window, each with the number
  of messages it holds (``SCARD`` of its ack sets for each queue). Any process
  that enqueued also appears there, holding nothing;
* the governor's budgets (:meth:`evaljobs.governor.Governor.stats`, a set of
  budget names) and the elastic pools' records (the ``evaljobs:pools`` hash).

Never ``KEYS``/``SCAN``: which queues to read is known (the configured queue,
the pools' queues, ``-Q``), not discovered.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import redis

from evaljobs import config, store
from evaljobs.config import AMQP_SCHEMES, REDIS_SCHEMES, state_redis
from evaljobs.errors import EXIT_USAGE, one_line
from evaljobs.pipeline.broker import queue_name
from evaljobs.store import batches as stored_batches
from evaljobs.governor import Governor
from evaljobs.reports.gate import Verdict
from evaljobs.workers.records import read_pools as pools_of

DRAMATIQ_NAMESPACE = "dramatiq"
#: Pending and running runs shown at most.
RUNS_LIMIT = 50


@dataclass
class RunProgress:
    id: str
    catalog: str
    status: str
    strategy: str
    expected: int
    persisted: int
    passed: int
    failed: int
    errored: int
    created_at: str
    started_at: str | None


@dataclass
class QueueDepth:
    name: str
    ready: int
    in_flight: int
    delayed: int
    dead_lettered: int


@dataclass
class WorkerSeen:
    id: str
    seen_ago: float
    holding: int


@dataclass
class Status:
    """Everything ``evaljobs status`` shows; ``None`` sections were not available (see ``notes``)."""

    broker: str
    runs: list[RunProgress]
    queues: list[QueueDepth] | None = None
    workers: list[WorkerSeen] | None = None
    window: float = 0.0
    governor: list[dict[str, Any]] | None = None
    pools: list[dict[str, Any]] | None = None
    #: Provider batches not ended yet (batch runs): run, provider, model, size, counts, age.
    batches: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        """The human-readable status, as ``evaljobs status`` prints it (:func:`render`)."""
        return render(self)

    def verdict(self) -> Verdict:
        """Exit 2 when the broker could not be read: what could be read is still shown, but a
        monitoring script must see the outage."""
        unreadable = [note for note in self.notes if note.startswith("cannot read ")]
        if unreadable:
            return Verdict(False, (f"error: {unreadable[0]}",), EXIT_USAGE)
        return Verdict(True)


def heartbeat_window() -> float:
    """Seconds a worker counts as seen: the broker's heartbeat timeout (EVALJOBS_HEARTBEAT_TIMEOUT_MS, default
    10 s)."""
    return config.settings().heartbeat_timeout_ms / 1000.0


def active_runs(limit: int = RUNS_LIMIT) -> list[RunProgress]:
    out = []
    # pending, running and interrupted (to recover)
    for run in store.list_runs(limit=limit, statuses=list(store.UNFINISHED_STATUSES)):
        numbers = store.progress(run.id)
        out.append(RunProgress(id=run.id, catalog=run.catalog_name, status=run.status, strategy=run.strategy,
                               expected=numbers["expected"], persisted=numbers["persisted"],
                               passed=numbers["passed"], failed=numbers["failed"], errored=numbers["errored"],
                               created_at=run.created_at.isoformat(),
                               started_at=run.started_at.isoformat() if run.started_at else None))
    return out


def read_queues(client, names: Sequence[str], *, namespace: str = DRAMATIQ_NAMESPACE) -> list[QueueDepth]:
    """Depth of each named queue: four O(1) commands per queue, in one pipeline."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        base = f"{namespace}:{name}"
        pipe.llen(base)
        pipe.hlen(f"{base}.msgs")
        pipe.hlen(f"{base}.DQ.msgs")
        pipe.zcard(f"{base}.XQ")
    values = pipe.execute() if names else []
    out = []
    for i, name in enumerate(names):
        ready, stored, delayed, dead = (int(v) for v in values[4 * i:4 * i + 4])
        out.append(QueueDepth(name=name, ready=ready, in_flight=max(0, stored - ready), delayed=delayed,
                              dead_lettered=dead))
    return out


def read_workers(client, queues: Sequence[str], *, window: float,
                 namespace: str = DRAMATIQ_NAMESPACE) -> list[WorkerSeen]:
    """Broker processes seen within ``window`` seconds, newest first, with the messages each holds."""
    now_ms = time.time() * 1000.0
    seen = client.zrangebyscore(f"{namespace}:__heartbeats__", now_ms - window * 1000.0, "+inf",
                                withscores=True)
    seen = sorted(seen, key=lambda item: -item[1])
    pipe = client.pipeline(transaction=False)
    for worker_id, _ in seen:
        wid = worker_id.decode() if isinstance(worker_id, bytes) else str(worker_id)
        for queue in queues:
            pipe.scard(f"{namespace}:__acks__.{wid}.{queue}")
            pipe.scard(f"{namespace}:__acks__.{wid}.{queue}.DQ")
    held = pipe.execute() if seen and queues else []
    per = 2 * len(queues)
    out = []
    for i, (worker_id, score) in enumerate(seen):
        wid = worker_id.decode() if isinstance(worker_id, bytes) else str(worker_id)
        out.append(WorkerSeen(id=wid, seen_ago=round(max(0.0, (now_ms - float(score)) / 1000.0), 3),
                              holding=sum(int(v) for v in held[i * per:(i + 1) * per])))
    return out


def read_pools(client) -> list[dict[str, Any]] | None:
    """The elastic pools' live records."""
    return pools_of(client)


def read_governor(redis_url: str) -> list[dict[str, Any]] | None:
    """The governor's budgets (its own stats: a set of budget names, never a key scan)."""
    governor = Governor(redis_url)
    try:
        return governor.stats()
    finally:
        governor.close()


def open_batches() -> list[dict[str, Any]]:
    """The provider batches not ended yet, oldest first (the ``provider_batch(state)`` index)."""
    now = datetime.now(timezone.utc)
    return [{"run": b.run_id, "provider": b.provider, "model": b.model, "state": b.state,
             "provider_batch_id": b.provider_batch_id, "size": b.size, "done": b.done, "failed": b.failed,
             "provider_status": b.provider_status,
             "age_s": round((now - b.created_at).total_seconds(), 1) if b.created_at else None}
            for b in stored_batches.open_batches()]


def collect(broker_url: str | None, *, queues: Sequence[str] = (), window: float | None = None,
            runs_limit: int = RUNS_LIMIT, governor_url: str | None = None) -> Status:
    """Gather the status. ``broker_url``: ``memory``/None (in-process: nothing shared to read) or redis://…

    A section whose server cannot be reached is left ``None`` with a note: the
    database half of the status is still useful while Redis is down, and vice versa.
    """
    window = heartbeat_window() if window is None else window
    status = Status(broker=store.redact(broker_url) if broker_url else "memory", runs=[], window=window)
    try:
        status.runs = active_runs(runs_limit)
        status.batches = open_batches()
    except store.StoreError as exc:
        status.notes.append(f"runs: {exc}")
    rabbit = broker_url is not None and broker_url.startswith(AMQP_SCHEMES)
    if not broker_url or broker_url == "memory" or not (broker_url.startswith(REDIS_SCHEMES) or rabbit):
        status.notes.append("in-process broker: no shared queues (each `evaljobs run` has its own workers)")
        return status
    if rabbit:
        # RabbitMQ's queue depths are its own (what consumers hold it shows nobody but its admin tools);
        # the pools and the governor are in the state Redis beside it
        status.notes.append("RabbitMQ broker: queue depths with `rabbitmqctl list_queues name messages_ready "
                            "messages_unacknowledged consumers`")
    client = redis.Redis.from_url(state_redis(broker_url) or broker_url, socket_timeout=5,
                                  socket_connect_timeout=5)
    try:
        try:
            status.pools = read_pools(client)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            status.notes.append(f"cannot read {store.redact(broker_url)}: {_one_line(exc)}")
            return status
        except redis.RedisError as exc:
            status.notes.append(f"pools: {_one_line(exc)}")
        names = list(dict.fromkeys([queue_name(), *queues,
                                    *(q for pool in status.pools or () for q in pool.get("queues") or ())]))
        try:
            if not rabbit:  # Dramatiq's Redis structures: beside RabbitMQ there are none to read
                status.queues = read_queues(client, names)
                status.workers = read_workers(client, names, window=window)
        except redis.RedisError as exc:
            status.notes.append(f"cannot read {store.redact(broker_url)}: {_one_line(exc)}")
            return status
    finally:
        client.close()
    gov_url = governor_url or config.settings().governor_url or state_redis(broker_url) or broker_url
    try:
        status.governor = read_governor(gov_url)
    except Exception as exc:  # noqa: BLE001 - the governor section must not hide the rest
        status.notes.append(f"governor: {_one_line(exc)}")
    return status


def _one_line(exc: BaseException) -> str:
    return one_line(str(exc).strip() or type(exc).__name__)


def _ago(iso: str | None) -> str:
    if not iso:
        return "-"
    seconds = (datetime.now(timezone.utc) - datetime.fromisoformat(iso)).total_seconds()
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def _section(title: str, rows: list[dict] | None, empty: str,
             columns: tuple[tuple[str, str, Callable[[dict], Any]], ...]) -> list[str]:
    """A titled table of ``rows`` (nothing when the part was not asked for, ``empty`` when it has none)."""
    if rows is None:
        return []
    if not rows:
        return ["", f"{title}: {empty}"]
    indent = " " * (len(title) + 2)
    header = " ".join(f"{name:{spec}}" for name, spec, _ in columns)
    return ["", f"{title}: {header}",
            *(indent + " ".join(f"{cell(row)!s:{spec}}" for _, spec, cell in columns) for row in rows)]


def render(status: Status) -> str:
    """The human-readable status (``--json`` prints :meth:`Status.to_dict` instead)."""
    lines = [f"runs: {len(status.runs)} active" if status.runs else "runs: none active"]
    for r in status.runs:
        lines.append(f"  {r.id:<16} {r.status:<8} {r.persisted:>5}/{r.expected:<5} "
                     f"✓{r.passed} ✗{r.failed} "
                     f"!{r.errored}  {r.strategy:<10} {r.catalog[:24]:<24} created {_ago(r.created_at)}")
    lines += _section("batches", status.batches if status.batches else None, "", (
        ("RUN", "<16", lambda b: str(b["run"])[:16]),
        ("PROVIDER", "<10", lambda b: str(b["provider"])[:10]),
        ("MODEL", "<20", lambda b: str(b["model"])[:20]),
        ("STATE", "<12", lambda b: str(b.get("provider_status") or b["state"])[:12]),
        ("SIZE", ">5", lambda b: b["size"]),
        ("DONE", ">5", lambda b: b["done"]),
        ("FAILED", ">6", lambda b: b["failed"]),
        ("AGE", ">7", lambda b: "-" if b.get("age_s") is None else f"{b['age_s']:.0f}s")))
    lines.append("")
    lines.append(f"broker: {status.broker}")
    if status.queues is not None:
        lines.append(f"  {'QUEUE':<20} {'READY':>7} {'IN FLIGHT':>9} {'DELAYED':>7} {'DEAD':>6}")
        for q in status.queues:
            lines.append(f"  {q.name[:20]:<20} {q.ready:>7} {q.in_flight:>9} {q.delayed:>7} "
                         f"{q.dead_lettered:>6}")
    if status.workers is not None:
        busy = sum(1 for w in status.workers if w.holding)
        lines.append(f"workers seen in the last {status.window:g} s: {len(status.workers)} "
                     f"({busy} holding messages)")
        if status.workers:  # Dramatiq's heartbeats count senders too: say so, or a `run` looks like a worker
            lines.append(
                f"  (every process that used the broker: each worker process, and for {status.window:g} s "
                f"a command that sent messages, e.g. evaljobs run, rerun or recover)"
            )
        for w in status.workers[:20]:
            lines.append(f"  {w.id:<38} seen {w.seen_ago:5.1f}s ago  holding {w.holding}")
        if len(status.workers) > 20:
            lines.append(f"  … and {len(status.workers) - 20} more")
    lines += _section("governor", status.governor, "no budgets yet", (
        ("BUDGET", "<30", lambda g: str(g.get("budget"))[:30]),
        ("LIMIT", ">5", lambda g: g.get("limit", 0)),
        ("IN FLIGHT", ">9", lambda g: g.get("in_flight", 0)),
        ("WAITING", ">7", lambda g: g.get("waiting", 0)),
        ("ADMITTED", ">8", lambda g: g.get("admitted", 0)),
        ("429s", ">5", lambda g: g.get("rate_limited", 0)),
        ("MEAN WAIT", ">9", lambda g: f"{float(g.get('mean_wait_ms') or 0):.0f}ms")))
    lines += _section("pools", status.pools, "none running", (
        ("POOL", "<28", lambda p: str(p.get("id"))[:28]),
        ("LANE", "<11", lambda p: str(p.get("lane", "-"))),
        ("MEMBERS", ">7", lambda p: p.get("members", 0)),
        ("BUSY", ">5", lambda p: p.get("busy", 0)),
        ("MIN", ">4", lambda p: p.get("min", "-")),
        ("MAX", ">4", lambda p: p.get("max", "-")),
        ("STARTED", ">8", lambda p: p.get("started", 0))))
    for note in status.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


__all__ = [
    "DRAMATIQ_NAMESPACE",
    "QueueDepth",
    "RunProgress",
    "Status",
    "WorkerSeen",
    "active_runs",
    "collect",
    "heartbeat_window",
    "read_queues",
    "read_workers",
    "render",
]
