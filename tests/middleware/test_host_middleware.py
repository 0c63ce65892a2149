"""A host's own Dramatiq middleware on evaljobs' workers, and the plain `dramatiq evaljobs.workers.boot` CLI.

Host middleware goes after evaljobs' stack (documented in evaljobs.pipeline.host_middleware):
its before- and after-hooks both run with the host context that ContextMiddleware restored.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from acme_host import publishing_domain

from evaljobs import config
from evaljobs.api import Session
from evaljobs.pipeline.broker import middleware_stack
from evaljobs.pipeline.host_middleware import MiddlewareError, discover, host_middleware
from evaljobs.testing import run_catalog
from evaljobs_middleware.context import ContextMiddleware
from helpers.host_middleware_recorder import Recorder
from helpers import WorkerProcess, wait_until

CATALOG = {
    "name": "mw",
    "scenarios": [
        {"key": k, "prompt": f"publish {k}", "expect": {"contains": ["published for"]}} for k in ("a", "b")
    ],
}
ACTORS = {"start_run", "evaluate_scenario", "finalize_run"}


@pytest.fixture
def host_settings(monkeypatch):
    """EVALJOBS_MIDDLEWARE names the recorder (what `evaljobs worker --middleware` sets for its workers)."""
    previous = config.settings()
    monkeypatch.setenv("EVALJOBS_MIDDLEWARE", "helpers.host_middleware_recorder:Recorder")
    config.configure()
    Recorder.seen = []
    yield
    config.configure(previous)


def test_host_middleware_sees_the_restored_context_in_every_actor(host_settings, request):
    stack = middleware_stack()
    assert isinstance(stack[0], ContextMiddleware) and isinstance(stack[-1], Recorder)  # first … last
    # The plugin's broker, worker and session, built now that EVALJOBS_MIDDLEWARE names the recorder.
    run = request.getfixturevalue("evaljobs_run")
    finished = run(CATALOG, ["sim/fast"], adapter="acme", context=publishing_domain("acme"))
    assert finished.status == "complete"
    assert {actor for _, actor, _ in Recorder.seen} == ACTORS
    assert {(hook, domain) for hook, _, domain in Recorder.seen} == {("before", "acme"), ("after", "acme")}


def test_a_bad_host_middleware_reference_is_one_line():
    with pytest.raises(
        MiddlewareError, match=r"cannot load host middleware 'nowhere:Thing': No module named"
    ):
        host_middleware(["nowhere:Thing"])
    with pytest.raises(MiddlewareError, match=r"is a object, not a dramatiq.Middleware"):
        host_middleware(["helpers.host_middleware_recorder:not_a_middleware"])
    with pytest.raises(MiddlewareError, match=r"is not module:Class"):
        host_middleware(["Recorder"])


def test_the_entry_point_group_adds_installed_host_middleware(tmp_path, monkeypatch):
    dist = tmp_path / "acme_audit-1.0.dist-info"
    dist.mkdir()
    dist.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: acme-audit\nVersion: 1.0\n")
    dist.joinpath("entry_points.txt").write_text(
        "[evaljobs.middleware]\naudit = helpers.host_middleware_recorder:Recorder\n"
    )
    assert Recorder not in [type(m) for m in discover()]
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [type(m) for m in discover()] == [Recorder]


@pytest.mark.parametrize("url, shown", [(None, ""),
                                        ("sqs://bob:S3cretPw@localhost/", " (EVALJOBS_BROKER_URL='sqs://bob:***@localhost/')"),
                                        ("amqp://bob:S3cretPw@localhost/", "amqp")],
                         ids=["unset", "not-a-broker-with-a-password", "amqp-without-a-state-redis"])
def test_plain_dramatiq_cli_without_a_broker_url_exits_with_one_line(tmp_path, url, shown):
    """The line is written to the worker process's own stderr: Dramatiq's log pipe lost it now and then
    on a busy machine (its watcher stops reading when the worker exits). A password never shows."""
    env = config.child_environment()
    env.pop("EVALJOBS_BROKER_URL", None)
    if url:
        env["EVALJOBS_BROKER_URL"] = url
    env["EVALJOBS_DATABASE_URL"] = f"sqlite:///{tmp_path}/x.db"
    done = subprocess.run(
        [sys.executable, "-m", "dramatiq", "evaljobs.workers.boot", "--processes", "1", "--threads", "1"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    ours = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    if shown == "amqp":  # RabbitMQ carries only the messages: the budgets and events need a Redis
        assert ours == [
            "error: EVALJOBS_BROKER_URL='amqp://bob:***@localhost/' is RabbitMQ, which carries only the "
            "messages: set EVALJOBS_REDIS_URL=redis://host:port/db for the governor's budgets and the run "
            "events (docs/operations.md, RabbitMQ)"
        ], done.stderr
    else:
        assert ours == [
            f"error: evaljobs.workers.boot needs a shared broker{shown}: set EVALJOBS_BROKER_URL="
            "redis://host:port/db or amqp://… (or run `evaljobs worker --broker redis://...`)"
        ], done.stderr
    assert "Traceback" not in done.stderr and "S3cretPw" not in done.stderr + done.stdout


@pytest.mark.redis
def test_evaljobs_worker_middleware_option_on_real_worker_processes(
    redis_url, sqlite_url, tmp_path, monkeypatch, evaljobs_simulated
):
    record = tmp_path / "seen.jsonl"
    worker = WorkerProcess(redis_url, sqlite_url, threads=2, env={"HOST_MW_RECORD": str(record)},
                           log=tmp_path / "worker.log")
    worker.args += ["--middleware", "helpers.host_middleware_recorder:Recorder"]
    worker.start()
    try:
        with Session(db=sqlite_url, broker=redis_url) as session:
            finished = run_catalog(
                session, CATALOG, ["sim/fast"], adapter="acme", context=publishing_domain("zeta"), timeout=90
            )
        assert finished.status == "complete", (tmp_path / "worker.log").read_text()[-2000:]
        # finalize_run's after-hook runs just after the report is committed: wait for its row.
        assert wait_until(lambda: '["after", "finalize_run"' in record.read_text(), timeout=30)
        rows = [json.loads(line) for line in record.read_text().splitlines()]
        assert {actor for _, actor, _ in rows} == ACTORS
        assert {(hook, domain) for hook, _, domain in rows} == {("before", "zeta"), ("after", "zeta")}
    finally:
        worker.terminate(20)


@pytest.mark.redis
def test_evaljobs_worker_rejects_a_bad_middleware_in_one_line_before_starting(cli, redis_url):


    previous = config.settings()
    try:
        result = cli("worker", "--broker", redis_url, "--middleware", "nowhere:Thing")
    finally:
        config.configure(previous)
    assert result.exit_code == 2
    error = [line for line in result.output.splitlines() if "nowhere:Thing" in line]
    assert len(error) == 1 and "cannot load host middleware 'nowhere:Thing'" in error[0], result.output
