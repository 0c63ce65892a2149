"""Batch runs survive kill -9 without paying twice: the submitting process is a real `evaljobs run --batch`,
the workers real `evaljobs worker` processes; real redis-server, SQLite and PostgreSQL.

Where a batch is created depends on the broker, and each test kills whichever process that is:

* ``redis``: `evaljobs run --batch --wait` submits the run and follows it; `evaljobs worker` processes
  park the pairs' requests, create the batch (the ``collect_batch`` actor) and poll it. The test kills
  the submitter *and* every worker (SIGKILL to each process group).
* ``memory``: `evaljobs run --batch --broker memory` is submitter and worker in one process: it creates
  the batch itself. The test kills it.

Each test stops the processes at one moment of a batch's life, reached by a condition the test reads
(the database, the simulated provider's counters — never a sleep), and asserts the submitter is still
alive at that moment:

(a) before a batch is created (the pairs' requests are parked, the collector waits an hour),
(b) between the provider's create and the commit of the batch id (the provider holds its answer),
(c) while the batch is open and polled.

Then, as an operator would: a new worker (Redis) and `evaljobs recover RUN` (on the in-process broker
the recover command evaluates the run itself). The simulated provider — not our own bookkeeping —
must have been sent each request exactly once, and the run has every pair once and one report.
"""
from __future__ import annotations

import json

import pytest
from helpers import CommandProcess, WorkerProcess, evaljobs_cli, wait_until

from evaljobs import store
from evaljobs.store import batches as stored

pytestmark = [pytest.mark.redis]

PAIRS = 6
#: The run's requests go as one batch, the moment the last is parked (never a second, smaller one).
ONE_BATCH = {"EVALJOBS_BATCH_SIZE": str(PAIRS), "EVALJOBS_BATCH_WAIT": "3600"}
#: After the crash: batches are collected and looked at every 0.1 s.
QUICK = {"EVALJOBS_BATCH_POLL": "0.1", "EVALJOBS_BATCH_WAIT": "0.1"}


@pytest.fixture(autouse=True)
def _no_process_left(monkeypatch):
    """Every process a test starts (workers, submitters) is killed at its end, whatever the outcome."""
    started: list[WorkerProcess] = []
    original = WorkerProcess.start

    def start(self):
        started.append(self)
        return original(self)

    monkeypatch.setattr(WorkerProcess, "start", start)
    yield
    for process in started:
        process.kill()


class Crash:
    """One batch run on one broker: its submitter, its workers, the simulated provider they call."""

    def __init__(self, broker: str, sim, redis_url: str, db_url: str, tmp_path, model: str):
        self.broker, self.sim, self.db_url, self.tmp_path, self.model = broker, sim, db_url, tmp_path, model
        self.broker_url = redis_url if broker == "redis" else "memory"
        self.redis_url = redis_url
        self.log = tmp_path / "processes.log"
        self.workers: list[WorkerProcess] = []
        self.submitter: CommandProcess | None = None
        self.run_id = ""
        catalog = tmp_path / "crashy.yaml"
        lines = ["name: crashy", "scenarios:"]
        for i in range(PAIRS):
            lines += [f"  - key: s{i:04d}", f"    prompt: '[sim: say answer {i}]'",
                      f"    expect: {{contains: ['answer {i}']}}"]
        catalog.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.catalog = catalog
        store.connect(db_url)  # this test reads the database the processes write

    def start(self, **env: str) -> Crash:
        """The submitter (and, on Redis, two worker processes), all with ``env``; returns once the run
        exists."""
        if self.broker == "redis":
            self.workers = [WorkerProcess(self.redis_url, self.db_url, threads=2, log=self.log,
                                          env={**QUICK, **env}).start() for _ in range(2)]
        self.submitter = CommandProcess(
            self.redis_url, self.db_url, "run", str(self.catalog), "-m", self.model, "--batch", "--wait",
            "--broker", self.broker_url, "--db", self.db_url, "--width", "2", env={**QUICK, **env},
            log=self.log,
        ).start()
        assert wait_until(lambda: bool(store.list_runs(limit=1)), 60), self.tail()
        self.run_id = store.list_runs(limit=1)[0].id
        return self

    def kill_all(self) -> None:
        """SIGKILL the submitter and every worker, at a moment the submitter is still running."""
        assert self.submitter is not None and self.submitter.alive(), self.tail()
        assert all(w.proc is not None and w.proc.poll() is None for w in self.workers), self.tail()
        for process in [self.submitter, *self.workers]:
            process.kill()

    def recover(self) -> store.RunInfo:
        """A new worker (Redis) and `evaljobs recover RUN`; returns once the run has its report."""
        if self.broker == "redis":
            self.workers = [WorkerProcess(self.redis_url, self.db_url, threads=2, log=self.log,
                                          env=QUICK).start()]
        out = evaljobs_cli("recover", self.run_id, "--json", "--broker", self.broker_url, "--db", self.db_url,
                           env=QUICK, timeout=240)
        assert out.returncode == 0, out.stderr[-3000:] + self.tail()
        if self.broker == "memory":  # nobody else evaluates it: recover did, and returned with the report
            assert [run["report"] for run in json.loads(out.stdout)["runs"]] == [True], out.stdout
        # On Redis a poller the killed worker had queued may be all the run needs (recover adds none then).
        assert wait_until(lambda: store.get_run(self.run_id).report is not None, 120), self.tail()
        return store.get_run(self.run_id)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"

    def assert_once(self, info: store.RunInfo, *, batches: int | None = 1) -> None:
        """Every pair once, one report at the batch price, each request sent to the provider once."""
        assert info.status == "complete", self.tail()
        results = store.list_results(info.id)
        assert info.persisted == PAIRS and len({r.scenario_key for r in results}) == len(results) == PAIRS
        assert info.report["summary"]["results"] == PAIRS
        batch = info.report["summary"]["batch"]  # every pair at the batch price: half the listed one
        assert batch["pairs"] == PAIRS and batch["cost"] == pytest.approx(batch["interactive_cost"] / 2)
        stats = self.sim.stats()
        submitted = stats["batches"]["submitted"]
        assert len(submitted) == PAIRS and set(submitted.values()) == {1}, submitted
        assert stats["requests"] == PAIRS  # each answered once, in a batch: not one interactive call
        if batches is not None:
            assert stats["batches"]["batches_created"] == batches


@pytest.fixture
def crash(simulated_provider, redis_url, db_url, tmp_path, monkeypatch):
    def make(broker: str, wire: str = "openai", **sim_options) -> Crash:
        sim = simulated_provider(**sim_options)
        model = "sim/a"
        if wire == "anthropic":  # the simulated provider's Message Batches, through a providers file
            path = tmp_path / "providers.yaml"
            path.write_text(f"providers:\n  ant:\n    api: anthropic\n    base_url: {sim.url}\n"
                            f"    prices: {{'*': [3.0, 15.0]}}\n", encoding="utf-8")
            monkeypatch.setenv("EVALJOBS_PROVIDERS", str(path))  # every process the test starts
            model = "ant/claude"
        return Crash(broker, sim, redis_url, db_url, tmp_path, model)
    return make


@pytest.mark.parametrize("broker", ["redis", "memory"])
def test_a_kill_before_the_batch_is_created(crash, broker):
    run = crash(broker)
    # The collector waits an hour for more requests: the batch is not created before the kill.
    run.start(EVALJOBS_BATCH_WAIT="3600")
    assert wait_until(lambda: stored.request_count(run.run_id) == PAIRS, 60), run.tail()
    run.kill_all()
    assert run.sim.stats()["batches"]["batches_created"] == 0
    run.assert_once(run.recover())


@pytest.mark.parametrize("broker, wire", [("redis", "openai"), ("redis", "anthropic"), ("memory", "openai")])
def test_a_kill_between_the_create_and_the_commit_of_its_id(crash, broker, wire):
    """OpenAI's batch carries its key in its metadata; Anthropic's Message Batch is told by its results."""
    run = crash(broker, wire)
    run.sim.batches.hold_creates = True  # the batch is created; its creator never hears its id
    try:
        run.start(**ONE_BATCH)
        assert wait_until(lambda: run.sim.stats()["batches"]["batches_created"] == 1, 60), run.tail()
        run.kill_all()
    finally:
        run.sim.batches.hold_creates = False
    rows = stored.run_batches(run.run_id)
    assert [(b.state, b.provider_batch_id) for b in rows] == [(stored.SUBMITTING, None)]
    run.assert_once(run.recover())  # found at the provider, not submitted again: one batch


@pytest.mark.parametrize("broker", ["redis", "memory"])
def test_a_kill_while_the_batch_is_polled(crash, broker):
    run = crash(broker, batch_delay=3600)  # open until the test ends it
    run.start(**ONE_BATCH)
    assert wait_until(lambda: any(b.state == stored.OPEN for b in stored.run_batches(run.run_id)), 60), \
        run.tail()
    run.kill_all()
    run.sim.batches.end_batches()
    run.assert_once(run.recover())
