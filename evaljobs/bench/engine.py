"""The engine: run every cell of a :class:`BenchSpec` through the real code path and measure it.

Each cell is a fresh run (:class:`evaljobs.api.Session` submit → evaluate →
persist → barrier → report), through the session class it is handed (``sessions``: the engine sits
below the API it measures). The engine starts what it needs — the simulated
provider, ``evaljobs worker`` processes for the Redis cells — and stops it
again. Its own settings (the simulated provider's URL, the governor switch)
are this process's settings for the benchmark's duration
(:func:`evaljobs.config.configure`); they are put back afterwards, and so is
where events are published. Worker processes get theirs in their environment
(:func:`evaljobs.config.child_environment`). Nothing writes ``os.environ``.
"""
from __future__ import annotations

import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from evaljobs import config, store
from evaljobs.bench.analysis import recommend, summarize
from evaljobs.bench.meter import ProcessMeter, group_pids, host_cpu
from evaljobs.bench.model import (
    QUEUED,
    WORKER_READY_TIMEOUT,
    BenchError,
    BenchResult,
    BenchSpec,
    Measurement,
    SessionFactory,
    broker_label,
    strategy_widths,
)
from evaljobs.catalog import catalog_from_body, loads_catalog
from evaljobs.pipeline import events
from evaljobs.providers import require_callable, run_totals
from evaljobs.simulated import SimulatedProvider

_READY_LINE = "is ready for action"


class WorkerGroup:
    """``evaljobs worker --threads W --processes P`` in its own process group, for the Redis cells."""

    def __init__(self, *, broker_url: str, db_url: str, threads: int, processes: int, queue: str,
                 log: Path, env: dict[str, str] | None = None, providers: str | None = None):
        extra = {"EVALJOBS_BROKER_URL": broker_url, "EVALJOBS_DATABASE_URL": db_url,
                 "EVALJOBS_QUEUE": queue, "PYTHONUNBUFFERED": "1"}
        if providers:
            extra["EVALJOBS_PROVIDERS"] = str(Path(providers).resolve())
        extra.update(env or {})
        # This process's settings (the benchmark's simulated provider, the governor switch), then the cell's.
        self.env = config.child_environment(extra, base=config.configured())
        self.args = [sys.executable, "-m", "evaljobs", "worker", "--threads", str(threads),
                     "--processes", str(processes)]
        self.processes = processes
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = WORKER_READY_TIMEOUT) -> "WorkerGroup":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        start_at = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.args, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"the worker exited with {self.proc.returncode} before it was ready; "
                                 f"see {self.log}")
            with open(self.log, "rb") as handle:
                handle.seek(start_at)
                if handle.read().decode("utf-8", "replace").count(_READY_LINE) >= self.processes:
                    return self
            time.sleep(0.05)
        self.stop()
        raise BenchError(f"the worker was not ready within {timeout:.0f} s; see {self.log}")

    def pids(self) -> list[int]:
        return group_pids(self.proc.pid) if self.proc is not None else []

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "WorkerGroup":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the engine ----------------------------------------------------------------------------------


class _EventClock:
    """Receipt times of the last ``result`` and of the ``complete`` event of one run."""

    def __init__(self, run_id: str | None = None):
        self.run_id = run_id
        self.first_result: float | None = None
        self.last_result: float | None = None
        self.complete: float | None = None

    def __call__(self, event: dict[str, Any]) -> None:
        if self.run_id is not None and event.get("run") != self.run_id:
            return
        now = time.perf_counter()
        if event.get("type") == "result":
            self.last_result = now
            if self.first_result is None:
                self.first_result = now
        elif event.get("type") == "complete":
            self.complete = now

    @property
    def lag_ms(self) -> float | None:
        if self.last_result is None or self.complete is None:
            return None
        return round(max(0.0, self.complete - self.last_result) * 1000.0, 2)


def environment(spec: BenchSpec) -> dict[str, Any]:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return {"cores": cores, "python": platform.python_version(), "platform": platform.platform(),
            "broker": broker_label(spec.broker), "db": (spec.db or "").split("://", 1)[0] or "sqlite",
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            # Other work on the host skews every figure: the load average says how busy it was.
            "load_average_at_start": _load_average()}


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not available
        return None


def run_bench(spec: BenchSpec, *, sessions: SessionFactory,
              echo: Callable[[str], None] = lambda line: None) -> BenchResult:
    """Run every cell of ``spec`` (each a run of a ``sessions`` session) and return the measurements, the
    cells and the recommendation."""
    out = Path(spec.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not spec.db:
        spec.db = f"sqlite:///{out / 'bench.db'}"
    if spec.processes > 1 and spec.broker == "memory":
        raise BenchError("--processes needs a Redis broker: in-process workers are threads of this process")
    env = environment(spec)
    previous, previous_events = config.configured(), events.redis_url()
    base = previous or config.Settings.from_env()
    worker_env = dict(spec.worker_env)
    if spec.governor is not None:
        worker_env["EVALJOBS_GOVERNOR"] = "on" if spec.governor else "off"
    governor = base.governor if spec.governor is None else spec.governor
    env["governor"] = "on" if governor else "off"
    sim = None
    # Which provider the figures were measured against: evaljobs' own simulator, or the models' providers.
    env["provider"] = ("simulated (evaljobs' own)" if spec.simulate is not None else
                       ", ".join(sorted({model.split("/", 1)[0] for model in spec.models})))
    if spec.simulate is not None:
        sim = SimulatedProvider(**spec.simulate).start()
        env["simulated_provider"] = sim.url
    # This process's settings for the benchmark (in-process cells read them); put back in `finally`.
    config.configure(base.replace(governor=governor, sim_url=sim.url if sim is not None else None))
    queue = f"bench-{secrets.token_hex(4)}"
    measurements: list[Measurement] = []
    try:
        probe = sessions(db=spec.db, broker="memory", width=1, providers=spec.providers)
        try:
            catalog = probe.load(spec.catalog)
            # Before the first cell creates a run: every model's provider can be called (UsageError).
            require_callable(probe.providers, list(spec.models))
        finally:
            probe.close()
        models = list(spec.models)
        env["pairs"] = len(catalog.scenarios) * len(models)
        plan = _plan(spec, len(models))
        echo(
            f"bench: {Path(spec.catalog).name}: {len(catalog.scenarios)} scenarios × {len(models)} model(s) "
            f"= {env['pairs']} pairs; {len(plan)} cells × {spec.repeat} repeats; broker "
            f"{broker_label(spec.broker)}; results in {out}"
        )
        thread = sim._thread if sim is not None else None
        # native_id is None only before the thread starts: the simulator's has started.
        sim_threads = (lambda: [tid for tid in (thread.native_id,) if tid is not None]) if thread else None
        warmup = _warmup_catalog(catalog)
        _warm_up(sessions, spec, warmup, models, "memory", queue,
                 [s for s in ("sequential", "fanout") if s in spec.strategies or s == "sequential"])
        cells_total = sum(len(strategies) for _, strategies in _by_width(plan)) * spec.repeat
        cell = 0  # each line says [k/N]: a sweep runs for minutes, and the user sees how far it is
        for width, strategies in _by_width(plan):
            workers = None
            if spec.broker != "memory" and any(s in QUEUED for s in strategies):
                workers = WorkerGroup(broker_url=spec.broker, db_url=spec.db, threads=width,
                                      processes=spec.processes, queue=queue, log=out / "workers.log",
                                      env=worker_env, providers=spec.providers).start()
                _warm_up(sessions, spec, warmup, models, spec.broker, queue, ["fanout"] * spec.processes)
            try:
                for strategy in strategies:
                    for repeat in range(1, spec.repeat + 1):
                        cell += 1
                        queued = strategy in QUEUED
                        meter = ProcessMeter(workers.pids if (queued and workers) else None,
                                             exclude_threads=sim_threads)
                        m = _run_cell(sessions, spec, catalog, models, strategy, width, repeat, queue,
                                      meter)
                        m.cores = min(env["cores"], spec.processes if (queued and workers) else 1)
                        measurements.append(m)
                        echo(
                            f"  [{cell:>{len(str(cells_total))}}/{cells_total}] {strategy:<10} width "
                            f"{width:>3}  repeat {repeat}: {m.wall_s:7.2f} s  "
                            f"{m.status}  errors {m.error_rate:.1%}  ({m.run_id})"
                        )
            finally:
                if workers is not None:
                    workers.stop()
    finally:
        config.restore(previous)
        events.bind_redis(previous_events)  # the Redis cells bound the events there: put back
        if sim is not None:
            sim.stop()
    pair_latency = _pair_latency(spec, measurements)
    cells = summarize(measurements, models=len(spec.models), pair_latency=pair_latency,
                      processes=spec.processes if spec.broker != "memory" else 1)
    env["pair_latency_s"] = pair_latency
    env["load_average_at_end"] = _load_average()
    return BenchResult(spec, env, measurements, cells, recommend(cells, cores=env["cores"]))


def _warmup_catalog(catalog):
    """The catalog's first scenario alone: one untimed run through each path loads the code, opens the
    connections and starts the clients, so the first measured cell is not also the first run ever."""
    body = dict(catalog.body)
    body["scenarios"] = body["scenarios"][:1]
    body["name"] = f"{catalog.name}-warmup"
    return catalog_from_body(body, source=f"<warm-up of {catalog.name}>")


def _warm_up(sessions: SessionFactory, spec: BenchSpec, catalog, models: list[str], broker: str,
             queue: str, strategies: list[str]) -> None:
    for strategy in strategies:
        session = sessions(db=spec.db, broker=broker if strategy in QUEUED else "memory", width=2,
                          providers=spec.providers, queue=queue)
        try:
            info = session.submit(catalog, models, strategy=strategy)
            if strategy in QUEUED:
                session.wait(info.id, timeout=spec.cell_timeout, poll=0.5)
        finally:
            session.close()


def _plan(spec: BenchSpec, models: int) -> list[tuple[str, int]]:
    plan = []
    for strategy in spec.strategies:
        for width in strategy_widths(strategy, spec.widths, models):
            plan.append((strategy, width))
    return plan


def _by_width(plan: list[tuple[str, int]]) -> list[tuple[int, list[str]]]:
    """Cells grouped by width, so one set of worker processes serves every queued strategy at that width."""
    widths: dict[int, list[str]] = {}
    for strategy, width in plan:
        widths.setdefault(width, []).append(strategy)
    return sorted(widths.items())


def _pair_latency(spec: BenchSpec, measurements: list[Measurement]) -> float | None:
    """Provider latency of one pair: the simulated call latency × calls per pair (measured)."""
    if not spec.simulate or not measurements:
        return None
    latency = float(spec.simulate.get("latency", 0.0))
    calls = [m.requests / m.pairs for m in measurements if m.requests and m.pairs and not m.rate_limited
             and not m.errors]
    if not calls:
        return None
    return round(latency * statistics.median(calls), 6)


def _run_cell(sessions: SessionFactory, spec: BenchSpec, catalog, models: list[str], strategy: str,
              width: int, repeat: int, queue: str, meter: ProcessMeter) -> Measurement:
    session = sessions(db=spec.db, broker=spec.broker if strategy in QUEUED else "memory", width=width,
                      providers=spec.providers, queue=queue)
    clock = _EventClock()
    try:
        if strategy in QUEUED:
            session.binding()  # bind events (Redis pub/sub) before anything is published
        else:
            events.bind_redis(None)  # in-process strategies publish nowhere else, as `evaljobs run` does
            events.add_listener(clock)
        meter.start()
        host0 = host_cpu()
        started = time.perf_counter()
        try:
            info = session.submit(catalog, models, strategy=strategy)
            clock.run_id = info.id
            if strategy in QUEUED:
                info = session.wait(info.id, timeout=spec.cell_timeout, poll=1.0, on_event=clock)
        finally:
            if strategy not in QUEUED:
                events.remove_listener(clock)
        wall = time.perf_counter() - started
        host1 = host_cpu()
        cpu, peak = meter.stop()
        host_busy = None
        if host0 is not None and host1 is not None and host1[1] > host0[1]:
            host_busy = round((host1[0] - host0[0]) / (host1[1] - host0[1]), 3)
        if info.report is None:
            store.cancel(info.id)
            status = "timeout"
        else:
            status = info.status
        results = store.list_results(info.id)
        # What the provider saw: every request of the run's pairs from the client's own attempt log,
        # stored with each result by whichever process made it (429s handed back included).
        seen = run_totals(results)
        errored_pairs = sum(1 for r in results if r.status == "errored")
        retries = max(sum(max(0, r.attempts - 1) for r in results), seen.failed - errored_pairs)
        summary = (info.report or {}).get("summary", {})
        return Measurement(
            strategy=strategy,
            width=width,
            repeat=repeat,
            run_id=info.id,
            status=status,
            pairs=info.expected,
            wall_s=round(wall, 4),
            requests=seen.requests,
            rate_limited=seen.rate_limited,
            errors=seen.errors,
            retries=retries,
            errored_pairs=errored_pairs,
            passed=int(summary.get("passed", 0)),
            cost=None if summary.get("cost_unknown") else float(summary.get("cost", 0.0)),
            cpu_s=cpu,
            peak_rss_mb=peak,
            report_lag_ms=clock.lag_ms,
            first_result_s=(
                round(clock.first_result - started, 4) if clock.first_result is not None else None
            ),
            host_busy=host_busy,
        )
    finally:
        session.close()


# -- the enqueue figure --------------------------------------------------------------------------


def synthetic_catalog_text(scenarios: int, name: str = "synthetic") -> str:
    """A catalog of ``scenarios`` one-turn scenarios (``[sim: say …]``), for overhead figures."""
    lines = [f"name: {name}", "defaults: {max_turns: 1}", "scenarios:"]
    for i in range(scenarios):
        lines += [f"  - key: s{i:05d}", f'    prompt: "[sim: say answer {i}]"',
                  f"    expect: {{contains: ['answer {i}']}}"]
    return "\n".join(lines) + "\n"


def measure_enqueue(broker_url: str, db_url: str, pairs: int = 10_000, *, sessions: SessionFactory,
                    repeat: int = 3) -> dict[str, Any]:
    """Seconds for ``start_run`` to enqueue ``pairs`` fan-out messages (mark running, list pairs, enqueue).

    Called in this process on the real broker; the messages go to a throwaway queue that is flushed after.
    """
    queue = f"bench-enqueue-{secrets.token_hex(4)}"
    catalog = loads_catalog(synthetic_catalog_text(pairs, f"enqueue{pairs}"), source=f"enqueue{pairs}.yaml")
    timings = []
    session = sessions(db=db_url, broker=broker_url, width=1, queue=queue)
    try:
        binding = session.binding()
        for _ in range(repeat):
            run = store.create_run(catalog, ["sim/fast"], strategy="fanout")
            started = time.perf_counter()
            binding.actors.start_run.fn(run.id)
            timings.append(time.perf_counter() - started)
            binding.broker.flush(queue)
            store.cancel(run.id)
    finally:
        session.close()
    median = statistics.median(timings)
    return {"pairs": pairs, "seconds": round(median, 4), "all_seconds": [round(t, 4) for t in timings],
            "per_second": round(pairs / median, 1), "broker": broker_label(broker_url)}

