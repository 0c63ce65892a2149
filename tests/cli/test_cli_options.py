"""The same option names everywhere: walk every command's --help (click's command tree) and check the shared
options.

--db (database), --broker (never --redis), --providers where a command reads provider settings,
--json where a command prints data (report keeps --format json), each shared option reading one
environment variable, and --db/--broker given once before the subcommand.
"""
from __future__ import annotations

import json

import click

from evaljobs.cli import main


def _commands(group: click.Group = main, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    out: dict[tuple[str, ...], click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out.update(_commands(command, path + (name,)))
        else:
            out[path + (name,)] = command
    return out


COMMANDS = _commands()

#: Commands that touch the database; the others (catalog tools, providers, the simulated provider, init,
#: the governor, which lives in Redis) must not pretend to.
DATABASE = {
    ("run",),
    ("runs",),
    ("show",),
    ("report",),
    ("compare",),
    ("db", "upgrade"),
    ("demo",),
    ("worker",),
    ("cancel",),
    ("pool",),
    ("recover",),
    ("watch",),
    ("status",),
    ("rerun",),
    ("cache", "clear"),
    ("bench",),
    ("view",),
    ("labels", "export"),
    ("labels", "import"),
    ("judge-agreement",),
}
BROKER = {
    ("run",),
    ("worker",),
    ("pool",),
    ("recover",),
    ("watch",),
    ("status",),
    ("rerun",),
    ("bench",),
    ("view",),
    ("governor",),
}
#: Commands that read provider settings (base URLs, keys, prices, the default judge) — recover evaluates
#: the recovered pairs itself with --broker memory.
PROVIDERS = {("run",), ("catalog", "check"), ("catalog", "convert"), ("worker",), ("pool",), ("bench",),
             ("rerun",), ("recover",), ("providers", "list"), ("providers", "check"), ("cancel",)}
#: Commands that print data: each has --json (report has --format json). Not here: servers and daemons
#: (worker, pool, view, mock-provider), init (it writes files), catalog schema (JSON already), catalog
#: convert (its output is the YAML), bench (it writes JSON files in --out), labels export (JSONL already).
DATA = {
    ("run",),
    ("runs",),
    ("show",),
    ("compare",),
    ("status",),
    ("governor",),
    ("catalog", "check"),
    ("recover",),
    ("db", "upgrade"),
    ("cache", "clear"),
    ("watch",),
    ("rerun",),
    ("demo",),
    ("providers", "list"),
    ("providers", "check"),
    ("judge-agreement",),
}

#: Where a shared option deliberately ignores its variable, and why.
OWN_DEFAULT = {
    (("bench",), "--db"): ("each benchmark writes a fresh SQLite file in --out, never the shared database")
}


def _options(command: click.Command) -> dict[str, click.Option]:
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in p.opts}


def _with(option: str) -> set[tuple[str, ...]]:
    return {path for path, command in COMMANDS.items() if option in _options(command)}


def test_every_help_works_and_lists_its_options(cli) -> None:
    assert len(COMMANDS) >= 24, sorted(COMMANDS)  # the walk found the whole tree (groups included)
    for path, command in sorted(COMMANDS.items()):
        result = cli(*path, "--help")
        assert result.exit_code == 0, (path, result.output)
        for option, param in _options(command).items():
            if option.startswith("--") and not param.hidden:
                assert option in result.output, (path, option)
    top = cli("--help")
    assert top.exit_code == 0 and "--db URL" in top.output and "--broker URL" in top.output


def test_shared_options_have_one_name_each() -> None:
    assert _with("--redis") == set(), "use --broker for the Redis the broker and the governor share"
    assert _with("--db") == DATABASE
    assert _with("--broker") == BROKER
    assert _with("--providers") == PROVIDERS
    assert _with("--json") == DATA, (sorted(DATA - _with("--json")), sorted(_with("--json") - DATA))
    assert "json" in _options(COMMANDS[("report",)])["--format"].type.choices
    for option in ("--db", "--broker", "--providers", "--json"):  # one spelling of the flag's destination
        names = {_options(COMMANDS[path])[option].name for path in _with(option)}
        assert len(names) == 1, (option, names)


def test_a_shared_option_reads_one_variable() -> None:
    for option, envvar in (("--db", "EVALJOBS_DATABASE_URL"), ("--broker", "EVALJOBS_BROKER_URL"),
                           ("--providers", "EVALJOBS_PROVIDERS")):
        for path in _with(option):
            if (path, option) in OWN_DEFAULT:
                assert _options(COMMANDS[path])[option].envvar is None, path
                continue
            assert _options(COMMANDS[path])[option].envvar == envvar, (path, option)


def test_global_db_before_the_subcommand(cli, tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/global.db"
    missing = cli("--db", url, "runs", "--json", env={"EVALJOBS_DATABASE_URL": None})
    assert missing.exit_code == 2 and "no database at" in missing.output, missing.output  # `runs` only reads
    assert not (tmp_path / "global.db").exists()
    equals = cli(f"--db={url}", "db", "upgrade", "--json")
    assert equals.exit_code == 0 and isinstance(json.loads(equals.stdout)["changes"], list), equals.output
    listed = cli("--db", url, "runs", "--json", env={"EVALJOBS_DATABASE_URL": None})
    assert listed.exit_code == 0 and json.loads(listed.stdout) == [], listed.output
    own = tmp_path / "own.db"
    wins = cli("--db", url, "db", "upgrade", "--db", f"sqlite:///{own}", "--json")
    assert wins.exit_code == 0 and own.exists(), wins.output  # the command's own --db wins
    wrong = cli("--db", url, "init", str(tmp_path / "x"))
    assert wrong.exit_code == 2 and "--db does not apply to `evaljobs init`" in wrong.output
    assert "Traceback" not in wrong.output and not (tmp_path / "x").exists()
    dangling = cli("--broker")
    assert dangling.exit_code == 2 and "--broker needs a value" in dangling.output


def test_global_broker_before_the_subcommand(cli, tmp_path) -> None:
    """`evaljobs --broker memory recover` reaches recover's own --broker (here with --json)."""
    url = f"sqlite:///{tmp_path}/broker.db"
    done = cli("--broker", "memory", "--db", url, "recover", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"actions": [], "runs": []}
    bad = cli("--broker", "memory", "catalog", "schema")
    assert bad.exit_code == 2 and "--broker does not apply to `evaljobs catalog schema`" in bad.output


def test_json_outputs_parse(cli, tmp_path) -> None:
    """The --json added for this issue print one JSON document on stdout (messages stay on stderr)."""
    url = f"sqlite:///{tmp_path}/json.db"
    env = {"EVALJOBS_DATABASE_URL": url}
    cleared = cli("cache", "clear", "--json", env=env)
    assert cleared.exit_code == 0 and json.loads(cleared.stdout) == {"removed": 0, "older_than": None}
    support = "examples/catalogs/support.yaml"
    checked = cli("catalog", "check", support, "--json", env=env)
    assert checked.exit_code == 0, checked.output
    data = json.loads(checked.stdout)
    assert data["format"] == "native" and data["scenarios"] == 14 and data["digest"].startswith("sha256:")
