"""Issue 4 end to end: a host's publishing domain travels across every hop of a run.

The host is the example package ``examples/host_adapter`` (``acme_host``,
installed into the venv): a thread-local ``publishing_domain``, its context
provider (entry point ``evaljobs.context_providers``) and an adapter
(``--adapter acme``) whose answer names the domain it ran under and that
raises when there is none. Each test runs on the in-process StubBroker with
real worker threads ("memory") and on real Redis with ``evaljobs worker``
processes ("redis"), which load the provider from the same entry point.
"""
from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis as redis_lib

try:
    from acme_host import DOMAIN, NoPublishingDomain, current_domain, publishing_domain
except ImportError as exc:  # pragma: no cover - a setup mistake, said plainly
    raise ImportError("tests/middleware/test_context_e2e.py needs the example host package: "
                      ".venv/bin/pip install -e examples/host_adapter") from exc
from acme_host.adapter import DomainAdapter
from acme_host.context import NAME, provider as domain_provider
from evaljobs.pipeline import runtime
from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.catalog.modelspec import parse_model_spec
from evaljobs_middleware.context import ContextError, ContextMiddleware, ThreadLocalProvider
from helpers import ROOT, WorkerProcess, wait_until

KEY = "e2e-context-signing-key-of-32-bytes+"
WAIT = 45.0


def catalog(name: str, keys: list[str], prompts: dict[str, str] | None = None):
    """Scenarios that pass whatever the domain; the answer itself says which domain ran."""
    lines = [f"name: {name}", "scenarios:"]
    for key in keys:
        prompt = (prompts or {}).get(key, f"publish item {key}")
        lines += [f"  - key: {key}", f'    prompt: "{prompt}"', "    expect: {contains: ['published for']}"]
    return loads_catalog("\n".join(lines) + "\n", source=f"{name}.yaml")


# -- the two backends --------------------------------------------------------------------------


class Backend:
    """A Session plus workers: in-process StubBroker threads, or Redis (or RabbitMQ, its state in Redis) and a
    worker process."""

    def __init__(self, kind: str, db: str, tmp_path: Path, request: pytest.FixtureRequest):
        self.kind = kind
        self.db = db
        self.tmp_path = tmp_path
        # the shared broker's URL (named for Redis, the first one): redis:// or amqp://
        self.redis_url = request.getfixturevalue(f"{'amqp' if kind == 'rabbitmq' else kind}_url") \
            if kind != "memory" else None
        self.sessions: list[Session] = []
        self.workers: list[WorkerProcess] = []

    @property
    def log(self) -> Path:
        return self.tmp_path / "worker.log"

    def session(self, *, threads: int = 4, db: str | None = None) -> Session:
        """A session whose workers are running (``threads`` worker threads in all)."""
        self.db = db or self.db
        session = Session(db=self.db, broker=self.redis_url or "memory", width=threads)
        self.sessions.append(session)
        # Bind the broker now: concurrent submits must not each configure their own.
        session.binding()
        if self.kind == "memory":
            session._ensure_local_worker()
        else:
            self.workers.append(WorkerProcess(self.redis_url, self.db, threads=threads, log=self.log).start())
        return session

    def dead_letters(self, session: Session) -> int:
        binding = session.binding()
        if self.kind == "memory":
            return len(binding.broker.dead_letters)
        if self.kind == "rabbitmq":
            return binding.broker.get_queue_message_counts(binding.queue)[2]
        client = redis_lib.Redis.from_url(self.redis_url)
        try:
            return client.zcard(f"{binding.broker.namespace}:{binding.queue}.XQ")
        finally:
            client.close()

    def worker_log(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def close(self) -> None:
        for worker in self.workers:
            worker.terminate(10)
        for session in self.sessions:
            session.close()


#: A provider per test (its 429 counters are the test's); a short Retry-After so a rate-limited pair is
#: re-sent quickly (the ``sim`` fixture in tests/conftest.py; worker processes inherit its URL).
SIM_OPTIONS = dict(latency=0.02, retry_after=0.2)
SIM_PER_TEST = True


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setenv("EVALJOBS_MAX_RETRIES", "2")
    monkeypatch.setenv("EVALJOBS_MIN_BACKOFF", "0.01")
    monkeypatch.setenv("EVALJOBS_MAX_BACKOFF", "0.05")
    monkeypatch.delenv("EVALJOBS_CONTEXT_KEY", raising=False)


#: The RabbitMQ backend, for the test that shows the context middleware on it (CI time: one is enough).
ON_RABBITMQ = pytest.param("rabbitmq", marks=[pytest.mark.redis, pytest.mark.rabbitmq])


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def backend(request, sim, sqlite_url, tmp_path):
    made = Backend(request.param, sqlite_url, tmp_path, request)
    yield made
    made.close()


def finished(session: Session, run_id: str, backend: Backend) -> store.RunInfo:
    info = session.wait(run_id, timeout=WAIT, poll=0.5)
    assert info.report is not None, f"run {run_id} is {info.status} {info.persisted}/{info.expected}\n" \
                                    f"{backend.worker_log()}"
    return info


def assert_all_under(run_id: str, domain: str) -> list:
    results = store.list_results(run_id)
    assert results, f"run {run_id} has no results"
    for r in results:
        assert r.status == "passed", (r.scenario_key, r.model, r.error)
        assert r.details["meta"] == {NAME: domain}, (r.scenario_key, r.details.get("meta"))
        assert r.output == f"published for {domain}", (r.scenario_key, r.output)
    return results


# -- the host package on its own ------------------------------------------------------------------


def test_adapter_fails_loudly_without_a_domain_and_records_the_domain_it_ran_under(sim):
    adapter = runtime.adapter("acme")
    assert isinstance(adapter, DomainAdapter)
    assert isinstance(runtime.adapter("acme_host.adapter:DomainAdapter"), DomainAdapter)
    scenario = catalog("solo", ["s0"]).scenario("s0")
    spec = parse_model_spec("sim/a", runtime.providers())
    assert current_domain() is None
    with pytest.raises(NoPublishingDomain, match=r"scenario 's0' × sim/a needs a publishing domain"):
        adapter(scenario, spec)
    with publishing_domain("acme"):
        with publishing_domain("globex"):
            replay = adapter(scenario, spec)
        assert current_domain() == "acme"
    assert not hasattr(DOMAIN, "name")
    assert replay.answer == "published for globex" and replay.meta == {NAME: "globex"}
    assert replay.messages[0]["content"].startswith("Publishing domain: globex.")


# -- acceptance ------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", pytest.param("redis", marks=pytest.mark.redis), ON_RABBITMQ],
                         indirect=True)
def test_every_pair_runs_under_the_domain_the_run_was_started_in_even_when_retried(backend, sim):
    """Start → each pair → finalize on worker threads; a retry and a rate-limit re-send keep "acme"."""
    session = backend.session(threads=4)
    cat = catalog("acme-run", ["s0", "s1", "s2", "s3"],
                  {"s2": "[sim: fail-first 1 500] publish s2",  # Dramatiq Retries re-enqueues it
                   "s3": "[sim: fail-first 1 429] publish s3"})  # the actor re-sends it with a delay
    with publishing_domain("acme"):
        run = session.submit(cat, ["sim/a", "sim/b"], adapter="acme_host.adapter:DomainAdapter")
    assert current_domain() is None
    info = finished(session, run.id, backend)
    assert info.status == "complete" and info.persisted == 8
    assert info.context == {NAME: "acme"}
    assert info.report["run"]["context"] == {NAME: "acme"}
    results = {(r.scenario_key, r.model): r for r in assert_all_under(run.id, "acme")}
    # The retried attempt ran on whatever thread took it, with no domain of its own.
    assert results[("s2", "sim/a")].attempts == 2 and results[("s2", "sim/b")].attempts == 2
    assert results[("s0", "sim/a")].attempts == 1
    assert results[("s3", "sim/a")].attempts == 1 and sim.stats()["rate_limited"] == 2  # re-sent, not retried
    assert backend.dead_letters(session) == 0


def test_runs_started_concurrently_under_acme_and_globex_never_mix(backend, request):
    # On Redis the workers share a PostgreSQL database, as several machines would.
    pg_url = request.getfixturevalue("pg_url") if backend.kind == "redis" else None
    session = backend.session(threads=4, db=pg_url)
    cat = catalog("mixed", [f"s{i}" for i in range(6)], {"s5": "[sim: fail-first 1 500] publish s5"})
    start = threading.Barrier(2)
    runs: dict[str, str] = {}
    errors: list[BaseException] = []

    def submit(domain: str) -> None:
        try:
            with publishing_domain(domain):
                start.wait(5)
                runs[domain] = session.submit(cat, ["sim/a", "sim/b"], adapter="acme").id
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(d,)) for d in ("acme", "globex")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not errors, errors
    for domain, run_id in runs.items():
        info = finished(session, run_id, backend)
        assert info.status == "complete" and info.persisted == 12
        assert info.report["run"]["context"] == {NAME: domain}
        assert_all_under(run_id, domain)


@pytest.mark.parametrize("strategy", ["sequential", "threads", "per-model"])
def test_other_strategies_carry_the_domain_too(strategy, sim, sqlite_url):
    with Session(db=sqlite_url, broker="memory", width=3) as session:
        with publishing_domain("acme"):
            run = session.submit(catalog("inline", ["s0", "s1", "s2"]), ["sim/a", "sim/b"], strategy=strategy,
                                 adapter="acme")
        info = session.wait(run.id, timeout=WAIT, poll=0.5)
    assert info.status == "complete" and info.report["run"]["context"] == {NAME: "acme"}
    assert_all_under(run.id, "acme")


def test_with_one_worker_thread_a_message_without_context_sees_none_after_one_with(backend):
    session = backend.session(threads=1)
    with publishing_domain("acme"):
        with_domain = session.submit(catalog("first", ["s0", "s1", "s2"]), ["sim/a"], adapter="acme")
    # Sent right behind it, from a thread with no domain: its messages run on the same single
    # worker thread, after messages that had "acme" restored.
    without = session.submit(catalog("second", ["t0", "t1", "t2"]), ["sim/a"], adapter="acme")
    assert finished(session, with_domain.id, backend).status == "complete"
    assert_all_under(with_domain.id, "acme")
    info = finished(session, without.id, backend)
    assert info.context is None and info.report["run"]["context"] is None
    results = store.list_results(without.id)
    assert len(results) == 3
    for r in results:
        assert r.status == "errored", (r.scenario_key, r.output)
        assert r.error.startswith("NoPublishingDomain: ") and "needs a publishing domain" in r.error
        assert "meta" not in (r.details or {})


def test_forged_altered_unsigned_or_replayed_context_is_rejected_and_never_restored(backend, sim, monkeypatch,
                                                                                   caplog):
    monkeypatch.setenv("EVALJOBS_CONTEXT_KEY", KEY)  # this process and (inherited) the worker's
    caplog.set_level(logging.ERROR, logger="evaljobs_middleware.context")
    session = backend.session(threads=2)
    with publishing_domain("acme"):
        signed_run = session.submit(catalog("signed", ["s0", "s1"]), ["sim/a"], adapter="acme")
    finished(session, signed_run.id, backend)
    assert_all_under(signed_run.id, "acme")  # signing on: a genuine context still travels

    binding = session.binding()
    actor = binding.actors.evaluate_scenario
    context_mw = next(m for m in binding.broker.middleware if isinstance(m, ContextMiddleware))
    target = store.create_run(catalog("target", ["forged", "altered", "unsigned", "replayed", "genuine"]),
                              ["sim/a"], strategy="fanout", options={"adapter": "acme"})
    store.mark_running(target.id)

    def message(key: str, context: dict | None = None):
        msg = actor.message(target.id, key, "sim/a")
        if context is not None:
            msg.options["context"] = context
        return msg

    altered = context_mw.attach(message("altered"), {NAME: "acme"})
    altered.options["context"]["v"][NAME] = "evil"
    replayed_from = context_mw.attach(actor.message(signed_run.id, "s0", "sim/a"), {NAME: "evil"})
    bad = [
        message("forged", {"v": {NAME: "evil"}, "sig": "0" * 64}),
        altered,
        message("unsigned", {"v": {NAME: "evil"}}),
        message("replayed", replayed_from.options["context"]),  # valid signature, another run's binding
    ]
    requests_before = sim.stats()["requests"]
    for msg in bad:
        binding.broker.enqueue(msg)
    # A genuine message behind them proves the worker was alive and restoring.
    binding.broker.enqueue(context_mw.attach(message("genuine"), {NAME: "acme"}))

    def settled() -> bool:
        return backend.dead_letters(session) >= len(bad) and store.is_recorded(target.id, "genuine", "sim/a")

    assert wait_until(settled, WAIT, 0.1), backend.worker_log()
    results = store.list_results(target.id)
    assert [r.scenario_key for r in results] == ["genuine"]
    assert results[0].details["meta"] == {NAME: "acme"}
    assert sim.stats()["requests"] - requests_before == 1  # none of the rejected messages reached the adapter
    assert backend.dead_letters(session) == len(bad)
    logs = backend.worker_log() if backend.kind != "memory" else caplog.text
    assert logs.count("context signature invalid (altered or forged); dead-lettering") >= len(bad), logs
    assert current_domain() is None


def test_a_context_value_that_cannot_travel_fails_at_submit_naming_its_provider(sim, sqlite_url):
    holder = threading.local()
    tenant = ThreadLocalProvider("tenant_session", holder, "value")
    with Session(db=sqlite_url, broker="memory", width=1,
                 context_providers=[domain_provider(), tenant]) as session:
        for value in (object(), math.nan):
            holder.value = value
            with publishing_domain("acme"):
                with pytest.raises(ContextError, match="'tenant_session'"):
                    session.submit(catalog("bad", ["s0"]), ["sim/a"], adapter="acme")
            assert store.list_runs() == [], f"a run was left behind for {value!r}"
        del holder.value
        with publishing_domain("acme"):
            run = session.submit(catalog("good", ["s0"]), ["sim/a"], adapter="acme")
        info = session.wait(run.id, timeout=WAIT, poll=0.5)
    assert info.status == "complete" and info.context == {NAME: "acme"}


@pytest.mark.redis
def test_recover_after_redis_is_flushed_keeps_the_runs_original_context(sim, redis_url, sqlite_url, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("EVALJOBS_CONTEXT_KEY", KEY)  # re-enqueued messages must be signed for this run
    log = tmp_path / "worker.log"
    with Session(db=sqlite_url, broker=redis_url) as session:
        with publishing_domain("acme"):
            run = session.submit(catalog("lost", [f"s{i}" for i in range(5)]), ["sim/a"], adapter="acme")
        redis_lib.Redis.from_url(redis_url).flushall()  # no worker yet: start_run is gone
        # `evaljobs recover` in a process of its own, where no domain was ever set.
        done = subprocess.run([sys.executable, "-m", "evaljobs", "recover", run.id, "--db", sqlite_url,
                               "--broker", redis_url], cwd=ROOT, env=dict(os.environ), capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"{run.id}: re-enqueued 5 of 5 missing pairs" in done.stdout
        with WorkerProcess(redis_url, sqlite_url, threads=2, log=log):
            info = session.wait(run.id, timeout=WAIT, poll=0.5)
    assert info.status == "complete", log.read_text()[-3000:]
    assert info.report["run"]["context"] == {NAME: "acme"}
    assert_all_under(run.id, "acme")
