"""Catalog parsing, validation (every problem at once, with file and line), digest and body."""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaljobs.catalog import (criterion_names,
                              Catalog,
                              CatalogError,
                              Expect,
                              ExpectedTool,
                              Scenario,
                              Tool,
                              catalog_from_body,
                              load_catalog,
                              loads_catalog,
                              parse_catalog,
                              parse_source,
                              read_catalog,
                              reads_catalog)
from evaljobs.catalog._yaml import load_yaml
from evaljobs.catalog.modelspec import ProvidersConfig, builtin_providers

BAD = Path(__file__).parents[1] / "data" / "bad_catalogs"
_PROVIDERS = ProvidersConfig(providers=builtin_providers())

RICH = """\
name: support
description: Support agent checks
defaults:
  system: "You are a helpful support agent."
  temperature: 0.2
  max_turns: 4
  pass_threshold: 0.8
  judge_model: sim/judge
  max_latency_ms: 30000
  token_budget: 4000
scenarios:
  - key: greet
    prompt: "Hello"
    expect:
      contains: hello
      not_contains: [sorry, unfortunately]
    tags: smoke
  - key: order.status
    prompt: "Where is order 1234?"
    system: "You are terse."
    temperature: 0
    criteria: [contains, expected_tools, llm_judge]
    tools:
      - name: lookup_order
        description: Find an order
        parameters: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
        returns: {error: unknown order}
        returns_by: {order_id: {1234: {status: shipped}, "9999": {error: not found}}}
      - name: escalate
    expect:
      contains: [shipped]
      regex: "ship(ped|ping)"
      tools: [lookup_order, {name: lookup_order, arguments: {order_id: "1234"}}]
      judge: "Says the order shipped and gives no invented dates"
      max_latency_ms: 5000
      token_budget: 500
    notes: the canned tool answers by order id
groups:
  - name: billing
    tags: [billing]
    defaults: {max_turns: 2, criteria: [response_present, contains], judge_model: gpt-4o-mini}
    scenarios:
      - key: billing:refund
        messages:
          - {role: system, content: "Billing bot"}
          - {role: user, content: "Refund me"}
          - {role: assistant, content: "Which order?"}
          - {role: user, content: "Order 42"}
        tags: [smoke, billing]
      - key: billing/invoice
        prompt: "Send my invoice"
        pass_threshold: 1
        max_turns: 1
"""


def write(tmp_path: Path, text: str, name: str = "catalog.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def problems_of(text: str, name: str = "cat.yaml", **kwargs) -> list[str]:
    with pytest.raises(CatalogError) as info:
        loads_catalog(textwrap.dedent(text), source=name, **kwargs)
    err = info.value
    assert err.problems, "a CatalogError always lists its problems"
    assert str(err) == "\n".join(err.problems)
    for problem in err.problems:
        assert "\n" not in problem and problem.startswith(name)
    return err.problems


# --------------------------------------------------------------------------- a rich, valid catalog


def test_rich_catalog_resolves_effective_values(tmp_path):
    catalog = load_catalog(write(tmp_path, RICH))
    assert catalog.name == "support"
    assert catalog.description == "Support agent checks"
    # Scenarios are kept sorted by key: order in the file carries no meaning.
    assert catalog.keys == ("billing/invoice", "billing:refund", "greet", "order.status")

    greet = catalog.scenario("greet")
    assert greet.messages == ({"role": "user", "content": "Hello"},)
    assert greet.prompt == "Hello"
    assert greet.system == "You are a helpful support agent."
    assert (greet.temperature, greet.max_turns, greet.pass_threshold) == (0.2, 4, 0.8)
    assert greet.criteria is None
    assert greet.judge_model == "sim/judge"
    assert greet.expect == Expect(contains=("hello",), not_contains=("sorry", "unfortunately"),
                                  values={"max_latency_ms": 30000, "token_budget": 4000})
    assert greet.tags == ("smoke",)
    assert greet.group is None
    assert greet.line == 12

    order = catalog.scenario("order.status")
    assert order.system == "You are terse."
    assert order.temperature == 0.0
    assert order.criteria == ("contains", "expected_tools", "llm_judge")
    lookup = order.tool("lookup_order")
    assert lookup == Tool(
        name="lookup_order", description="Find an order",
        parameters={"type": "object", "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"]},
        returns={"error": "unknown order"},
        returns_by={"order_id": {"1234": {"status": "shipped"}, "9999": {"error": "not found"}}})
    # returns_by keys are strings whatever YAML made of them; answers match str and int arguments.
    assert lookup.answer({"order_id": "1234"}) == {"status": "shipped"}
    assert lookup.answer({"order_id": 1234}) == {"status": "shipped"}
    assert lookup.answer({"order_id": "0"}) == {"error": "unknown order"}
    assert order.tool("escalate") == Tool(name="escalate")
    assert order.tool("escalate").parameters == {"type": "object", "properties": {}}
    assert order.expect == Expect(
        contains=("shipped",), regex=("ship(ped|ping)",),
        tools=(ExpectedTool("lookup_order"), ExpectedTool("lookup_order", {"order_id": "1234"})),
        judge="Says the order shipped and gives no invented dates",
        values={"max_latency_ms": 5000, "token_budget": 500})
    assert order.notes == "the canned tool answers by order id"

    refund = catalog.scenario("billing:refund")
    assert refund.group == "billing"
    assert refund.system == "Billing bot"  # a leading system message becomes the system prompt
    assert [m["role"] for m in refund.messages] == ["user", "assistant", "user"]
    assert refund.prompt == "Order 42"
    assert refund.max_turns == 2 and refund.temperature == 0.2  # group defaults over catalog defaults
    assert refund.criteria == ("response_present", "contains")
    assert refund.judge_model == "openai/gpt-4o-mini"  # canonical spec
    assert refund.tags == ("billing", "smoke")  # group tags added, de-duplicated

    invoice = catalog.scenario("billing/invoice")
    assert (invoice.max_turns, invoice.pass_threshold) == (1, 1.0)


def test_lookup_is_by_key_and_raises_keyerror(tmp_path):
    catalog = load_catalog(write(tmp_path, RICH))
    assert catalog.scenario("greet").key == "greet"
    assert "greet" in catalog and "nope" not in catalog
    with pytest.raises(KeyError):
        catalog.scenario("nope")


def test_minimal_catalog_uses_builtin_defaults():
    catalog = loads_catalog("name: tiny\nscenarios: [{key: a, prompt: hi}]\n")
    scenario = catalog.scenario("a")
    assert scenario == Scenario(key="a", messages=({"role": "user", "content": "hi"},))
    assert scenario.max_turns == 6 and scenario.pass_threshold == 0.7 and scenario.judge_model is None


def test_empty_system_disables_a_default_system_prompt():
    catalog = loads_catalog("""
name: s
defaults: {system: be nice}
scenarios:
  - {key: a, prompt: hi}
  - {key: b, prompt: hi, system: ""}
""")
    assert catalog.scenario("a").system == "be nice"
    assert catalog.scenario("b").system is None


def test_scenario_level_limits_reach_expect():
    catalog = loads_catalog(
        "name: s\nscenarios: [{key: a, prompt: hi, max_latency_ms: 100, token_budget: 9}]\n")
    assert catalog.scenario("a").expect == Expect(values={"max_latency_ms": 100, "token_budget": 9})


def test_expect_judge_without_judge_model_is_fine():
    catalog = loads_catalog("name: s\nscenarios: [{key: a, prompt: hi, expect: {judge: be kind}}]\n",
                            providers=_PROVIDERS)
    assert catalog.scenario("a").judge_model is None  # the model under test judges


def test_yaml_merge_keys_and_anchors_are_honoured():
    catalog = loads_catalog("""
name: anchors
scenarios:
  - &base {key: a, prompt: hi, max_turns: 2, tools: [&t {name: lookup, returns: ok}]}
  - <<: *base
    key: b
    max_turns: 3
  - {key: c, prompt: hey, tools: [*t]}
""")
    assert [s.max_turns for s in catalog.scenarios] == [2, 3, 6]
    assert catalog.scenario("b").prompt == "hi"
    assert catalog.scenario("c").tool("lookup").returns == "ok"


# --------------------------------------------------------------------------- live tools (http / mcp)

LIVE = """\
name: live
scenarios:
  - key: a
    prompt: hi
    tools:
      - name: echo
        parameters: {type: object, properties: {x: {type: integer}}}
        http: {url: "https://api.example/echo", method: get, timeout: 5}
      - name: stock
        mcp: {command: [python, server.py, --stdio], timeout: 10}
      - name: canned
        returns: {ok: true}
"""


def test_live_tools_are_parsed_and_kept_in_the_body():
    catalog = loads_catalog(LIVE)
    echo, stock, canned = catalog.scenario("a").tools
    assert echo.http == {"url": "https://api.example/echo", "method": "get", "timeout": 5}
    assert echo.mcp is None
    assert stock.mcp == {"command": ["python", "server.py", "--stdio"], "timeout": 10} and stock.http is None
    assert canned.http is None and canned.mcp is None
    tools = catalog.body["scenarios"][0]["tools"]
    assert "http" in tools[0] and "mcp" in tools[1] and "http" not in tools[2] and "mcp" not in tools[2]
    assert parse_catalog(catalog.body) == catalog
    changed = LIVE.replace("timeout: 5", "timeout: 6")
    assert loads_catalog(changed).digest != catalog.digest


def test_bad_live_tools():
    problems = problems_of("""\
        name: live
        scenarios:
          - key: a
            prompt: hi
            tools:
              - name: both
                http: {url: "https://x.example"}
                mcp: {url: "https://x.example/mcp"}
              - name: canned-and-live
                http: {url: "https://x.example"}
                returns: 1
              - name: bad
                http: {url: "ftp://x", method: FETCH}
        """)
    assert problems == [
        "cat.yaml:6: scenario 'a': tool 'both': give either 'http' or 'mcp', not both",
        "cat.yaml:11: scenario 'a': tool 'canned-and-live': a live tool is answered by its http endpoint; "
        "remove 'returns' (or 'http' to keep it canned)",
        "cat.yaml:13: scenario 'a': tool 'bad': http.url must be an http:// or https:// URL, not 'ftp://x'",
        "cat.yaml:13: scenario 'a': tool 'bad': http.method must be one of GET, POST, PUT, PATCH, DELETE, "
        "not 'FETCH'",
    ]


def test_mcp_import_entries_need_the_expansion_step():
    with pytest.raises(CatalogError) as info:
        parse_catalog({"name": "x", "scenarios": [{"key": "a", "prompt": "hi",
                                                   "tools": [{"mcp": {"command": ["python", "s.py"]}}]}]})
    assert info.value.problems == [
        "<catalog>: scenario 'a': tool #1: an MCP tool import ({mcp, only}) must be expanded first: only the "
        "server can list its tools (Session.load and the evaljobs commands do it; in code call "
        "evaljobs.tools.expand_source); or give each tool a 'name'"]


EXAMPLE_MCP = Path(__file__).resolve().parents[2] / "examples" / "catalogs" / "tools_mcp.yaml"


def test_loading_a_catalog_with_mcp_imports_does_no_io_until_the_expansion_step():
    source = read_catalog(EXAMPLE_MCP)
    assert source.has_mcp_imports and not reads_catalog(RICH).has_mcp_imports
    # Reading and parsing never start the server: the unexpanded import is reported, with its line.
    with pytest.raises(CatalogError) as info:
        load_catalog(EXAMPLE_MCP)
    assert info.value.problems and all("must be expanded first" in p for p in info.value.problems)
    assert all(re.match(rf"^{re.escape(str(EXAMPLE_MCP))}:\d+: scenario '", p) for p in info.value.problems)
    with pytest.raises(CatalogError):
        parse_source(source)


def test_example_catalog_imports_its_mcp_tools_in_the_expansion_step(allow_code):  # its server: a program
    from evaljobs.tools import expand_source

    source = read_catalog(EXAMPLE_MCP)
    expanded = expand_source(source)
    assert expanded is not source and source.has_mcp_imports and not expanded.has_mcp_imports
    catalog = parse_source(expanded)
    teapot = catalog.scenario("stock.teapot-then-order")
    assert [t.name for t in teapot.tools] == ["check_stock", "lookup_order"]
    assert all(t.mcp is not None and t.parameters.get("type") == "object" for t in teapot.tools)
    assert catalog_from_body(json.loads(json.dumps(catalog.body))) == catalog
    plain = reads_catalog(RICH)
    assert expand_source(plain) is plain  # nothing to expand: no server is asked


# --------------------------------------------------------------------------- digest and body


def test_digest_survives_formatting_key_order_and_scenario_order():
    a = loads_catalog(RICH)
    reformatted = """
# same catalog, written differently
groups:
  - scenarios:
      - max_turns: 1
        pass_threshold: 1.0
        prompt: Send my invoice
        key: "billing/invoice"
      - tags: [billing, smoke, smoke]
        key: 'billing:refund'
        messages: [{content: "Billing bot", role: system}, {role: user, content: "Refund me"},
                   {role: assistant, content: "Which order?"}, {role: user, content: "Order 42"}]
    defaults: {judge_model: openai/gpt-4o-mini, criteria: [contains, response_present], max_turns: 2}
    tags: billing
    name: billing
scenarios:
  - key: order.status
    notes: the canned tool answers by order id
    expect:
      token_budget: 500
      max_latency_ms: 5000
      judge: Says the order shipped and gives no invented dates
      tools: [lookup_order, {arguments: {order_id: "1234"}, name: lookup_order}]
      regex: [ship(ped|ping)]
      contains: shipped
    tools:
      - name: lookup_order
        returns_by: {order_id: {"9999": {error: not found}, "1234": {status: shipped}}}
        returns: {error: unknown order}
        parameters: {required: [order_id], properties: {order_id: {type: string}}, type: object}
        description: Find an order
      - {name: escalate, parameters: {type: object, properties: {}}, description: ""}
    criteria: [llm_judge, expected_tools, contains]
    temperature: 0.0
    system: You are terse.
    prompt: Where is order 1234?
  - {tags: [smoke], expect: {not_contains: [unfortunately, sorry], contains: [hello]},
     prompt: Hello, key: greet}
defaults:
  token_budget: 4000
  max_latency_ms: 30000
  judge_model: sim/judge
  pass_threshold: 0.80
  max_turns: 4
  temperature: 0.2
  system: You are a helpful support agent.
description: Support agent checks
name: support
"""
    b = loads_catalog(reformatted)
    assert b.digest == a.digest
    assert b == a
    assert a.digest.startswith("sha256:") and len(a.digest) == len("sha256:") + 64


@pytest.mark.parametrize("old, new", [
    ('prompt: "Hello"', 'prompt: "Hello!"'),
    ("temperature: 0.2", "temperature: 0.3"),
    ("max_turns: 4", "max_turns: 5"),
    ("judge_model: sim/judge", "judge_model: sim/judge2"),
    ("contains: hello", "contains: hi"),
    ("returns: {error: unknown order}", "returns: {error: no such order}"),
    ('"9999": {error: not found}', '"9998": {error: not found}'),
    ("tags: smoke", "tags: [smoke, fast]"),
    ("notes: the canned tool answers by order id", "notes: changed"),
    ("name: billing", "name: invoicing"),
    ("description: Support agent checks", "description: other"),
    ("pass_threshold: 1", "pass_threshold: 0.9"),
])
def test_any_semantic_change_changes_the_digest(old, new):
    assert RICH.count(old) == 1
    assert loads_catalog(RICH.replace(old, new)).digest != loads_catalog(RICH).digest


def test_body_round_trips_to_an_equal_catalog(tmp_path):
    catalog = load_catalog(write(tmp_path, RICH))
    again = parse_catalog(catalog.body)
    assert again == catalog
    assert again.digest == catalog.digest
    assert again.scenarios == catalog.scenarios
    # A stored snapshot is JSON text: the body survives that too.
    stored = json.loads(json.dumps(catalog.body))
    snapshot = catalog_from_body(stored)
    assert snapshot == catalog and snapshot.digest == catalog.digest
    assert snapshot.source == "<snapshot>"
    assert snapshot.scenario("billing:refund").system == "Billing bot"


def test_body_is_canonical_json_and_covers_the_digest():
    catalog = loads_catalog(RICH)
    text = json.dumps(catalog.body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    import hashlib

    assert catalog.digest == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    scenario = next(s for s in catalog.body["scenarios"] if s["key"] == "billing:refund")
    # Effective values are resolved into the body: no defaults are needed to read it.
    assert scenario["max_turns"] == 2 and scenario["group"] == "billing"
    assert scenario["expect"]["max_latency_ms"] == 30000
    assert set(catalog.body) == {"name", "description", "scenarios"}


def test_equality_ignores_source_and_line():
    a = loads_catalog(RICH, source="a.yaml")
    b = loads_catalog("\n\n" + RICH, source="b.yaml")
    assert a == b and a.scenario("greet").line != b.scenario("greet").line


# --------------------------------------------------------------------------- JSON catalogs


def test_json_catalog_matches_yaml(tmp_path):
    data = yaml.safe_load(RICH)
    path = write(tmp_path, json.dumps(data, indent=2), name="catalog.json")
    catalog = load_catalog(path)
    assert catalog.digest == loads_catalog(RICH).digest
    assert catalog.source == path


def test_json_problems_have_lines(tmp_path):
    text = json.dumps({"name": "j", "scenarios": [{"key": "a", "prompt": "hi"}, {"key": "b", "promt": "x"}]},
                      indent=2)
    path = write(tmp_path, text, name="bad.json")
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if '"promt"' in ln)
    assert f"{path}:{line}: scenario 'b': unknown key 'promt' (did you mean 'prompt'?)" in info.value.problems


def test_json_syntax_error_names_line(tmp_path):
    path = write(tmp_path, '{\n  "name": "j",\n  "scenarios": [\n}\n', name="broken.json")
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert info.value.problems == [f"{path}:4: invalid JSON: Expecting value (column 1)"]


def test_json_duplicate_keys_are_reported(tmp_path):
    path = write(tmp_path, '{"name": "j",\n "name": "k",\n "scenarios": [{"key": "a", "prompt": "hi"}]}',
                 name="dup.json")
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert info.value.problems == [
        f"{path}:2: duplicate key 'name' in the same mapping (first at line 1); "
        f"remove one: only the last would be used"]


# --------------------------------------------------------------------------- bad catalogs: the corpus


def _expected(path: Path) -> list[tuple[int, str]]:
    return [(int(m[1]), m[2]) for m in re.finditer(r"^# expect: (\d+): (.*)$", path.read_text(), re.M)]


@pytest.mark.parametrize("path", sorted(BAD.glob("*.yaml")), ids=lambda p: p.stem)
def test_bad_catalog_corpus_reports_every_problem_at_once(path):
    """Each corpus file lists, in ``# expect: LINE: text`` comments, exactly the problems it must produce."""
    expected = _expected(path)
    assert expected, f"{path} declares no expectations"
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    problems = info.value.problems
    for line, fragment in expected:
        matching = [p for p in problems if p.startswith(f"{path}:{line}: ") and fragment in p]
        assert matching, f"no problem at line {line} containing {fragment!r} in:\n" + "\n".join(problems)
    assert len(problems) == len(expected), "\n".join(problems)
    assert all("\n" not in p for p in problems)


# --------------------------------------------------------------------------- bad catalogs: file-level cases


def test_unreadable_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(CatalogError) as info:
        load_catalog(missing)
    assert info.value.problems == [f"{missing}: cannot read catalog: No such file or directory"]
    with pytest.raises(CatalogError, match="cannot read catalog: Is a directory"):
        load_catalog(tmp_path)


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(CatalogError, match=r"latin1\.yaml: not UTF-8 text .*save the catalog as UTF-8"):
        load_catalog(path)


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "---\n...\n"])
def test_empty_file(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert info.value.problems == [f"{path}: catalog is empty; it needs a 'name' and at least one scenario"]


def test_yaml_syntax_error_has_line():
    problems = problems_of("""\
        name: broken
        scenarios:
          - key: a
            prompt: "unterminated
          - key: b
        """)
    assert len(problems) == 1
    assert re.match(r"cat\.yaml:\d+: YAML syntax error: found unexpected end of stream", problems[0])
    problems = problems_of("name: x\nscenarios:\n  - key: a\n   prompt: b\n")
    assert problems[0].startswith("cat.yaml:4: YAML syntax error: ")


@pytest.mark.parametrize("text, message", [
    ("- a\n- b\n", "cat.yaml: the top level must be a mapping with 'name' and 'scenarios', not a list"),
    ("just text\n", "cat.yaml: the top level must be a mapping with 'name' and 'scenarios', not a string"),
    ("name: x\n", "cat.yaml: no scenarios; add at least one under 'scenarios'"),
    ("name: x\nscenarios: []\ngroups: []\n", "cat.yaml:2: no scenarios; add at least one"),
    ("scenarios: [{key: a, prompt: b}]\n",
     "cat.yaml: missing 'name'; add a top-level 'name: <catalog name>'"),
    ("name: ''\nscenarios: [{key: a, prompt: b}]\n", "cat.yaml:1: 'name' must be a non-empty string, not ''"),
    ("name: x\nscenarios: {key: a}\n", "cat.yaml:2: 'scenarios' must be a list of scenarios, not a mapping"),
    ("name: x\ngroups: {a: 1}\nscenarios: [{key: a, prompt: b}]\n", "cat.yaml:2: 'groups' must be a list"),
    ("name: x\ndefaults: [1]\nscenarios: [{key: a, prompt: b}]\n", "cat.yaml:2: defaults: must be a mapping"),
    ("name: x\nscenarios: &s\n  - key: a\n    prompt: b\n    tools: *s\n",
     "cat.yaml:5: recursive alias *s (used inside its own anchor); a catalog must be a tree"),
    ("name: x\n---\nname: y\n",
     "cat.yaml:2: a second YAML document ('---'); a catalog file holds exactly one"),
    ("name: *nope\n", "cat.yaml:1: unknown alias *nope; define the anchor &nope first"),
    ("name: x\n? [a, b]\n: c\n", "cat.yaml:2: a mapping key must be a plain value, not a list"),
    ("name: x\nscenarios:\n  - key: a\n    prompt: b\n    tools:\n"
     "      - name: t\n        returns: !!set {a, b}\n",
     "cat.yaml:7: a YAML set (!!set) is not JSON data; write a list instead"),
    ("name: !custom x\n",
     "cat.yaml:1: cannot read YAML value: could not determine a constructor for the tag"),
    ("name: x\nscenarios: [{key: a, prompt: <<}]\n", "cat.yaml:2: '<<' is YAML's merge key; quote it"),
    ("name: x\ndefaults: {criteria: [contain, judge]}\nscenarios: [{key: a, prompt: b}]\n",
     "cat.yaml:2: defaults: criteria: unknown criteria 'contain', 'judge'; "
     "known: response_present, contains"),
])
def test_file_level_problems(text, message):
    problems = problems_of(text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(message)


def test_problems_from_every_level_are_reported_together():
    problems = problems_of("""\
        nam: x
        defaults: {max_turns: 0}
        scenarios:
          - {key: a, prompt: ""}
          - {key: a, prompt: hi, expect: {regex: "("}}
        groups:
          - {name: g, scenarios: [{key: b, prompt: hi, temperature: 9}]}
        """)
    assert [p.split(": ", 1)[0] for p in problems] == [
        "cat.yaml:1", "cat.yaml", "cat.yaml:2", "cat.yaml:4", "cat.yaml:5", "cat.yaml:5", "cat.yaml:7"]
    assert "scenario 'a': duplicate key (first defined at line 4)" in problems[4]
    assert "expect.regex '(' does not compile" in problems[5]
    assert "scenario 'b': temperature must be a number from 0 to 2, not 9" in problems[6]


def test_judge_model_provider_is_checked_when_providers_are_given():
    text = """\
        name: j
        defaults: {judge_model: acme/judge-1}
        scenarios:
          - {key: a, prompt: hi, judge_model: "bad spec"}
        """
    problems = problems_of(text, providers=_PROVIDERS)
    assert problems[0] == (
        "cat.yaml:2: defaults: judge_model: model spec 'acme/judge-1': unknown provider 'acme' "
        "(known: anthropic, azure, deepseek, fireworks, gemini, groq, mistral, ollama, openai, openrouter, "
        "sim, together, vllm); add it to a providers file and pass it with "
        "--providers FILE"
    )
    assert problems[1].startswith(
        "cat.yaml:4: scenario 'a': judge_model: model spec 'bad spec' contains whitespace")
    # Without a providers config only the syntax is checked.
    assert len(problems_of(text)) == 1


def test_error_values_are_shown_on_one_line():
    problems = problems_of('name: x\nscenarios:\n  - {key: "a\\nb", prompt: hi}\n')
    assert problems == ["cat.yaml:3: scenario #1: key 'a\\nb' must be a string of letters, digits and "
                        "_ . : / - (quote it if YAML reads it as a number)"]


def test_parse_catalog_without_lines_omits_them():
    with pytest.raises(CatalogError) as info:
        parse_catalog({"name": "x", "scenarios": [
            {"prompt": "hi"}, {"key": "b", "prompt": "hi", "max_turns": "six"}]}, source="data")
    assert info.value.problems == [
        "data: scenario #1: missing 'key'; give every scenario a unique key like 'refund.late_order'",
        "data: scenario 'b': max_turns must be an integer >= 1, not 'six'"]


def test_parse_catalog_uses_given_lines():
    with pytest.raises(CatalogError) as info:
        parse_catalog({"name": "x", "scenarios": [{"key": "b", "prompt": "hi", "max_turns": "six"}]},
                      source="mem", lines={("scenarios", 0): 7, ("scenarios", 0, "max_turns"): 9})
    assert info.value.problems == ["mem:9: scenario 'b': max_turns must be an integer >= 1, not 'six'"]


def test_non_json_tool_data_in_python_input():
    with pytest.raises(CatalogError) as info:
        parse_catalog({"name": "x", "scenarios": [{"key": "a", "prompt": "hi", "tools": [
            {"name": "t", "returns": {"ids": {1, 2}}},
            {"name": "u", "returns": float("nan")},
            {"name": "v", "returns": {"n": 2**70}},
            {"name": "w", "returns": {(1, 2): "tuple key"}}]}]})
    assert info.value.problems == [
        "<catalog>: scenario 'a': tool 't': returns.ids is a set, which is not JSON; use a list",
        "<catalog>: scenario 'a': tool 'u': returns is nan, which JSON cannot represent; "
        "use a finite number or a string",
        "<catalog>: scenario 'a': tool 'v': returns.n is an integer too large for JSON (beyond 64 bits); "
        "quote it",
        "<catalog>: scenario 'a': tool 'w': returns has key (1, 2), which is not a JSON key; quote it"]


def test_all_criteria_names_are_accepted():
    catalog = parse_catalog({"name": "x", "defaults": {"criteria": list(reversed(criterion_names()))},
                             "scenarios": [{"key": "a", "prompt": "hi"}]})
    assert catalog.scenario("a").criteria == criterion_names()
    assert parse_catalog({"name": "x", "scenarios": [{"key": "a", "prompt": "hi", "criteria": "regex"}]}
                         ).scenario("a").criteria == ("regex",)


# --------------------------------------------------------------------------- scale


def test_ten_thousand_scenarios_parse_and_look_up_by_index():
    # How fast this parses is a benchmark figure, not a test assertion (a busy CI machine would
    # make a wall-clock bound flaky); here: every scenario is read, and lookups go through the index.
    lines = ["name: big", "defaults: {max_turns: 3}", "scenarios:"]
    for i in range(10_000):
        lines += [f"  - key: s{i}", f"    prompt: question {i}", "    tags: [a, b]",
                  f"    expect: {{contains: [answer{i}]}}"]
    catalog = loads_catalog("\n".join(lines))
    assert len(catalog.scenarios) == 10_000
    for i in range(0, 10_000, 7):
        assert catalog.scenario(f"s{i}").key == f"s{i}"
    assert len(catalog._index) == 10_000  # a dict keyed by scenario key, not a list scan


# --------------------------------------------------------------------------- properties

_KEYS = ["name", "description", "defaults", "scenarios", "groups", "key", "prompt", "messages", "system",
         "tools", "expect", "tags", "notes", "group", "max_turns", "temperature", "criteria",
         "pass_threshold", "judge_model", "returns", "returns_by", "parameters", "contains", "regex", "role",
         "content", "arguments", "judge", "max_latency_ms", "token_budget", "not_contains"]
_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
            | st.text(max_size=8) | st.sampled_from(["a", "user", "(", "sim/x", "gpt-4o", "contains", ""]))
_data = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=5) | st.integers(), children, max_size=5),
    max_leaves=30)


_setting = st.one_of(
    _data, st.integers(0, 8), st.floats(0, 1.5), st.sampled_from(["sim/judge", "gpt-4o", "you are kind"]),
    st.lists(st.sampled_from(criterion_names() + ("nope",)), max_size=3))
_near_scenario = st.fixed_dictionaries(
    {"key": st.sampled_from(["a", "b", "c.d", "e:f/g"]), "prompt": st.text(min_size=1, max_size=5)},
    optional={name: _setting for name in ("max_turns", "temperature", "pass_threshold", "criteria",
                                          "judge_model", "system", "token_budget", "tags", "notes")}
    | {"expect": st.dictionaries(st.sampled_from(["contains", "regex", "judge", "tools", "max_latency_ms"]),
                                 _setting | st.text(max_size=4), max_size=3),
       "tools": st.lists(st.fixed_dictionaries(
           {"name": st.sampled_from(["t", "u", "bad name"])},
           optional={"returns": _data, "returns_by": _data}), max_size=2)})
#: Near-valid catalogs, so that the success path (and the body round-trip) is exercised too.
_near_catalog = st.fixed_dictionaries(
    {"name": st.sampled_from(["n", "cat"]), "scenarios": st.lists(_near_scenario, min_size=1, max_size=3)},
    optional={"defaults": st.dictionaries(st.sampled_from(["system", "max_turns", "temperature", "criteria",
                                                           "pass_threshold", "judge_model", "token_budget"]),
                                          _setting, max_size=3),
              "groups": st.lists(st.fixed_dictionaries(
                  {"name": st.sampled_from(["g", "h"]), "scenarios": st.lists(_near_scenario, max_size=2)}),
                  max_size=2)})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_data | _near_catalog | st.fixed_dictionaries(
    {"name": _data,
     "scenarios": st.lists(st.dictionaries(st.sampled_from(_KEYS), _data, max_size=6), max_size=3)},
    optional={"defaults": _data, "groups": _data}))
def test_arbitrary_data_is_a_catalog_or_a_catalog_error(data):
    try:
        catalog = parse_catalog(data, providers=_PROVIDERS)
    except CatalogError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert isinstance(problem, str) and problem and "\n" not in problem and "\r" not in problem
    else:
        assert isinstance(catalog, Catalog)
        assert parse_catalog(catalog.body).digest == catalog.digest


_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=6), children, max_size=4)),
    max_leaves=25)


@settings(max_examples=200, deadline=None)
@given(data=_plain, flow=st.booleans())
def test_fast_yaml_reader_agrees_with_pyyaml(data, flow):
    # The reference is PyYAML's own constructor with the YAML 1.2 core schema (evaljobs.catalog.yaml12),
    # and the text is written by its dumper, which quotes what either YAML version would not read as text.
    from evaljobs.catalog import yaml12

    text = yaml12.dump({"root": data}, default_flow_style=flow, allow_unicode=True)
    loaded, lines = load_yaml(text, "t.yaml", problems := [])
    assert loaded == yaml12.load(text)
    assert problems == []
    assert lines[("root",)] == 1


def test_yaml_written_by_evaljobs_means_the_same_under_yaml_12_and_11():
    from evaljobs.catalog import yaml12

    tricky = ["0E0", "0o17", "017", "yes", "No", "on", "2024-01-01", "1:30", "~", "true", ".inf"]
    text = yaml12.dump({"values": tricky})
    assert yaml12.load(text) == yaml.safe_load(text) == {"values": tricky}
