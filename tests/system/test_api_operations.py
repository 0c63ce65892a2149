"""The library calls behind the operations commands (worker, pool, view, governor, mock-provider, db,
providers, catalog, bench, cache, status): each decides what its command used to, and says so in
one line (a UsageError) for what a user can fix, before anything is started."""
from __future__ import annotations

import json
import socket
from contextlib import contextmanager

import pytest

from evaljobs import api, view
from evaljobs.api import ConvertedCatalog, ProviderList, Session
from evaljobs.errors import EvaljobsError, UsageError


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


# -- worker and pool -------------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["threads", "processes"])
def test_an_elastic_pool_refuses_the_sizes_it_would_ignore_before_contacting_anything(option):
    with pytest.raises(UsageError, match=f"--{option} does not apply to an elastic pool"):
        api.work(broker="redis://127.0.0.1:1/0", min=1, max=2, **{option: 3})


@pytest.mark.parametrize(("arguments", "message"), [
    ({"broker": "memory"}, "workers need a shared broker"),
    ({"broker": "redis://127.0.0.1:1/0", "lane": "fast"}, "'fast' is not a lane"),
    ({"broker": "redis://127.0.0.1:1/0", "recover_every": float("nan")}, "--recover-every=nan"),
    ({"broker": "redis://127.0.0.1:1/0", "min": 3, "max": 2},
     r"--max must be an integer of at least --min \(3\)"),
])
def test_a_worker_the_machine_should_not_start_is_one_line(arguments, message):
    with pytest.raises(UsageError, match=message):
        api.work(**arguments)


@pytest.mark.redis
@pytest.mark.parametrize("option", ["metrics_port", "health_port"])
def test_a_taken_port_is_refused_before_the_worker_forks(redis_url, taken_port, option):
    with pytest.raises(UsageError) as caught:
        api.work(broker=redis_url, **{option: taken_port})
    flag = "--" + option.replace("_", "-")
    assert str(caught.value).startswith(f"{flag}: cannot listen on 127.0.0.1:{taken_port}")


@pytest.mark.redis
def test_a_host_middleware_that_cannot_be_loaded_is_one_line(redis_url):
    with pytest.raises(UsageError, match="^--middleware: "):
        api.work(broker=redis_url, middleware=["no_such_module_here:Nothing"])


def test_a_pool_without_a_shared_broker_is_refused():
    with pytest.raises(UsageError, match="a pool needs a shared broker"):
        api.serve_pool(min=1, max=2, broker=None)


# -- servers ---------------------------------------------------------------------------------------


def test_the_simulated_provider_on_a_taken_port_is_one_line(taken_port):
    told = []
    with pytest.raises(UsageError, match=f"cannot listen on 127.0.0.1:{taken_port}"):
        api.serve_simulated_provider(port=taken_port, on_ready=told.append)
    assert told == [], "never ready: nothing listened"


def test_the_viewer_refuses_a_database_file_that_does_not_exist(tmp_path):
    typo = tmp_path / "typo.db"
    for call in (lambda: view.serve_viewer(db=f"sqlite:///{typo}"),
                 lambda: view.export_bundle("latest", str(tmp_path / "out"), db=f"sqlite:///{typo}")):
        with pytest.raises(UsageError, match="no database at"):
            call()
    assert not typo.exists(), "the viewer only reads: it creates no database"


def test_the_viewer_beyond_loopback_needs_a_token_even_to_export(tmp_path, sqlite_url):
    with pytest.raises(UsageError, match="--token"):
        view.export_bundle("latest", str(tmp_path / "out"), db=sqlite_url, host="0.0.0.0")


def test_the_viewer_on_a_taken_port_is_one_line_and_never_ready(tmp_path, taken_port):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    api.upgrade_schema(db)  # a database to show
    told = []
    with pytest.raises(UsageError, match=f"cannot listen on 127.0.0.1:{taken_port}"):
        view.serve_viewer(db=db, broker="memory", port=taken_port, on_ready=told.append)
    assert told == []


# -- governor --------------------------------------------------------------------------------------


def test_the_governor_without_redis_is_one_line(monkeypatch):
    monkeypatch.delenv("EVALJOBS_GOVERNOR_URL", raising=False)
    for broker in (None, "memory"):
        with pytest.raises(UsageError, match="the governor's shared state lives in Redis"):
            api.governor_budgets(broker)


@pytest.mark.redis
def test_the_governor_lists_the_budgets_it_has_seen(redis_url, monkeypatch):
    from evaljobs.governor import Governor

    monkeypatch.delenv("EVALJOBS_GOVERNOR_URL", raising=False)
    assert api.governor_budgets(redis_url) == []
    governor = Governor(redis_url)
    try:
        governor.acquire("sim/api-test", "bulk").release(latency=0.1)
    finally:
        governor.close()
    rows = api.governor_budgets(redis_url)
    assert [row["budget"] for row in rows] == ["sim/api-test"] and rows[0]["admitted"] == 1


# -- database, providers, catalogs, cache, status --------------------------------------------------


def test_the_schema_upgrade_names_the_database_without_its_password_and_is_idempotent(tmp_path):
    db = f"sqlite:///{tmp_path / 'fresh.db'}"
    labels = []

    @contextmanager
    def stage(label):
        labels.append(label)
        yield

    first = api.upgrade_schema(db, stage=stage)
    assert api.upgrade_schema(db) == [] and isinstance(first, list)
    assert labels == [f"db upgrade: {db}"]
    with pytest.raises(EvaljobsError, match="cannot reach database"):  # nothing listens on port 1
        api.upgrade_schema("postgresql://evals:hunter2@127.0.0.1:1/evals", stage=stage)
    assert labels[-1] == "db upgrade: postgresql://evals:***@127.0.0.1:1/evals"


def test_providers_are_listed_from_configuration_never_with_a_key(tmp_path, monkeypatch):
    path = tmp_path / "providers.yaml"
    path.write_text("providers:\n  acme:\n    api: openai\n    base_url: https://acme.example/v1\n"
                    "    api_key_env: ACME_TEST_KEY\n")
    monkeypatch.delenv("ACME_TEST_KEY", raising=False)
    listed = api.list_providers(str(path))
    assert isinstance(listed, ProviderList) and listed.source == str(path)
    acme = next(row for row in listed.rows if row["name"] == "acme")
    assert (acme["key"], acme["ready"], acme["origin"]) == ("missing", False, "file")
    monkeypatch.setenv("ACME_TEST_KEY", "sk-secret-value")
    acme = next(row for row in api.list_providers(str(path)).rows if row["name"] == "acme")
    assert (acme["key"], acme["ready"]) == ("set", True)
    assert "sk-secret-value" not in json.dumps(api.list_providers(str(path)).rows)


def test_the_catalog_schema_is_json_schema():
    schema = json.loads(api.catalog_schema())
    assert schema["$schema"].startswith("https://json-schema.org/") and "scenarios" in schema["properties"]


def test_a_converted_catalog_loads_as_the_native_catalog_it_claims_to_be(tmp_path):
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"input": "2+2?", "ideal": "4"}\n{"input": "3+3?", "ideal": "6"}\n')
    stages = []

    @contextmanager
    def stage(label, scenarios):
        stages.append((label, scenarios))
        yield

    converted = api.convert_catalog(samples, grader="match", stage=stage)
    assert isinstance(converted, ConvertedCatalog)
    assert (converted.format, converted.scenarios) == ("jsonl", 2)
    assert stages == [
        ("convert: checking 2 scenarios from jsonl", 2),
        ("convert: writing 2 scenarios as YAML", 2),
    ]
    native = tmp_path / "native.yaml"
    native.write_text(converted.text)
    assert api.check_catalog(native).scenarios == 2


def test_converting_a_missing_catalog_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        api.convert_catalog(tmp_path / "nope.yaml")


def test_the_cache_age_is_read_as_the_command_takes_it(sqlite_url):
    with Session(db=sqlite_url) as session:
        assert session.clear_cache("30m") == 0
        with pytest.raises(UsageError, match="--older-than"):
            session.clear_cache("soon")


def test_status_renders_itself_as_the_command_prints_it(sqlite_url):
    from evaljobs.workers.status import render

    with Session(db=sqlite_url) as session:
        info = session.status()
    assert info.render() == render(info) and info.render().startswith("runs: none active")


# -- bench -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arguments", "message"), [
    ({"worker_env": ["oops"]}, "--worker-env 'oops' is not NAME=VALUE"),
    ({"simulate": "latency=fast"}, "--simulate: "),
    ({"widths": "0"}, "width"),
])
def test_a_benchmark_with_a_bad_option_is_refused_before_it_runs(tmp_path, arguments, message):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("name: c\nscenarios: []\n")
    options = {"strategies": "sequential", "widths": "1", "repeat": 1, "cell_timeout": 60.0,
               "out": str(tmp_path / "out"), **arguments}
    with pytest.raises(UsageError, match=message):
        api.benchmark(str(catalog), ["sim/a"], **options)
    assert not (tmp_path / "out").exists(), "nothing ran, nothing written"


# -- init ------------------------------------------------------------------------------------------


def test_a_started_project_says_what_it_wrote_kept_and_what_to_run_next(tmp_path):
    from evaljobs.starter import CATALOG, start_project

    (tmp_path / ".git").mkdir()  # the folder is a repository's root: the workflow goes beside the catalog
    first = start_project(tmp_path / "evals")
    assert {w.action for w in first.written} == {"wrote"} and len(first.written) == 4
    assert first.next_commands[0] == f"evaljobs catalog check {(tmp_path / 'evals').as_posix()}/{CATALOG}"
    again = start_project(tmp_path / "evals")
    assert {w.action for w in again.written} == {"kept"}
    assert [w.path for w in again.written] == [w.path for w in first.written]


# -- the CLI's wording of an option the library refused --------------------------------------------


@pytest.mark.parametrize(("args", "line"), [
    (["worker", "--broker", "memory"],
     "error: Invalid value for --broker: workers need a shared broker: --broker redis://host:port/db or "
     "amqp://host:port/vhost (see `evaljobs worker --help`)"),
    (["--broker", "redis://127.0.0.1:1/0", "worker", "--min", "1", "--processes", "2"],
     "error: --processes does not apply to an elastic pool (--min/--max): its members are its threads, "
     "from --min to --max; drop --processes, or drop --min/--max for a fixed worker "
     "(see `evaljobs worker --help`)"),
    (["catalog", "check", "nope.yaml"],
     "error: Invalid value for PATH: catalog file 'nope.yaml' does not exist "
     "(see `evaljobs catalog check --help`)"),
])
def test_an_option_the_library_refused_reads_as_clicks_own_refusals(cli, tmp_path, monkeypatch, args, line):


    monkeypatch.chdir(tmp_path)
    result = cli(*args)
    assert (result.exit_code, result.output) == (2, line + "\n")


def test_an_option_error_names_its_option_for_a_caller_of_the_library():
    with pytest.raises(UsageError) as caught:
        api.work(broker="memory")
    assert str(caught.value) == ("--broker: workers need a shared broker: --broker redis://host:port/db or "
                                 "amqp://host:port/vhost")
