"""The catalog JSON Schema agrees with the validator on structure.

Every example catalog passes it; every structural mistake in the bad-catalog corpus
and in a table of single mistakes is refused by both the validator and the schema;
values the validator accepts in several forms (a string for a list, null for absent)
pass both.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from evaljobs.catalog import CatalogError, loads_catalog, parse_catalog
from evaljobs.catalog.schema import catalog_schema, catalog_schema_json

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "data" / "bad_catalogs"
EXAMPLES = sorted((ROOT / "examples" / "catalogs").glob("*.yaml")) + sorted(
    p for p in (ROOT / "evaljobs" / "data").rglob("*.yaml") if "providers" not in p.name)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = catalog_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _leaves(errors) -> list[jsonschema.ValidationError]:
    out = []
    for error in errors:
        out.append(error)
        out.extend(_leaves(error.context or []))
    return out


def test_schema_text_is_the_schema() -> None:
    assert json.loads(catalog_schema_json()) == catalog_schema()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_catalog_passes(path, validator) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]
    assert problems == []


@pytest.mark.parametrize("path", sorted(BAD.glob("*.yaml")), ids=lambda p: p.stem)
def test_bad_catalog_corpus_is_refused(path, validator) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert list(validator.iter_errors(data)), f"the schema accepts {path.name}"


def test_every_unknown_key_of_the_corpus_is_named(validator) -> None:
    path = BAD / "unknown_keys.yaml"
    expected = set(
        re.findall(r"^# expect: \d+: .*unknown (?:top-level )?key '(\w+)'", path.read_text(), re.M)
    )
    assert len(expected) >= 7
    found: set[str] = set()
    for error in _leaves(validator.iter_errors(yaml.safe_load(path.read_text()))):
        if error.validator == "additionalProperties":
            found |= set(re.findall(r"'(\w+)'", error.message.split("(")[-1]))
    assert expected <= found, expected - found


VALID = "name: x\nscenarios:\n  - key: a\n    prompt: hi\n"

#: One structural mistake each: the validator and the schema must both refuse it.
STRUCTURAL = {
    "top-level-list": "- a\n- b\n",
    "no-name": "scenarios:\n  - {key: a, prompt: hi}\n",
    "no-scenarios": "name: x\n",
    "empty-scenarios": "name: x\nscenarios: []\n",
    "misspelled-scenarios": "name: x\nscenarioz: []\n",
    "scenario-a-string": "name: x\nscenarios:\n  - just a string\n",
    "missing-key": "name: x\nscenarios:\n  - {prompt: hi}\n",
    "key-with-space": "name: x\nscenarios:\n  - key: 'a b'\n    prompt: hi\n",
    "key-a-number": "name: x\nscenarios:\n  - key: 2024\n    prompt: hi\n",
    "no-prompt": "name: x\nscenarios:\n  - key: a\n",
    "prompt-and-messages": (
        "name: x\nscenarios:\n  - key: a\n    prompt: hi\n    messages: [{role: user, content: hi}]\n"
    ),
    "prompt-a-list": "name: x\nscenarios:\n  - key: a\n    prompt: [hi]\n",
    "message-bad-role": "name: x\nscenarios:\n  - key: a\n    messages: [{role: robot, content: hi}]\n",
    "message-unknown-key": (
        "name: x\nscenarios:\n  - key: a\n    messages: [{role: user, content: hi, tone: warm}]\n"
    ),
    "system-a-number": VALID + "    system: 5\n",
    "temperature-high": VALID + "    temperature: 3\n",
    "max-turns-zero": VALID + "    max_turns: 0\n",
    "threshold-over-one": VALID + "    pass_threshold: 1.5\n",
    "unknown-criterion": VALID + "    criteria: [vibes]\n",
    "empty-criteria": VALID + "    criteria: []\n",
    "unknown-setting": "name: x\ndefaults: {max_turn: 3}\nscenarios:\n  - {key: a, prompt: hi}\n",
    "expect-a-list": VALID + "    expect: [contains]\n",
    "expect-unknown-key": VALID + "    expect: {contans: hello}\n",
    "latency-negative": VALID + "    expect: {max_latency_ms: -5}\n",
    "empty-rubric": VALID + "    expect: {judge: ''}\n",
    "contains-a-number": VALID + "    expect: {contains: [5]}\n",
    "tools-a-mapping": VALID + "    tools: {name: t}\n",
    "tool-without-name": VALID + "    tools: [{description: d}]\n",
    "tool-bad-name": VALID + "    tools: [{name: 'look up'}]\n",
    "tool-unknown-key": VALID + "    tools: [{name: t, descripton: d}]\n",
    "tool-parameters-array": VALID + "    tools: [{name: t, parameters: {type: array}}]\n",
    "http-without-url": VALID + "    tools: [{name: t, http: {method: POST}}]\n",
    "http-bad-method": VALID + "    tools: [{name: t, http: {url: 'http://x.test', method: FETCH}}]\n",
    "http-unknown-key": VALID + "    tools: [{name: t, http: {url: 'http://x.test', verb: GET}}]\n",
    "mcp-url-and-command": VALID + "    tools: [{name: t, mcp: {url: 'http://x.test', command: [srv]}}]\n",
    "mcp-neither": VALID + "    tools: [{name: t, mcp: {tool: t}}]\n",
    "expected-tool-unknown-key": VALID
    + "    tools: [{name: t}]\n    expect: {tools: [{name: t, args: {}}]}\n",
    "group-without-name": "name: x\ngroups:\n  - scenarios: [{key: a, prompt: hi}]\n",
    "group-without-scenarios": "name: x\ngroups:\n  - name: g\n",
    "weights-unknown-criterion": VALID + "    weights: {vibes: 1}\n",
    "weights-negative": VALID + "    weights: {contains: -1}\n",
    "tools-match-some": VALID + "    expect: {contains: hi, tools_match: some}\n",
    "ideal-grader-unknown": VALID + "    expect: {ideal: hi, ideal_grader: exact}\n",
    "assertion-without-kind": VALID + "    expect: {assertions: [{value: 1}]}\n",
    "gate-unknown": VALID + "    expect: {contains: hi, gate: [vibes]}\n",
    "group-unknown-key": "name: x\ngroups:\n  - {name: g, tag: [t], scenarios: [{key: a, prompt: hi}]}\n",
}

#: Forms the validator accepts that an editor must not flag.
ACCEPTED = {
    "plain": VALID,
    "messages": (
        "name: x\nscenarios:\n  - key: a\n    messages: [{role: system, content: s}, {role: user, "
        "content: hi}]\n"
    ),
    "string-for-lists": VALID
    + "    tags: t\n    criteria: contains\n    expect: {contains: hi, regex: 'h.', tools: t}\n"
    "    tools: [{name: t}]\n",
    "nulls": (
        "name: x\ndescription:\ndefaults:\nscenarios:\n  - key: a\n    prompt: hi\n    expect:\n    system:\n"
    ),
    "groups-only": "name: x\ngroups:\n  - {name: g, tags: [t], defaults: {pass_threshold: 0.5},"
    " scenarios: [{key: a, prompt: hi}]}\n",
    "live-tools": VALID
    + "    tools:\n      - {name: t, http: {url: 'https://x.test/a', method: get, timeout: 5}}\n"
    "      - {name: u, mcp: {command: [python, srv.py], tool: u}}\n"
    "      - {mcp: {url: 'http://127.0.0.1:1/mcp'}, only: [v]}\n",
    "expectations": VALID
    + "    expect: {patterns: 'h.', forbidden_patterns: [x+], tools_match: any, ideal: [hi],"
    " ideal_grader: fuzzy_match, judge: polite, reference: hello, gate: [contains],"
    " contains: hi, assertions: [{kind: builtin, type: contains, value: hi}]}\n"
    "    weights: {contains: 2, llm_judge: 0}\n",
    "settings": VALID
    + "    temperature: 0\n    max_turns: 2\n    pass_threshold: 1\n    judge_model: sim/judge\n"
    "    max_latency_ms: 100\n    token_budget: 9\n",
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_structural_mistakes_are_refused_by_both(name, validator) -> None:
    text = STRUCTURAL[name]
    with pytest.raises(CatalogError):
        loads_catalog(text, source="bad.yaml")
    assert list(validator.iter_errors(yaml.safe_load(text))), f"the schema accepts {name}:\n{text}"


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_forms_pass_both(name, validator) -> None:
    data = yaml.safe_load(ACCEPTED[name])
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]
    assert problems == []
    if name == "live-tools":  # the {mcp, only} import is expanded from the server first; the rest parses
        data["scenarios"][0]["tools"] = data["scenarios"][0]["tools"][:2]
    parse_catalog(data, source=f"{name}.yaml")
