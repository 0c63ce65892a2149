"""Settings cross the process boundary with the run, and a Session takes its settings explicitly.

* ``evaljobs run --providers FILE`` on Redis: the providers definition the run was submitted with
  (variable names, never their values) is stored with the run, and a worker process started
  without ``EVALJOBS_PROVIDERS`` evaluates its pairs with it (real Redis, a real ``evaljobs
  worker`` process, the simulated provider over loopback).
* ``Session(settings=...)`` makes those settings the process's; without them, an ``EVALJOBS_*``
  variable changed since the settings were read is honoured, and an unusable one refused.
"""

from __future__ import annotations

import json
import os

import dramatiq
import pytest
import redis as redis_lib

from evaljobs import config, store
from evaljobs.api import Session
from evaljobs.errors import UsageError
from helpers import WorkerProcess, evaljobs_cli

CATALOG = (
    'name: travel\nscenarios:\n  - key: hello\n    prompt: "[sim: say hello there]"\n'
    "    expect: {contains: [hello]}\n"
)


def _acme_providers(tmp_path, url: str, extra: str = ""):
    """A providers file the worker does not have: provider ``acme`` at ``url``, a header from a variable."""
    providers = tmp_path / "providers.yaml"
    providers.write_text(
        f"providers:\n  acme:\n    api: openai\n    base_url: {url}\n"
        "    headers: {X-Team-Token: '${ACME_TOKEN}'}\n" + extra
    )
    return providers


def test_providers_given_to_run_reach_a_redis_worker_started_without_them(
    tmp_path, redis_url, sqlite_url, simulated_provider
):
    sim = simulated_provider(latency=0.0, export=False)
    providers = _acme_providers(tmp_path, sim.url, extra="    checked: 2026-11-30\n")
    catalog = tmp_path / "travel.yaml"
    # the judge's provider is in the file too: the worker's judge uses the stored providers as well
    catalog.write_text(CATALOG + "  - key: judged\n    prompt: \"My parcel is late. [sim: say I'm sorry the "
                       "parcel is late; I will help and track it now.]\"\n    expect: {judge: \"The answer "
                       "says sorry, offers help and tracks the parcel.\"}\n")
    secret = "s3cret-team-token-value"
    # the worker knows no providers file; its operator allows the run's endpoint and variable (invariant 20:
    # without, it sends nothing: tests/providers/test_worker_secrets.py)
    worker_env = {"ACME_TOKEN": secret, "EVALJOBS_PROVIDERS": "", "EVALJOBS_ALLOWED_ENV": "ACME_TOKEN",
                  "EVALJOBS_ALLOWED_BASE_URLS": sim.url}
    with WorkerProcess(redis_url, sqlite_url, threads=2, env=worker_env):
        ran = evaljobs_cli(
            "run",
            str(catalog),
            "-m",
            "acme/model-x",
            "--judge-model",
            "acme/judge",
            "--providers",
            str(providers),
            "--broker",
            redis_url,
            "--db",
            sqlite_url,
            "--wait",
            "--json",
            env={"ACME_TOKEN": secret, "EVALJOBS_PROVIDERS": ""},
            timeout=180,
        )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    report = json.loads(ran.stdout)
    assert report["summary"]["passed"] == 2, ran.stdout
    store.connect(sqlite_url)
    (run,) = store.list_runs()
    stored = run.options["providers"]
    assert stored["source"] == str(providers)
    assert stored["definition"]["providers"]["acme"]["headers"] == {"X-Team-Token": "${ACME_TOKEN}"}
    assert stored["definition"]["providers"]["acme"]["checked"] == "2026-11-30"  # YAML's date, stored as JSON
    with store.connection():
        row_text = json.dumps([list(r) for r in store.Run.select().tuples()], default=str)
    assert secret not in row_text  # the variable's name is stored, never its value


def test_a_batch_run_given_providers_reaches_a_redis_worker_started_without_them(
    tmp_path, redis_url, sqlite_url, simulated_provider
):
    """The worker that collects, submits and polls a run's batches builds its batch client on the
    providers stored with the run, as its interactive calls do (it read its own file before)."""
    sim = simulated_provider(latency=0.0, export=False)
    providers = _acme_providers(tmp_path, sim.url)
    catalog = tmp_path / "travel.yaml"
    catalog.write_text(CATALOG)
    env = {"ACME_TOKEN": "s3cret-team-token-value", "EVALJOBS_PROVIDERS": "", "EVALJOBS_BATCH_WAIT": "0",
           "EVALJOBS_BATCH_POLL": "0.05", "EVALJOBS_ALLOWED_ENV": "ACME_TOKEN",
           "EVALJOBS_ALLOWED_BASE_URLS": sim.url}
    with WorkerProcess(redis_url, sqlite_url, threads=2, env=env):
        ran = evaljobs_cli(
            "run", str(catalog), "-m", "acme/model-x", "--batch", "--providers", str(providers),
            "--broker", redis_url, "--db", sqlite_url, "--wait", "--json", env=env, timeout=180,
        )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert json.loads(ran.stdout)["summary"]["passed"] == 1, ran.stdout
    assert sim.stats()["batches"]["batches_created"] == 1  # answered through a batch, not call by call


def test_a_providers_file_with_a_password_in_a_url_is_refused_before_a_run_exists(tmp_path, sqlite_url):
    providers = tmp_path / "providers.yaml"
    providers.write_text(
        "providers:\n  acme:\n    api: openai\n    base_url: http://bob:hunter2@127.0.0.1:9/v1\n"
    )
    catalog = tmp_path / "travel.yaml"
    catalog.write_text(CATALOG)
    with Session(db=sqlite_url, broker="memory", providers=str(providers)) as session:
        with pytest.raises(
            UsageError, match=r"provider 'acme': base_url has a password written in it; "
        ) as caught:
            session.submit(str(catalog), ["acme/model-x"])
        assert "hunter2" not in str(caught.value) and session.runs() == []


def test_a_session_takes_its_settings_explicitly(sqlite_url):
    given = config.Settings.from_env({}).replace(queue="explicit-queue", sim_url="http://127.0.0.1:9/v1")
    with Session(settings=given, db=sqlite_url):
        assert config.settings() == given and config.settings().queue == "explicit-queue"


def test_a_changed_environment_is_honoured_or_refused_never_ignored(sqlite_url, monkeypatch):
    with Session(db=sqlite_url):
        assert config.settings().queue == "agents"
    config.configure(config.settings(), sim_url="http://127.0.0.1:9/v1")  # set by code, not by a variable
    # os.environ itself (monkeypatch.setitem): the test fixture that re-reads settings on setenv is bypassed
    monkeypatch.setitem(os.environ, "EVALJOBS_QUEUE", "changed-queue")
    with Session(db=sqlite_url):
        assert config.settings().queue == "changed-queue"  # honoured
        assert (
            config.settings().sim_url == "http://127.0.0.1:9/v1"
        )  # what the environment did not change stays
    monkeypatch.setitem(os.environ, "EVALJOBS_TIME_LIMIT", "soon")
    with pytest.raises(UsageError, match="EVALJOBS_TIME_LIMIT"):  # refused, in one line
        Session(db=sqlite_url)


LIMITS_CATALOG = """name: limits
scenarios:
  - {key: slow, prompt: "[sim: ratelimit 100]"}
  - {key: failing, prompt: "[sim: status 500 down]"}
  - {key: limited, prompt: "[sim: ratelimit 1]"}
"""


def test_the_submitters_limits_reach_a_redis_worker_started_with_others(
    tmp_path, redis_url, sqlite_url, simulated_provider
):
    """The per-pair limits in force where a run is submitted (``EVALJOBS_TIME_LIMIT``, ``_MAX_RETRIES``,
    ``_MAX_RATE_LIMIT_WAITS``, the backoffs) are stored with it and applied by a worker process whose
    environment says otherwise. With the worker's own, the first pair would wait out a 100 s
    ``Retry-After`` (within its 600 s), the second make 5 requests, the third wait 50 times."""
    sim = simulated_provider(latency=0.0, export=False)
    providers = tmp_path / "providers.yaml"
    providers.write_text(f"providers:\n  acme:\n    api: openai\n    base_url: {sim.url}\n")
    catalog = tmp_path / "limits.yaml"
    catalog.write_text(LIMITS_CATALOG)
    common = {"EVALJOBS_PROVIDERS": str(providers), "EVALJOBS_GOVERNOR": "off"}
    submitter = dict(common, EVALJOBS_TIME_LIMIT="7", EVALJOBS_MAX_RETRIES="1",
                     EVALJOBS_MAX_RATE_LIMIT_WAITS="0", EVALJOBS_MIN_BACKOFF="0.01",
                     EVALJOBS_MAX_BACKOFF="0.02")
    worker = dict(common, EVALJOBS_TIME_LIMIT="600", EVALJOBS_MAX_RETRIES="4",
                  EVALJOBS_MAX_RATE_LIMIT_WAITS="50", EVALJOBS_MIN_BACKOFF="0.01",
                  EVALJOBS_MAX_BACKOFF="0.03")
    log = tmp_path / "worker.log"
    with WorkerProcess(redis_url, sqlite_url, threads=3, env=worker, log=log):
        ran = evaljobs_cli("run", str(catalog), "-m", "acme/model-x", "--broker", redis_url,
                           "--db", sqlite_url, "--wait", "--json", env=submitter, timeout=120)
    assert ran.returncode == 1, ran.stdout + ran.stderr  # every pair errored, none hung
    store.connect(sqlite_url)
    (run,) = store.list_runs()
    assert {k: run.options[k] for k in ("time_limit", "max_retries", "max_rate_limit_waits",
                                        "min_backoff", "max_backoff")} == {
        "time_limit": 7.0, "max_retries": 1, "max_rate_limit_waits": 0, "min_backoff": 0.01,
        "max_backoff": 0.02}
    errors = {r.scenario_key: (r.status, r.attempts, r.error) for r in store.list_results(run.id)}
    status, _, error = errors["slow"]
    assert status == "errored" and "left of the pair's 7 s time limit" in error, errors
    assert errors["failing"][:2] == ("errored", 2), errors
    assert errors["failing"][2].endswith("(gave up after 2 attempts)"), errors
    assert errors["limited"][0] == "errored", errors
    assert errors["limited"][2].startswith("still rate limited after 0 waits"), errors
    # the worker says so (when it builds the run's plan): never a silent choice between two values
    text = log.read_text(errors="replace")
    assert f"run {run.id}: the limits stored with it apply: time_limit 7 (this process: 600), " \
           "max_retries 1 (this process: 4), max_backoff 0.02 (this process: 0.03), " \
           "max_rate_limit_waits 0 (this process: 50)" in text, text[-3000:]


def test_pair_messages_carry_the_runs_time_limit_for_dramatiqs_backstop(redis_url, sqlite_url,
                                                                       simulated_provider):
    """Dramatiq's own time limit (a backstop, 30 s past the pair's) is the run's, carried in each pair
    message: the actors are declared with the worker's limit (180 s here), and a run of 900 s would
    have its pairs interrupted at 210 s by any worker that did not submit it."""
    from evaljobs.catalog import loads_catalog
    from evaljobs.pipeline import actors

    simulated_provider(latency=0.0)
    catalog = loads_catalog(CATALOG + '  - key: again\n    prompt: "[sim: say hello]"\n', source="t.yaml")
    with Session(db=sqlite_url, broker=redis_url) as session:
        run = session.submit(catalog, ["sim/a"], time_limit=900)  # no worker: start_run waits in Redis
        assert session.binding().actors.evaluate_scenario.options["time_limit"] == 210_000
        actors.start_run(run.id)  # what a worker does with it
        client = redis_lib.Redis.from_url(redis_url)
        messages = [dramatiq.Message.decode(body) for body in client.hgetall("dramatiq:agents.msgs").values()]
        client.close()
    pairs = [m for m in messages if m.actor_name == "evaluate_scenario"]
    assert len(pairs) == 2 and {m.options.get("time_limit") for m in pairs} == {930_000}, pairs
