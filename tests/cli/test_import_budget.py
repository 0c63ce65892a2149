"""What a command imports (issue 20, start-up): nothing it does not use.

``evaljobs --help`` loads click and the option lists — no Redis client, no peewee or its
PostgreSQL driver, no httpx, no Dramatiq (so not its Redis broker), no command module; a run
on the embedded default (memory broker, SQLite) loads neither the Redis client nor psycopg2.
Ordinary tests, not timed: each runs the real command in a fresh interpreter under
``python -X importtime`` and reads which modules it ended with (a failure names the import
chain that brought the module in). The wall-clock figures are in BENCHMARKS.md.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import click
import click.testing

from evaljobs.cli import COMMANDS, load_command, main
from helpers.counting_provider import CountingProvider, handler_for

#: Runs the evaljobs console entry point with ARGS, then writes the imported modules to $MODULES_OUT.
_RUNNER = """
import json, os, sys
sys.argv = ['evaljobs'] + sys.argv[1:]
try:
    from evaljobs.cli import main
    main(prog_name='evaljobs')
except SystemExit as exc:
    code = exc.code
else:
    code = 0
import dataclasses
with open(os.environ['MODULES_OUT'], 'w') as out:
    modules = sorted(name for name, m in sys.modules.items() if m is not None)
    ours = [(name, m) for name, m in list(sys.modules.items())
            if m is not None and name.split('.')[0] in ('evaljobs', 'evaljobs_middleware')]
    built = sorted(f'{name}.{key}' for name, m in ours for key, value in vars(m).items()
                   if isinstance(value, type) and value.__module__ == name
                   and dataclasses.is_dataclass(value))
    json.dump({'code': code, 'modules': modules, 'dataclasses': built}, out)
"""

#: Dataclasses of evaljobs' own modules a one-scenario run builds at most (issue 42, item 2): each costs
#: its generated methods' source parsed and compiled at import, about 0.25 % of the run's instructions
#: (BENCHMARKS.md, "Start-up, session 13": 81 before, the value classes nothing replaces or compares by
#: field are NamedTuples now). A new one on the run's path is a deliberate choice: raise this with its
#: measured cost, or make it a NamedTuple, or load its module on first use.
RUN_DATACLASSES = 52

#: Never loaded by `evaljobs --help` (difflib: only a mistake needs a "did you mean").
HELP_FORBIDDEN = ("redis", "psycopg2", "peewee", "httpx", "dramatiq", "dramatiq.brokers.redis", "yaml",
                  "evaljobs.store", "evaljobs.api", "evaljobs.pipeline", "evaljobs.providers", "difflib")
#: Never loaded by a run on the memory broker with SQLite (nor the viewer, plots or MCP).
EMBEDDED_RUN_FORBIDDEN = (
    "redis",
    "redis.asyncio",
    "psycopg2",
    "dramatiq.brokers.redis",
    "playhouse.postgres_ext",
    "matplotlib",
    "mcp",
    "starlette",
    "uvicorn",
    "jinja2",
)
#: Nor what only other commands, other catalog formats or other report formats use: the converters of
#: foreign catalogs, reruns, recovery, reuse, comparisons, the JUnit (xml.etree) and HTML renderers, the
#: worker pool, ActiveAgent's diagnosis heuristics (regexes compiled at import) for a catalog without
#: `expect.diagnose`, and what is listed below.
EMBEDDED_RUN_UNUSED = (
    "evaljobs.catalog.importers.activeagent",
    "evaljobs.catalog.importers.promptfoo",
    "evaljobs.catalog.importers.promptfoo_assertions",
    "evaljobs.catalog.importers.jsonl",
    "evaljobs.pipeline.rerun",
    "evaljobs.pipeline.recovery",
    "evaljobs.pipeline.reuse",
    "evaljobs.reports.compare",
    "evaljobs.reports.junit",
    "evaljobs.reports.html",
    "xml.etree.ElementTree",
    "evaljobs.workers.serve",
    "evaljobs.workers.pool",
    "evaljobs.evaluation.diagnosis",
    # issue 42 (start-up): the viewer's queries and the reviewers' labels (the store's face loads them on
    # first use), promptfoo's assertions for a catalog without any, the OpenAI evals importer, the
    # brokers' and the fleet's modules for another broker, and the viewer itself
    "evaljobs.store.pages",
    "evaljobs.store.labels",
    "evaljobs.evaluation.promptfoo_checks",
    "evaljobs.catalog.importers.openai_evals",
    "evaljobs.pipeline.rabbitmq",
    "evaljobs.pipeline.dramatiq_internals",
    "pika",
    "evaljobs.workers.status",
    "evaljobs.workers.metrics",
    "evaljobs.view",
    # issue 42 (start-up): the regex engine for a catalog without a pattern, and importlib.metadata (the
    # entry points are read from the distributions' entry_points.txt: evaljobs/entry_points.py)
    "regex",
    "importlib.metadata",
    # httpx's command-line client, and pygments it imports when installed (pytest brings it)
    "pygments",
    "rich",
    # issue 42, item 2: the simulated provider's batch desk (and email.policy, for its multipart uploads),
    # made on the first batch request
    "evaljobs.simulated.batches",
    "email.policy",
    # the html module (html.entities' table) for a report that is not HTML
    "html",
    # issue 42, item 2 (session 13): the batch lane for a run that batches nothing (which providers a run
    # batches and the actors' sender are evaljobs.pipeline.batch_choice), and what is said of a stopped run
    "evaljobs.pipeline.batching",
    "evaljobs.providers.batches",
    "evaljobs.providers.batch_results",
    "evaljobs.store.batches",
    "evaljobs.store.partial",
)


def _chain(importtime: str, module: str) -> str:
    """The import chain that loaded ``module``, from ``-X importtime``'s indented listing."""
    rows = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        name = line.split("|")[2]
        rows.append(((len(name) - len(name.lstrip(" "))) // 2, name.strip()))
    for index, (depth, name) in enumerate(rows):
        if name == module:
            chain, want = [name], depth - 1
            for depth2, name2 in rows[index + 1:]:  # parents are listed after their children
                if depth2 == want:
                    chain.append(name2)
                    want -= 1
            return " <- ".join(chain)
    return module


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, set[str], str]:
    found, stderr = _run_found(tmp_path, *args, env=env)
    return found["code"], set(found["modules"]), stderr


def _run_found(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[dict, str]:
    out = tmp_path / "modules.json"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    environment.update(env or {}, MODULES_OUT=str(out))
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", _RUNNER, *args], capture_output=True,
                          text=True, env=environment, cwd=tmp_path, timeout=300)
    assert out.exists(), done.stderr[-3000:]
    return json.loads(out.read_text()), done.stderr


def _offenders(modules: set[str], forbidden: tuple[str, ...], importtime: str) -> list[str]:
    return [_chain(importtime, name) for name in forbidden if name in modules]


def test_help_imports_no_client_driver_or_command(tmp_path):
    code, modules, importtime = _run(tmp_path, "--help")
    assert code == 0
    assert _offenders(modules, HELP_FORBIDDEN, importtime) == []
    commands = sorted(m for m in modules if m.startswith("evaljobs.cli.") and m != "evaljobs.cli._options")
    assert commands == [], commands


def test_a_run_on_the_embedded_default_loads_neither_redis_nor_psycopg2(tmp_path):
    (tmp_path / "one.yaml").write_text(
        "name: one\nscenarios:\n  - key: hello\n    prompt: \"Say hi [sim: say hi there]\"\n"
        "    expect: {contains: [\"hi\"]}\n", encoding="utf-8")
    code, modules, importtime = _run(tmp_path, "run", "one.yaml", "-m", "sim/fast",
                                     env={"EVALJOBS_DATABASE_URL": f"sqlite:///{tmp_path}/run.db",
                                          "EVALJOBS_SIM_LATENCY": "0", "EVALJOBS_SIM_JITTER": "0"})
    assert code == 0, importtime[-3000:]
    # The run really ran: the pipeline, the store on SQLite and the provider client were loaded.
    assert {"evaljobs.pipeline.actors", "evaljobs.store", "sqlite3", "peewee", "httpx"} <= modules
    assert _offenders(modules, EMBEDDED_RUN_FORBIDDEN, importtime) == []
    assert _offenders(modules, EMBEDDED_RUN_UNUSED, importtime) == []


def test_a_run_builds_few_dataclasses_of_its_own(tmp_path):
    (tmp_path / "one.yaml").write_text(
        "name: one\nscenarios:\n  - key: hello\n    prompt: \"Say hi [sim: say hi there]\"\n"
        "    expect: {contains: [\"hi\"]}\n", encoding="utf-8")
    found, importtime = _run_found(tmp_path, "run", "one.yaml", "-m", "sim/fast",
                                   env={"EVALJOBS_DATABASE_URL": f"sqlite:///{tmp_path}/run.db",
                                        "EVALJOBS_SIM_LATENCY": "0", "EVALJOBS_SIM_JITTER": "0"})
    assert found["code"] == 0, importtime[-3000:]
    assert "evaljobs.evaluation.result.Result" in found["dataclasses"]  # it ran, and the count sees them
    assert len(found["dataclasses"]) <= RUN_DATACLASSES, found["dataclasses"]


def test_a_run_against_a_real_provider_loads_no_simulator(tmp_path):
    """The simulator (its HTTP server, answers and batch desk) loads when a ``sim/`` model is asked for,
    not for a run whose models are a provider's — here one we did not write, on loopback."""
    provider = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(CountingProvider(cap=4, latency=0.0,
                                                                                  announce=False)))
    provider.daemon_threads = True
    threading.Thread(target=provider.serve_forever, daemon=True).start()
    try:
        (tmp_path / "providers.yaml").write_text(
            f"providers:\n  counting:\n    api: openai\n    base_url: http://127.0.0.1:{provider.server_port}/v1\n",
            encoding="utf-8")
        (tmp_path / "one.yaml").write_text(
            "name: one\nscenarios:\n  - key: hello\n    prompt: \"Say ok\"\n"
            "    expect: {contains: [\"ok\"]}\n", encoding="utf-8")
        code, modules, importtime = _run(tmp_path, "run", "one.yaml", "-m", "counting/any",
                                         "--providers", "providers.yaml",
                                         env={"EVALJOBS_DATABASE_URL": f"sqlite:///{tmp_path}/run.db"})
    finally:
        provider.shutdown()
        provider.server_close()
    assert code == 0, importtime[-3000:]
    assert {"evaljobs.pipeline.actors", "httpx"} <= modules  # it ran, through the provider client
    assert _offenders(modules, ("evaljobs.simulated.server", "evaljobs.simulated.answers",
                                "evaljobs.simulated.batches"), importtime) == []


#: Never loaded by a submit to Redis (issue 42, item 3): the workers run the pairs, so the submitting command
#: checks and enqueues with the catalog, the store and the broker only, not the pair path (the provider
#: client and httpx, the adapters, the judge, the pair runner, the governor's permits, live tools).
REDIS_SUBMIT_UNUSED = (
    "httpx",
    "httpcore",
    "evaljobs.network.deadline",
    "evaljobs.providers.client",
    "evaljobs.providers.batches",
    "evaljobs.evaluation.adapters",
    "evaljobs.evaluation.judge",
    "evaljobs.evaluation.evaluate",
    "evaljobs.pipeline.pairs",
    "evaljobs.pipeline.runtime",
    "evaljobs.pipeline.barrier",
    "evaljobs.pipeline.prefetch",
    "evaljobs.pipeline.strategies",
    "evaljobs.pipeline.batching",
    "evaljobs.tools.live",
    "evaljobs.tools.http",
)


def test_a_submit_to_redis_imports_no_pair_path(tmp_path, redis_url):
    """`evaljobs run --broker redis://…` without --wait: every check still runs (a bad model is one line,
    tests/pipeline and tests/cli), the run is created and started, and nothing that runs a pair is loaded."""
    (tmp_path / "two.yaml").write_text(
        "name: two\nscenarios:\n  - key: hello\n    prompt: \"Say hi [sim: say hi there]\"\n"
        "    expect: {contains: [\"hi\"], regex: [\"h.\"]}\n"
        "  - key: judged\n    prompt: \"Say ok\"\n    expect: {judge: \"says ok\"}\n", encoding="utf-8")
    database = tmp_path / "run.db"
    code, modules, importtime = _run(tmp_path, "run", "two.yaml", "-m", "sim/fast", "--judge-model",
                                     "sim/judge", "--broker", redis_url,
                                     env={"EVALJOBS_DATABASE_URL": f"sqlite:///{database}"})
    assert code == 0, importtime[-3000:]
    # It submitted: the broker's client and the store were loaded, and the run waits in Redis for a worker.
    assert {"redis", "dramatiq.brokers.redis", "evaljobs.pipeline.actors", "peewee"} <= modules
    assert _offenders(modules, REDIS_SUBMIT_UNUSED, importtime) == []
    import redis

    from evaljobs import Session

    with Session(db=f"sqlite:///{database}", create=False) as session:
        (run,) = session.runs()
    assert (run.expected, run.options.get("adapter_version")) == (2, "conversation-1")
    client = redis.Redis.from_url(redis_url)
    try:  # its start_run message, for a worker to take
        assert client.hlen("dramatiq:agents.msgs") == 1
    finally:
        client.close()


def test_the_command_table_matches_the_commands():
    """`evaljobs --help` lists the commands from evaljobs.cli.COMMANDS without importing them: the
    names and short help written there are those of the commands themselves."""
    for name, (_module, _attribute, text) in COMMANDS.items():
        command = load_command(name)
        assert isinstance(command, click.Command) and command.name == name
        for limit in (45, 80, 200):
            assert click.Command(name, help=text).get_short_help_str(limit) == command.get_short_help_str(
                limit
            ), name
    assert load_command("no-such-command") is None
    assert main.get_command(click.Context(main), "no-such-command") is None


def test_help_lists_what_an_eagerly_built_group_lists(cli):
    eager = click.Group("main", help=main.help, params=main.params,
                        context_settings={"help_option_names": ["-h", "--help"]})
    for name in COMMANDS:
        eager.add_command(load_command(name), name)
    lazy_help = cli("--help", prog_name="evaljobs").output
    eager_help = cli("--help", command=eager, prog_name="evaljobs").output
    assert lazy_help == eager_help
    assert all(name in lazy_help for name in COMMANDS)


# -- psycopg2, attached to peewee late (evaljobs.store.drivers) -----------------------------------------

_DRIVER_STATE = """
import json, sys, uuid
{setup}
import peewee, psycopg2, psycopg2.extensions as ext
adapter = peewee.Psycopg2Adapter
db = peewee.PostgresqlDatabase('nowhere')
print(json.dumps({{
    'psycopg2': peewee.psycopg2 is psycopg2,
    'pg_extensions': peewee.pg_extensions is ext,
    'json': getattr(peewee.Json_pg2, '__module__', None) + '.' + peewee.Json_pg2.__name__,
    'statuses': [adapter.txn_idle, adapter.txn_inerror, adapter.txn_unknown],
    'adapter': type(db._adapter).__name__,
    'db_json': db._adapter.json_type is peewee.Json_pg2,
    'uuid_adapted': any(key[0] is uuid.UUID for key in ext.adapters),
    'typecasters': sorted(ext.string_types),
}}))
"""


def _json_of(script: str, setup: str) -> dict:
    """What ``script`` (with ``setup`` filled in) prints as JSON, run in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", script.format(setup=setup)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _driver_state(setup: str) -> dict:
    return _json_of(_DRIVER_STATE, setup)


def test_psycopg2_attached_late_leaves_peewee_as_its_own_import_would():
    """Pins peewee's import-time driver set-up that drivers.attach_psycopg2 repeats: a peewee imported
    by evaljobs.store (psycopg2 hidden), then a PostgreSQL database created, has the same driver state
    as a peewee that imported psycopg2 itself. If this fails after a peewee upgrade, fix drivers.py."""
    own = _driver_state("")
    late = _driver_state("import evaljobs.store\nassert 'psycopg2' not in sys.modules")
    assert own["psycopg2"] and own["pg_extensions"] and own["adapter"] == "Psycopg2Adapter"
    assert late == own


# -- one entry-point scan for every group (evaljobs.pipeline.host_middleware.installed) -----------------

def test_one_scan_of_installed_packages_serves_every_group_until_sys_path_changes(tmp_path, monkeypatch):
    """A run looks up host middleware and context providers: one scan of the installed packages'
    metadata serves both; a package made importable later (sys.path changed) is still found."""
    from importlib import metadata

    from evaljobs import entry_points
    from evaljobs.pipeline import host_middleware

    scans = []
    scan = entry_points.installed

    def counting_scan(group=None):
        assert group is None  # the whole set, selected per group afterwards
        scans.append(1)
        return scan()

    monkeypatch.setattr(entry_points, "installed", counting_scan)
    monkeypatch.setattr(host_middleware, "_scanned", None)
    first = host_middleware.installed("evaljobs.middleware")
    host_middleware.installed("evaljobs.context_providers")
    assert len(scans) == 1
    assert [(ep.name, ep.value) for ep in first] == [
        (ep.name, ep.value) for ep in metadata.entry_points(group="evaljobs.middleware")]

    dist = tmp_path / "acme_startup-1.0.dist-info"
    dist.mkdir()
    dist.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: acme-startup\nVersion: 1.0\n")
    dist.joinpath("entry_points.txt").write_text("[evaljobs.startup_test]\nprobe = json:dumps\n")
    assert [ep.name for ep in host_middleware.installed("evaljobs.startup_test")] == []
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [ep.value for ep in host_middleware.installed("evaljobs.startup_test")] == ["json:dumps"]
    assert len(scans) == 2


# -- httpx without its command-line client (evaljobs.network.http_client) -----------------------------

_HTTPX_MAIN = """
import json, sys

class Watch:  # records every attempt to import httpx's CLI module, found or not
    attempts = 0
    def find_spec(self, name, path=None, target=None):
        if name == 'httpx._main':
            Watch.attempts += 1
        return None

sys.meta_path.insert(0, Watch())
{setup}
import httpx
attempted = Watch.attempts
pygments = 'pygments' in sys.modules
try:
    import httpx._main
    later = 'imported'
except ImportError as exc:
    later = type(exc).__name__ + ': ' + str(exc)
print(json.dumps({{'attempted_with_httpx': attempted, 'pygments': pygments, 'later': later}}))
"""


def _httpx_main(setup: str) -> dict:
    return _json_of(_HTTPX_MAIN, setup)


def test_httpx_is_imported_without_its_cli_and_the_cli_still_imports_later():
    """evaljobs imports httpx without trying ``httpx._main`` (pygments, rich); asking for it afterwards
    behaves exactly as in a process without evaljobs (imported, or the same ImportError)."""
    plain = _httpx_main("")
    ours = _httpx_main("import evaljobs.providers.client")
    assert plain["attempted_with_httpx"] == 1  # what httpx does on its own: `from ._main import main`
    assert ours["attempted_with_httpx"] == 0 and ours["pygments"] is False
    assert ours["later"] == plain["later"]
