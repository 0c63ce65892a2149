"""Bad input is refused, never a traceback: catalogs, queue messages and the command line.

* Catalogs: hypothesis over the *text* the parser reads (test_catalog.py fuzzes the parsed data),
  and a corpus of hand-written bad catalogs with the exact message each must produce.
* Messages: malformed or unexpected actor arguments reach a real worker process through Redis;
  each is dead-lettered at once with its reason in the log, and none creates a result.
* CLI: every command, with unknown and invalid options, missing arguments and unreachable
  Redis, database or provider, answers with one `error:` line and a non-zero exit.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import Catalog, CatalogError, load_catalog, loads_catalog
from evaljobs.cli import main
from helpers.paths import CHILD_PYTHONPATH
from helpers import FAST, ROOT, WorkerProcess, free_port, numbered_catalog, redis_queue_state, wait_until

# --------------------------------------------------------------------------- catalogs: fuzzed text

VALID = """\
name: support
description: a catalog the mutations start from
defaults: {max_turns: 4, temperature: 0, criteria: [contains, expected_tools]}
groups:
  - name: orders
    scenarios:
      - key: order.status
        prompt: "Where is order 7?"
        tools:
          - name: lookup
            parameters: {type: object, properties: {id: {type: string}}}
            returns_by: {id: {"7": {status: shipped}}}
        expect: {contains: [shipped], tools: [lookup]}
scenarios:
  - key: refund
    system: You are a support agent.
    messages:
      - {role: user, content: "I want a refund"}
    expect: {contains: [refund], not_contains: [sorry], regex: "ref(und)?"}
    tags: [billing]
"""

_YAML_BITS = st.sampled_from(
    [
        ":",
        ": ",
        "-",
        "- ",
        "[",
        "]",
        "{",
        "}",
        ",",
        "'",
        '"',
        "&a ",
        "*a",
        "!!str ",
        "!!set ",
        "<<: ",
        "? ",
        "|",
        ">",
        "#",
        "%YAML 1.2",
        "---",
        "...",
        "\t",
        "\n",
        "  ",
        "    ",
        "\\",
        "\x00",
        "\ufeff",
        "key: ",
        "scenarios:",
        "name: ",
        "~",
        "null",
        "1e999",
        "-.inf",
        "0x1F",
        "2024-01-01",
        "\u2028",
        "é",
    ]
)


def _fails_cleanly(text: str, source: str = "fuzz.yaml") -> Catalog | None:
    """A catalog, or a CatalogError whose every problem is one line naming the file."""
    try:
        catalog = loads_catalog(text, source=source)
    except CatalogError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert isinstance(problem, str) and problem.startswith(source), problem
            assert "\n" not in problem and "\r" not in problem, problem
            assert "Traceback" not in problem
        return None
    assert isinstance(catalog, Catalog) and catalog.scenarios
    return catalog


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_YAML_BITS | st.text(max_size=6), max_size=40).map("".join))
def test_any_text_is_a_catalog_or_one_line_errors(text):
    _fails_cleanly(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_mutated_catalog_is_a_catalog_or_one_line_errors(data):
    """Near misses of a real catalog: what a hand edit, a bad merge or a truncated file produces."""
    text = VALID
    for _ in range(data.draw(st.integers(1, 4))):
        size = len(text)
        kind = data.draw(
            st.sampled_from(["insert", "delete", "replace", "duplicate-line", "truncate", "dedent"])
        )
        at = data.draw(st.integers(0, size))
        if kind == "insert":
            text = text[:at] + data.draw(_YAML_BITS) + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + data.draw(st.integers(1, 12)):]
        elif kind == "replace":
            text = text[:at] + data.draw(_YAML_BITS) + text[at + 1:]
        elif kind == "truncate":
            text = text[:at]
        else:
            lines = text.split("\n")
            index = data.draw(st.integers(0, len(lines) - 1))
            if kind == "duplicate-line":
                lines.insert(index, lines[index])
            else:
                lines[index] = lines[index][2:]
            text = "\n".join(lines)
    catalog = _fails_cleanly(text)
    if catalog is not None:  # whatever parses must survive its own snapshot round trip
        from evaljobs.catalog import catalog_from_body

        assert catalog_from_body(catalog.body).digest == catalog.digest


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_any_bytes_in_a_file_are_a_catalog_or_one_line_errors(tmp_path, raw):
    path = tmp_path / "bytes.yaml"
    path.write_bytes(raw)
    try:
        load_catalog(path)
    except CatalogError as exc:
        assert all(p.startswith(str(path)) and "\n" not in p for p in exc.problems), exc.problems


# --------------------------------------------------------------------------- catalogs: hand-written corpus

#: name -> (catalog text, the exact problems it must produce). Each one is a mistake people make.
CORPUS = {
    "prompt-and-messages": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    messages: [{role: user, content: hi}]\n",
        ["bad.yaml:5: scenario 'a': give either 'prompt' or 'messages', not both"],
    ),
    "no-prompt": (
        "name: x\nscenarios:\n  - key: a\n",
        ["bad.yaml:3: scenario 'a': missing 'prompt' (the user's message) or 'messages' (a conversation)"],
    ),
    "null-prompt": (
        "name: x\nscenarios:\n  - key: a\n    prompt: null\n",
        ["bad.yaml:3: scenario 'a': missing 'prompt' (the user's message) or 'messages' (a conversation)"],
    ),
    "unknown-role": (
        "name: x\nscenarios:\n  - key: a\n    messages: [{role: wizard, content: hi}]\n",
        [
            "bad.yaml:4: scenario 'a': messages[0]: role must be one of system, user, assistant, tool, not "
            "'wizard'"
        ],
    ),
    "message-without-content": (
        "name: x\nscenarios:\n  - key: a\n    messages: [{role: user}]\n",
        [
            "bad.yaml:4: scenario 'a': messages[0]: content must be a string, not null; quote it to make it "
            "text"
        ],
    ),
    "messages-not-a-list": (
        "name: x\nscenarios:\n  - key: a\n    messages: hello\n",
        [
            "bad.yaml:4: scenario 'a': messages must be a non-empty list of {role, content}, not a string "
            "('hello')"
        ],
    ),
    "contains-a-number": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {contains: 5}\n",
        ["bad.yaml:5: scenario 'a': expect.contains must be a string or a list of strings, not a number (5)"],
    ),
    "contains-empty-string": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {contains: ['']}\n",
        ["bad.yaml:5: scenario 'a': expect.contains entries must be non-empty strings, not ''"],
    ),
    "expected-tool-not-declared": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {tools: [lookup]}\n",
        [
            "bad.yaml:5: scenario 'a': expect.tools: 'lookup' is not one of this scenario's tools (the "
            "scenario declares no tools); declare it under 'tools' or fix the name"
        ],
    ),
    "tool-name-with-space": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    tools: [{name: 'bad name'}]\n",
        ["bad.yaml:5: scenario 'a': tool #1: name 'bad name' must be 1-64 letters, digits, '_' or '-'"],
    ),
    "tool-declared-twice": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    tools: [{name: t}, {name: t}]\n",
        [
            "bad.yaml:5: scenario 'a': tool 't': duplicate tool name (also tool #1); tool names must be "
            "unique within a scenario"
        ],
    ),
    "parameters-a-list": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    tools: [{name: t, parameters: [1]}]\n",
        [
            "bad.yaml:5: scenario 'a': tool 't': parameters must be a JSON-schema object (a mapping), not a "
            "list"
        ],
    ),
    "returns-by-a-number": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    tools: [{name: t, returns_by: 5}]\n",
        [
            "bad.yaml:5: scenario 'a': tool 't': returns_by must map argument name -> {argument value: "
            "result}, not a number (5)"
        ],
    ),
    "max-turns-true": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    max_turns: true\n",
        ["bad.yaml:5: scenario 'a': max_turns must be an integer >= 1, not True"],
    ),
    "temperature-a-word": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    temperature: hot\n",
        ["bad.yaml:5: scenario 'a': temperature must be a number from 0 to 2, not 'hot'"],
    ),
    "pass-threshold-over-one": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    pass_threshold: 1.5\n",
        [
            "bad.yaml:5: scenario 'a': pass_threshold must be a number from 0 to 1 (the score needed to "
            "pass), not 1.5"
        ],
    ),
    "unknown-criterion": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    criteria: [vibes]\n",
        [
            "bad.yaml:5: scenario 'a': criteria: unknown criterion 'vibes'; known: response_present, "
            "contains, not_contains, regex, expected_tools, max_latency_ms, token_budget, llm_judge, "
            "tools_succeeded, ideal, assertions"
        ],
    ),
    "group-without-name": (
        "name: x\ngroups:\n  - scenarios: [{key: a, prompt: hi}]\n",
        ["bad.yaml:3: group #1: missing 'name'"],
    ),
    "same-key-in-two-groups": (
        "name: x\ngroups:\n  - {name: g, scenarios: [{key: a, prompt: hi}]}\n"
        "  - {name: h, scenarios: [{key: a, prompt: hi}]}\n",
        [
            "bad.yaml:4: scenario 'a': duplicate key (first defined at line 3); scenario keys must be unique "
            "across the catalog: rename one"
        ],
    ),
    "tab-indentation": (
        "name: x\nscenarios:\n\t- key: a\n",
        [
            "bad.yaml:3: YAML syntax error: found character that cannot start any token (column 1), while "
            "scanning for the next token"
        ],
    ),
    "key-with-space": (
        "name: x\nscenarios:\n  - key: 'a b'\n    prompt: hi\n",
        [
            "bad.yaml:3: scenario #1: key 'a b' must be a string of letters, digits and _ . : / - (quote it "
            "if YAML reads it as a number)"
        ],
    ),
    "scenario-a-string": (
        "name: x\nscenarios:\n  - just a string\n",
        [
            "bad.yaml:3: scenario #1: must be a mapping with 'key' and 'prompt', not a string ('just a "
            "string')"
        ],
    ),
    "regex-unterminated": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {regex: '[a-'}\n",
        [
            "bad.yaml:5: scenario 'a': expect.regex '[a-' does not compile: unterminated character set at "
            "position 0; fix the pattern (escape special characters with \\)"
        ],
    ),
    "latency-negative": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {max_latency_ms: -5}\n",
        ["bad.yaml:5: scenario 'a': expect.max_latency_ms must be a positive integer, not -5"],
    ),
    "empty-rubric": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {judge: ''}\n",
        ["bad.yaml:5: scenario 'a': expect.judge must be a non-empty rubric string, not ''"],
    ),
    "expect-a-list": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    expect: [contains]\n",
        [
            "bad.yaml:5: scenario 'a': expect must be a mapping (contains, not_contains, regex, tools, "
            "judge, max_latency_ms, token_budget, patterns, forbidden_patterns, tools_match, reference, "
            "ideal, ideal_grader, assertions, gate, weighted, threshold, diagnose), not a list"
        ],
    ),
    "same-field-twice": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    prompt: again\n",
        [
            "bad.yaml:5: duplicate key 'prompt' in the same mapping (first at line 4); remove one: only the "
            "last would be used"
        ],
    ),
    "misspelled-scenarios": (
        "name: x\nscenarioz: []\n",
        [
            "bad.yaml:2: unknown top-level key 'scenarioz' (did you mean 'scenarios'?)",
            "bad.yaml: no scenarios; add at least one under 'scenarios' (or under a group's 'scenarios')",
        ],
    ),
    "system-a-number": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    system: 5\n",
        ["bad.yaml:5: scenario 'a': system must be a string (the system prompt), not a number (5)"],
    ),
    "set-as-a-key": (
        "!!set x: 1\n",
        ["bad.yaml:1: a mapping key must be a plain value, not a collection; catalogs use string keys"],
    ),
    "nesting-bomb": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    tools: [{name: t, returns: "
        + "[" * 2000
        + "]" * 2000
        + "}]\n",
        [
            "bad.yaml:5: YAML syntax error: exceeded maximum nesting depth (column 1027), while increasing "
            "flow level"
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_hand_written_bad_catalog_gives_exactly_its_message(name):
    text, expected = CORPUS[name]
    with pytest.raises(CatalogError) as info:
        loads_catalog(text, source="bad.yaml")
    assert info.value.problems == expected


# --------------------------------------------------------------------------- queue messages

@pytest.mark.redis
def test_malformed_and_unexpected_messages_are_dead_lettered_at_once_and_create_nothing(
    redis_url, sqlite_url, tmp_path, simulated_provider
):
    import dramatiq
    import redis as redis_lib

    log = tmp_path / "worker.log"
    simulated_provider(latency=0.01)
    with Session(db=sqlite_url, broker=redis_url) as session:
        binding = session.binding()
        actors = binding.actors
        run = store.create_run(numbered_catalog(2, "target"), ["sim/a"], strategy="fanout")
        # name -> (message, what the worker's log must say about it)
        bad = {
            "unknown-run": (
                actors.evaluate_scenario.message("r_doesnotexist", "s0000", "sim/a"),
                "unknown run 'r_doesnotexist'",
            ),
            "unknown-scenario": (
                actors.evaluate_scenario.message(run.id, "zzz", "sim/a"),
                f"scenario 'zzz' is not in run {run.id}'s catalog",
            ),
            "pair-outside-the-run": (
                actors.evaluate_scenario.message(run.id, "s0000", "sim/other"),
                f"model 'sim/other' is not part of run {run.id}",
            ),
            "wrong-types": (actors.evaluate_scenario.message(12345, None, ["x"]), "unknown run 12345"),
            "missing-arguments": (
                actors.evaluate_scenario.message(run.id),
                "missing a required argument: 'scenario_key'",
            ),
            "unknown-keyword": (
                actors.evaluate_scenario.message(run.id, "s0000", "sim/a", bogus=1),
                "got an unexpected keyword argument 'bogus'",
            ),
            "too-many-arguments": (
                actors.finalize_run.message(run.id, "extra"),
                "too many positional arguments",
            ),
            "start-unknown-run": (actors.start_run.message("r_nope"), "unknown run 'r_nope'"),
            "finalize-unknown-run": (actors.finalize_run.message("r_nope2"), "unknown run 'r_nope2'"),
            "model-outside-the-run": (
                actors.evaluate_model.message(run.id, "sim/zzz"),
                f"model 'sim/zzz' is not part of run {run.id}",
            ),
            "undefined-actor": (
                dramatiq.Message(
                    queue_name=binding.queue,
                    actor_name="no_such_actor",
                    args=(run.id,),
                    kwargs={},
                    options={},
                ),
                "undefined actor 'no_such_actor'",
            ),
        }
        redis_ids = {name: binding.broker.enqueue(message).options["redis_message_id"]
                     for name, (message, _) in bad.items()}
        with WorkerProcess(redis_url, sqlite_url, threads=2, env=FAST, log=log):
            assert wait_until(lambda: redis_queue_state(redis_url)["dead_letters"] >= len(bad), 60), \
                log.read_text()[-4000:]
            text = log.read_text(errors="replace")
            # A message Dramatiq itself cannot decode never reaches evaljobs: the worker logs it and
            # keeps serving (RELIABILITY.md: what anyone who can write to Redis can do).
            client = redis_lib.Redis.from_url(redis_url)
            client.hset(f"dramatiq:{binding.queue}.msgs", "garbage-1", b"\x00not a message{")
            client.rpush(f"dramatiq:{binding.queue}", "garbage-1")
            client.close()
            assert wait_until(lambda: "Failed to decode message" in log.read_text(errors="replace"), 30)
            actors.start_run.send(run.id)  # the worker still evaluates a good run
            assert wait_until(lambda: store.get_run(run.id).report is not None, 60), log.read_text()[-4000:]
            text = log.read_text(errors="replace")
    dead = _dead_letter_ids(redis_url, binding.queue)
    for name, (message, reason) in bad.items():
        assert redis_ids[name] in dead, f"{name} is not in the dead-letter queue"
        assert reason in text, f"{name}: no log line says {reason!r}"
        assert f"Retrying message '{message.message_id}'" not in text, (
            f"{name} was retried: it can never succeed"
        )
    assert [r.scenario_key for r in store.list_results(run.id)] == ["s0000", "s0001"]
    assert [r.id for r in store.list_runs(limit=10)] == [run.id]


def _dead_letter_ids(redis_url: str, queue: str) -> set[str]:
    import redis as redis_lib

    client = redis_lib.Redis.from_url(redis_url)
    try:
        return {member.decode() for member in client.zrange(f"dramatiq:{queue}.XQ", 0, -1)}
    finally:
        client.close()


# --------------------------------------------------------------------------- CLI: every command, in-process

def _commands(group: click.Group = main, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield path + (name,), command
        if isinstance(command, click.Group):
            yield from _commands(command, path + (name,))


COMMANDS = dict(_commands())
#: A value no number, range or choice accepts.
INVALID = "not-a-valid-value"


def _required(command: click.Command) -> list[str]:
    """Placeholder values for the required parameters (parsing only: the command never runs)."""
    args: list[str] = []
    for param in command.params:
        if not param.required:
            continue
        if isinstance(param, click.Argument):
            args.append("x")
        else:
            args += [param.opts[0], "x"]
    return args


def _typed_options() -> list[tuple[tuple[str, ...], str]]:
    found = []
    for path, command in COMMANDS.items():
        for param in command.params:
            if isinstance(param, click.Option) and not param.is_flag and isinstance(
                    param.type, (click.types.IntParamType, click.types.FloatParamType, click.Choice)):
                found.append((path, param.opts[-1]))
    return found


@pytest.fixture
def cli(cli, tmp_path, monkeypatch):
    """The shared ``cli`` (tests/conftest.py), on ``cli.db`` in the test's folder (the tests read it back)."""
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/cli.db")
    return cli


def assert_one_error_line(
    stderr: str, code: int, expected_code: int | None = 2, *, mentions: str = ""
) -> str:
    """Exactly one ``error:`` line, no traceback, a non-zero exit (``expected_code`` when given)."""
    errors = [line for line in stderr.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert code != 0 and (expected_code is None or code == expected_code), (code, stderr[-2000:])
    assert mentions in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_command_refuses_an_unknown_option_in_one_line(cli, path):
    result = cli(*path, "--no-such-option")
    assert_one_error_line(result.stderr, result.exit_code, mentions="--no-such-option")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("path", sorted(p for p, c in COMMANDS.items() if any(x.required for x in c.params)),
                         ids=" ".join)
def test_every_command_names_its_missing_argument_in_one_line(cli, path):
    result = cli(*path)
    assert_one_error_line(result.stderr, result.exit_code, mentions="Missing")


@pytest.mark.parametrize("path, option", _typed_options(),
                         ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_every_typed_option_refuses_a_bad_value_in_one_line(cli, path, option):
    result = cli(*path, option, INVALID, *_required(COMMANDS[path]))
    assert_one_error_line(result.stderr, result.exit_code, mentions=option)


@pytest.mark.parametrize("args, mentions", [
    (["run", "CATALOG", "-m", "sim/a", "--fail-under", "abc"], "'abc' is not a pass rate"),
    (["run", "CATALOG", "-m", "sim/a", "--fail-under", "150%"], "is not a pass rate"),
    (["run", "CATALOG", "-m", "sim/a", "--width", "0"], "--width"),
    (["run", "CATALOG", "-m", "sim/a", "--time-limit", "0"], "--time-limit"),
    (["run", "CATALOG", "-m", "sim/a", "--judge-cap", "-1"], "--judge-cap"),
    (["run", "CATALOG", "-m", "nope"], "nope"),
    (["run", "CATALOG", "-m", "sim/a", "-m", "sim/a"], "twice"),
    (["run", "CATALOG", "-m", "sim/fast", "--broker", "kafka://x"], "unsupported broker"),
    (["run", "CATALOG", "-m", "sim/a", "--db", "mysql://x"], "unsupported database URL"),
    (["run", "CATALOG", "-m", "sim/a", "--adapter", "no.such.module:fn"], "no.such.module"),
    (["run", "missing.yaml", "-m", "sim/a"], "does not exist"),
    (["run", "CATALOG", "-m", "sim/a", "--providers", "PROVIDERS_BAD"], "api_key"),
    (["report", "r_nope", "--format", "md"], "r_nope"),
    (["show", "r_nope"], "r_nope"),
    (["recover", "r_nope"], "r_nope"),
    (["worker", "--broker", "memory"], "--broker"),
    (["catalog", "check", "BAD_CATALOG"], "bad.yaml:3"),
])
def test_invalid_values_are_one_line(cli, tmp_path, args, mentions):
    bad_providers = tmp_path / "providers.yaml"
    bad_providers.write_text("providers:\n  acme:\n    base_url: http://x/v1\n    api_key: sk-not-here\n")
    bad_catalog = tmp_path / "bad.yaml"
    bad_catalog.write_text("name: x\nscenarios:\n  - key: a\n")
    replace = {"CATALOG": str(ROOT / "examples/catalogs/support.yaml"), "PROVIDERS_BAD": str(bad_providers),
               "BAD_CATALOG": str(bad_catalog)}
    store.connect(f"sqlite:///{tmp_path}/cli.db")  # `show`/`report` only read: the database must exist
    result = cli(*[replace.get(a, a) for a in args])
    assert_one_error_line(result.stderr, result.exit_code, mentions=mentions)


# --------------------------------------------------------------------------- CLI: unreachable servers, for
# real

DEAD_PG = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
DEAD_REDIS = f"redis://127.0.0.1:{free_port()}/0"
SUPPORT = str(ROOT / "examples/catalogs/support.yaml")

#: name -> (argv, exit code expected or None for "any non-zero", what the error line must mention).
#: Every command with a --db / --broker option must appear here (checked below).
UNREACHABLE = {
    "runs-db": (["runs", "--db", DEAD_PG], 2, "cannot reach database"),
    "show-db": (["show", "r_x", "--db", DEAD_PG], 2, "cannot reach database"),
    "report-db": (["report", "r_x", "--db", DEAD_PG], 2, "cannot reach database"),
    "compare-db": (["compare", "r_a", "r_b", "--db", DEAD_PG], 2, "cannot reach database"),
    "db-upgrade-db": (["db", "upgrade", "--db", DEAD_PG], 2, "cannot reach database"),
    "run-db": (["run", SUPPORT, "-m", "sim/fast", "--db", DEAD_PG], 2, "cannot reach database"),
    "demo-db": (["demo", "--db", DEAD_PG], 2, "cannot reach database"),
    "recover-db": (["recover", "--db", DEAD_PG, "--broker", DEAD_REDIS], 2, "cannot reach database"),
    "run-redis": (
        ["run", SUPPORT, "-m", "sim/fast", "--broker", DEAD_REDIS, "--db", "SQLITE"],
        2,
        "127.0.0.1",
    ),
    "recover-redis": (["recover", "--broker", DEAD_REDIS, "--db", "SQLITE_WITH_A_RUN"], 2, "127.0.0.1"),
    "governor-broker": (["governor", "--broker", DEAD_REDIS], 2, "127.0.0.1"),
    "worker-redis": (["worker", "--broker", DEAD_REDIS, "--db", "SQLITE"], 2, "127.0.0.1"),
    "pool-redis": (["pool", "--broker", DEAD_REDIS, "--db", "SQLITE"], None, "127.0.0.1"),
    "run-provider-sequential": (
        [
            "run",
            SUPPORT,
            "-m",
            "dead/m",
            "--providers",
            "DEAD_PROVIDER",
            "--db",
            "SQLITE",
            "--strategy",
            "sequential",
        ],
        1,
        "cannot connect to",
    ),
    "run-provider-fanout": (
        ["run", SUPPORT, "-m", "dead/m", "--providers", "DEAD_PROVIDER", "--db", "SQLITE"],
        1,
        "cannot connect to",
    ),
    "mock-provider-port-in-use": (["mock-provider", "--port", "BUSY_PORT"], 2, "Address already in use"),
    "rerun-db": (["rerun", "r_x", "--errored", "--db", DEAD_PG], 2, "cannot reach database"),
    "cancel-db": (["cancel", "r_x", "--db", DEAD_PG], 2, "cannot reach database"),
    "cache-clear-db": (["cache", "clear", "--db", DEAD_PG], 2, "cannot reach database"),
    "watch-db": (["watch", "r_x", "--db", DEAD_PG], 2, "cannot reach database"),
    "status-db": (["status", "--db", DEAD_PG], 2, "cannot reach database"),
    "labels-export-db": (["labels", "export", "--db", DEAD_PG], 2, "cannot reach database"),
    "labels-import-db": (["labels", "import", os.devnull, "--db", DEAD_PG], 2, "cannot reach database"),
    "judge-agreement-db": (["judge-agreement", "--db", DEAD_PG], 2, "cannot reach database"),
    "bench-redis": (
        [
            "bench",
            SUPPORT,
            "-m",
            "sim/a",
            "--broker",
            DEAD_REDIS,
            "--db",
            "SQLITE",
            "--widths",
            "1",
            "--repeat",
            "1",
            "--simulate",
            "latency=0",
        ],
        2,
        "127.0.0.1",
    ),
    "bench-db": (
        [
            "bench",
            SUPPORT,
            "-m",
            "sim/a",
            "--db",
            DEAD_PG,
            "--widths",
            "1",
            "--repeat",
            "1",
            "--simulate",
            "latency=0",
        ],
        2,
        "cannot reach database",
    ),
    "status-redis": (["status", "--broker", DEAD_REDIS, "--db", "SQLITE"], 2, "127.0.0.1"),
    "view-db": (["view", "--db", DEAD_PG, "--port", "BUSY_PORT"], 2, "cannot reach database"),
    "view-redis": (
        ["view", "--broker", DEAD_REDIS, "--db", "SQLITE_WITH_A_RUN", "--port", "BUSY_PORT"],
        2,
        "127.0.0.1",
    ),
    "view-port-in-use": (
        ["view", "--db", "SQLITE_WITH_A_RUN", "--port", "BUSY_PORT"],
        2,
        "cannot listen on 127.0.0.1",
    ),
}


def _command_of(argv: list[str]) -> tuple[str, ...]:
    return next(tuple(argv[:n]) for n in range(len(argv), 0, -1) if tuple(argv[:n]) in COMMANDS)


def test_every_command_that_reaches_a_server_has_an_unreachable_case():
    covered = {_command_of(argv) for argv, _, _ in UNREACHABLE.values() if tuple(argv[:1]) in COMMANDS}
    talks = {path for path, command in COMMANDS.items()
             if any(p.name in ("db", "broker", "redis_url") for p in command.params)}
    assert talks - covered == set(), "add an unreachable case for these commands"


@pytest.fixture(scope="module")
def unreachable_outcomes(tmp_path_factory):
    """Run every UNREACHABLE case as a real `evaljobs` process, a few at a time (each one boots Python)."""
    base = tmp_path_factory.mktemp("unreachable")
    providers = base / "dead-providers.yaml"
    providers.write_text(f"providers:\n  dead:\n    base_url: http://127.0.0.1:{free_port()}/v1\n")
    with_run = f"sqlite:///{base}/with-run.db"
    store.connect(with_run)
    store.create_run(numbered_catalog(2, "pending"), ["sim/a"], strategy="fanout")
    busy = socket.create_server(("127.0.0.1", 0))
    env = dict(
        os.environ,
        PYTHONPATH=CHILD_PYTHONPATH,
        EVALJOBS_MAX_RETRIES="1",
        EVALJOBS_MIN_BACKOFF="0.01",
        EVALJOBS_MAX_BACKOFF="0.02",
    )
    for name in (
        "EVALJOBS_BROKER_URL",
        "EVALJOBS_DATABASE_URL",
        "EVALJOBS_PROVIDERS",
        "EVALJOBS_GOVERNOR_URL",
    ):
        env.pop(name, None)

    def run_case(item):
        name, (argv, _, _) = item
        replace = {"SQLITE": f"sqlite:///{base}/{name}.db", "SQLITE_WITH_A_RUN": with_run,
                   "DEAD_PROVIDER": str(providers), "BUSY_PORT": str(busy.getsockname()[1])}
        argv = [replace.get(a, a) for a in argv]
        # Its own session, so a command that hangs (and the worker processes it started) is killed whole.
        proc = subprocess.Popen([sys.executable, "-m", "evaljobs", *argv], env=env, cwd=base, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=60)
            return name, proc.returncode, stderr
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
            return name, None, f"still running after 60 s: {stderr[-2000:]}"

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            return {name: (code, stderr) for name, code, stderr in pool.map(run_case, UNREACHABLE.items())}
    finally:
        busy.close()


@pytest.mark.parametrize("name", sorted(UNREACHABLE))
def test_unreachable_server_is_one_line_and_a_non_zero_exit(unreachable_outcomes, name):
    _, expected_code, mentions = UNREACHABLE[name]
    code, stderr = unreachable_outcomes[name]
    assert code is not None, stderr
    assert_one_error_line(stderr, code, expected_code, mentions=mentions)
