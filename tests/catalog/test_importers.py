"""Importers: ActiveAgent suites and catalogs, promptfoo configs, JSONL samples -> native catalogs."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from evaljobs.catalog import CatalogError, ExpectedTool, loads_catalog, parse_catalog
from evaljobs.catalog.importers import FORMATS, detect_format, dump_native, load_any
from evaljobs.evaluation.grading import grade
from evaljobs.evaluation.replay import Replay

IMPORTS = Path(__file__).resolve().parents[2] / "examples" / "imports"
SUITE = IMPORTS / "activeagent_suite.yaml"
AA_CATALOG = IMPORTS / "activeagent_catalog.yaml"
PROMPTFOO = IMPORTS / "promptfoo" / "promptfooconfig.yaml"
JSONL = IMPORTS / "samples.jsonl"
SAMPLES = [SUITE, AA_CATALOG, PROMPTFOO, JSONL]


def _opts(path) -> dict:
    """JSONL samples do not say how to grade them: the tests name a grader."""
    return {"grader": "includes"} if str(path).endswith(".jsonl") else {}


def _catalog(path, **options):
    result = load_any(path, **options)
    return result, parse_catalog(result.data, source=str(path))


def _errors(path, **options) -> list[str]:
    with pytest.raises(CatalogError) as err:
        load_any(path, **options)
    problems = err.value.problems
    assert problems and all("\n" not in p for p in problems)
    return problems


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- detection


def test_detect_format_by_extension_and_shape():
    assert detect_format(None, "x.jsonl") == "jsonl"
    assert detect_format({"suite": "s", "groups": []}, "a.yaml") == "activeagent-suite"
    assert detect_format({"catalog": "c", "products": []}, "a.yaml") == "activeagent-catalog"
    assert detect_format({"prompts": ["p"], "tests": []}, "promptfooconfig.yaml") == "promptfoo"
    assert detect_format({"name": "n", "scenarios": []}, "c.yaml") == "native"
    assert detect_format({"name": "n", "groups": []}, "c.yaml") == "native"
    with pytest.raises(CatalogError) as err:
        detect_format({"title": "x", "cases": []}, "odd.yaml")
    assert err.value.problems == [
        ("odd.yaml: cannot tell the catalog format (top-level keys: 'title', 'cases'); expected a native "
        "catalog ('name' + 'scenarios'/'groups'), an ActiveAgent suite ('suite' + 'groups') or catalog "
        "('catalog' + 'products'), a promptfoo config ('prompts' + 'tests'), an OpenAI evals registry file "
        "(entries with 'class') or a .jsonl file; pass --format "
        "{native,activeagent-suite,activeagent-catalog,promptfoo,openai-evals,jsonl}")]


def test_a_csv_or_json_array_of_samples_says_to_write_jsonl(tmp_path):
    """Inspect reads datasets from CSV and JSON arrays too (csv_dataset, json_dataset); given one, a new user
    got "YAML syntax error: mapping values are not allowed" for the CSV, and "the top level is a list" for
    the JSON array. Each is one line saying what to do."""
    csv = _write(tmp_path, "samples.csv", 'input,target\n"Say hi",hi\n')
    assert _errors(csv, grader="inspect_match") == [
        (
            f"{csv}: a CSV dataset is not a catalog format evaljobs reads on its own; write its rows as "
            "JSONL (one "
            '{"input": ..., "target": ...} per line, in a .jsonl file) and run that (a promptfoo config\'s '
            "tests: file://….csv is read through the config)"
        )
    ]
    array = _write(tmp_path, "samples.json", '[{"input": "Say hi", "target": "hi"}]')
    assert _errors(array, grader="inspect_match") == [
        (f"{array}: a JSON array of samples (Inspect's json_dataset): write one sample per line in a .jsonl "
         "file and run that")]


def test_load_any_detects_each_sample_and_rejects_an_unknown_format():
    assert [load_any(p, **_opts(p)).format for p in SAMPLES] == [
        "activeagent-suite",
        "activeagent-catalog",
        "promptfoo",
        "jsonl",
    ]
    assert load_any(SUITE, format="activeagent-suite").format == "activeagent-suite"
    with pytest.raises(CatalogError) as err:
        load_any(SUITE, format="promptfu")
    assert err.value.problems == [(f"{SUITE}: unknown format 'promptfu' (did you mean 'promptfoo'?); use one "
                                  f"of {', '.join(FORMATS)}")]


def test_native_files_pass_through(tmp_path):
    path = _write(tmp_path, "native.yaml", "name: n\nscenarios:\n  - {key: a, prompt: hi}\n")
    result = load_any(path)
    assert (result.format, result.excluded, result.warnings) == ("native", 0, [])
    assert result.data == {"name": "n", "scenarios": [{"key": "a", "prompt": "hi"}]}


# --------------------------------------------------------------------------- ActiveAgent suite


def test_activeagent_suite_maps_groups_keys_params_and_expectations():
    result, catalog = _catalog(SUITE)
    assert result.excluded == 1  # billing.chargeback-live is production_only
    assert result.warnings == [(f"{SUITE}: 2 expected tool(s) are not declared in the file; declared them "
                               "without canned results (the agent under test provides them)")]
    assert catalog.name == "support-agent"
    assert catalog.description == "Support agent regression suite (ActiveAgent format)."
    assert catalog.keys == ("billing.invoice-copy", "billing.refund", "orders.status")

    refund = catalog.scenario("billing.refund")
    assert refund.prompt == "I was charged twice for order 1234. Can I get a refund?"  # {{order_id}} filled
    assert refund.group == "Billing"
    assert refund.tags == ("billing", "param:order_id=1234")
    assert refund.expect.contains == ("refund",)
    assert refund.expect.not_contains == ("internal note",)
    assert refund.expect.tools == (ExpectedTool("lookup_order"),)
    assert [t.name for t in refund.tools] == ["lookup_order"] and refund.tools[0].returns is None
    assert refund.notes == "The agent must look the order up before promising anything."

    assert catalog.scenario("billing.invoice-copy").expect.contains == ("invoice",)
    status = catalog.scenario("orders.status")
    assert status.group == "Orders" and status.tags == ("orders",)
    assert status.expect.tools == (ExpectedTool("lookup_order", {"order_id": "1234"}),)


def test_activeagent_production_only_scenarios_can_be_included():
    result, catalog = _catalog(SUITE, include_production_only=True)
    assert result.excluded == 0
    live = catalog.scenario("billing.chargeback-live")
    assert live.tags == ("billing", "production_only")
    assert live.notes == "Needs the production payments backend."
    assert len(catalog.scenarios) == 4


def test_activeagent_all_production_only_says_how_to_include_them(tmp_path):
    path = _write(tmp_path, "prod.yaml", """
suite: s
groups:
  - key: g
    scenarios:
      - {key: a, prompt: hi, production_only: true}
      - {key: b, prompt: ho, production_only: true}
""")
    assert _errors(path) == [(f"{path}: all 2 scenarios are production_only and were left out; pass "
                             "--include-production-only to evaluate them")]


# --------------------------------------------------------------------------- ActiveAgent catalog


def test_activeagent_catalog_maps_products_sets_judges_and_criteria():
    result, catalog = _catalog(AA_CATALOG)
    assert result.excluded == 1 and result.format == "activeagent-catalog"
    # the display name is kept
    assert catalog.name == "Acme support evaluations" and catalog.description == ""
    assert catalog.keys == ("account.orders.history", "shop.orders.cancel", "shop.orders.status",
                            "shop.stock.kettle")

    status = catalog.scenario("shop.orders.status")
    assert status.prompt == "Where is order 1234, placed by Ada?"
    assert status.group == "Shop / Orders"
    assert status.tags == ("orders", "param:customer=Ada", "param:order_id=1234", "shop", "smoke")
    assert status.expect.contains == ("1234", "shipped")  # params fill expectations too
    assert status.expect.judge == "The answer is polite and states the order status plainly."  # the set's
    assert status.criteria == ("contains", "expected_tools", "llm_judge")

    cancel = catalog.scenario("shop.orders.cancel")
    assert cancel.expect.judge == "Confirms the cancellation and mentions the refund delay."  # its own wins
    assert cancel.expect.not_contains == ("sorry",)
    assert cancel.tags == ("orders", "orders-write", "shop")
    assert cancel.expect.tools == (ExpectedTool("cancel_order"),)

    kettle = catalog.scenario("shop.stock.kettle")
    assert kettle.group == "Shop / Stock" and kettle.criteria is None and kettle.expect.judge is None
    history = catalog.scenario("account.orders.history")
    assert history.group == "Account / Orders" and history.tags == ("account", "orders")


def test_activeagent_catalog_unknown_criterion_is_an_error_or_skipped_when_lenient(tmp_path):
    path = _write(tmp_path, "crit.yaml", """
catalog: c
products:
  - key: p
    sets:
      - key: s
        criteria: [contains, tone]
        scenarios:
          - {key: a, prompt: hi, expect: {contains: hello}}
""")
    assert _errors(path) == [
        (f"{path}:7: set 'p.s': criterion 'tone' is not one evaljobs grades (known: response_present, "
        "contains, not_contains, regex, expected_tools, max_latency_ms, token_budget, llm_judge, "
        "tools_succeeded, ideal, assertions); use a "
        "known criterion (write rubric points into 'judge') or pass --lenient to skip it")]
    result, catalog = _catalog(path, lenient=True)
    assert result.warnings == [
        (
            f"{path}:7: set 'p.s': criterion 'tone' is not one evaljobs grades (known: "
            "response_present, contains, not_contains, regex, expected_tools, "
            "max_latency_ms, token_budget, llm_judge, tools_succeeded, ideal, assertions); "
            "skipped (--lenient)"
        )
    ]
    assert catalog.scenario("p.s.a").criteria == ("contains",)


def test_activeagent_bad_entries_are_all_reported_naming_file_line_and_entry(tmp_path):
    path = _write(tmp_path, "bad_suite.yaml", """\
suite: s
owner: team-a
groups:
  - name: no key
    scenarios: []
  - key: billing
    scenarios:
      - key: refund
        prompt: "Refund {{order_id}} for {{ customer.name }}"
        params: {order_id: "1"}
      - key: refund
        prompt: again
      - prompt: no key here
      - key: typo
        prompt: hi
        expct: {contains: x}
      - key: both
        prompt: hi
        messages: [{role: user, content: hi}]
      - key: params
        prompt: hi
        params: {a: [1, 2]}
      - key: flag
        prompt: hi
        production_only: "yes"
""")
    assert _errors(path) == [
        f"{path}:4: group #1: missing 'key'",
        (
            f"{path}:9: scenario 'billing.refund': prompt has the template expression '{{{{ customer.name "
            "}}'; only plain {{name}} placeholders are supported"
        ),
        (
            f"{path}:11: scenario 'billing.refund': duplicate scenario key (also scenario 'billing.refund'); "
            "keys must be unique within their group or set"
        ),
        f"{path}:13: group 'billing': scenario #3: missing 'key'",
        (
            f"{path}:16: scenario 'billing.typo': unknown key 'expct' (did you mean 'expect'?); remove or "
            "rename it or pass --lenient to skip it"
        ),
        f"{path}:19: scenario 'billing.both': give either 'prompt' or 'messages', not both",
        (
            f"{path}:22: scenario 'billing.params': params must map names to text or numbers (they fill "
            "{{name}} placeholders in the prompt)"
        ),
        f"{path}:25: scenario 'billing.flag': production_only must be true or false, not 'yes'",
    ]
    missing = _write(tmp_path, "missing_param.yaml", "suite: s\ngroups:\n  - key: g\n    scenarios:\n"
                                                     "      - {key: a, prompt: 'Order {{order_id}}'}\n")
    assert _errors(missing) == [(f"{missing}:5: scenario 'g.a': prompt uses {{{{order_id}}}} but params has "
                                "no 'order_id'; add it under params")]


def test_activeagent_unknown_top_level_keys_are_warnings(tmp_path):
    path = _write(tmp_path, "s.yaml", "suite: s\nowner: me\ngroups:\n  - key: g\n    scenarios:\n"
                                      "      - {key: a, prompt: hi}\n")
    assert load_any(path).warnings == [f"{path}:2: top-level key 'owner' is not used by evaljobs; ignored"]


# --------------------------------------------------------------------------- promptfoo


def test_promptfoo_prompts_times_tests_with_stable_keys():
    result, catalog = _catalog(PROMPTFOO)
    assert result.warnings == [
        f"{PROMPTFOO}:3: 'providers' is ignored by evaljobs; choose the models with -m"]
    assert catalog.name == "Refund assistant prompts"
    prompts = ["chat", "polite", "prompt-1", "variants-1", "variants-2"]
    tests = ["exact-answer", "greeting", "refund-question", "test-3"]
    assert catalog.keys == tuple(f"{p}.{t}" for p in prompts for t in tests)
    assert {s.group for s in catalog.scenarios} == {"prompt-1", "Polite agent", "chat", "variants-1",
                                                    "variants-2"}


def test_promptfoo_prompt_sources_and_vars():
    _, catalog = _catalog(PROMPTFOO)
    plain = catalog.scenario("prompt-1.refund-question")
    assert plain.prompt == "You are a support agent. Customer question: How do I get a refund?"
    polite = catalog.scenario("polite.greeting")  # {{policy}} is a file:// var from defaultTest
    assert polite.prompt == ("Answer politely and briefly, following this policy: Refunds are accepted "
                             "within 30 days of delivery. Question: Hi there!")
    chat = catalog.scenario("chat.greeting")  # a JSON chat file: its system message becomes the system prompt
    assert chat.system == "You are Acme's support agent. Be concise."
    assert chat.messages == ({"role": "user", "content": "Hi there!"},)
    assert catalog.scenario("variants-1.greeting").prompt == "Customer: Hi there!\nAgent:"
    assert catalog.scenario("variants-2.greeting").prompt == ("Reply as Acme support in one sentence: "
                                                              "Hi there!")


def test_promptfoo_assertions_map_onto_native_expectations():
    _, catalog = _catalog(PROMPTFOO)
    # A test with a threshold is graded as promptfoo grades it: one weighted-list entry per assertion.
    refund = catalog.scenario("prompt-1.refund-question").expect
    assert refund.weighted and refund.threshold == 0.8
    checks = [(a["kind"], a.get("expect") or a.get("rubric") or a.get("max_ms")) for a in refund.assertions]
    assert checks == [
        ("builtin", {"not_contains": ["as an AI"]}),             # defaultTest not-icontains
        ("latency", 8000),                                      # defaultTest latency
        ("builtin", {"contains": ["refund"]}),                   # icontains
        ("builtin", {"regex": ["Refund"]}),                      # case-sensitive contains
        ("builtin", {"regex": ["(?:days|weeks)"]}),              # contains-any
        ("judge", "Mentions the Acme refund window.")]           # llm-rubric, value rendered with vars
    greeting = catalog.scenario("prompt-1.greeting").expect     # no threshold: every assertion must pass
    assert greeting.weighted and greeting.threshold is None and greeting.assertions[0]["expect"] == {
        "not_contains": ["as an AI"]}
    scenario = catalog.scenario("prompt-1.refund-question")
    assert scenario.tags == ("area:billing", "prompt:prompt-1")
    assert scenario.notes == "Refund question"
    assert catalog.scenario("prompt-1.test-3").notes == ""


@pytest.mark.parametrize("key, answer, passes", [
    ("exact-answer", "OK", True),
    ("exact-answer", "  OK\n", False),         # equals is exact in promptfoo (String(value) === output)
    ("exact-answer", "OK, sorry", False),       # equals, and not-contains-any 'sorry'
    ("exact-answer", "I OK", False),
    ("greeting", "Hello! How can I help?", True),
    ("greeting", "Hi, I can help.", False),     # starts-with Hello
    ("greeting", "Hello, about your refund", False),  # not-contains refund
    ("greeting", "Hello, about your Refund", True),   # ...case-sensitively
    ("test-3", '{"id": 1, "status": "shipped"}', True),
    ("test-3", '{"id": 1, "status": "ERROR"}', False),  # not-regex [Ee]rror|ERROR
    ("test-3", 'Here: {"id": 1, "status": "x"}', False),  # is-json: the whole answer
    ("test-3", '{"status": "x"}', False),                # contains-all '"id"'
])
def test_promptfoo_assertions_grade_like_promptfoo(key, answer, passes):
    _, catalog = _catalog(PROMPTFOO)
    grades = grade(catalog.scenario(f"prompt-1.{key}"), Replay(answer=answer, turns=1))
    assert (grades.status == "passed") is passes, grades


def test_promptfoo_unsupported_assertion_is_an_error_or_a_lenient_skip(tmp_path):
    path = _write(tmp_path, "promptfoo.yaml", """\
prompts: ["Q: {{question}}"]
tests:
  - vars: {question: a}
  - description: b
    vars: {question: b}
  - description: refund question
    vars: {question: "refund?"}
    assert:
      - type: perplexity
        value: refund
      - type: icontains
        value: refund
""")
    assert _errors(path) == [
        (f"{path}:9: test #3 ('refund question'): assertion type 'perplexity' cannot be graded by evaljobs; "
        "remove it or pass --lenient to skip it")]
    result, catalog = _catalog(path, lenient=True)
    assert result.warnings == [(f"{path}:9: test #3 ('refund question'): assertion type 'perplexity' cannot "
                               "be graded by evaljobs; skipped (--lenient)")]
    # The test lost an assertion: it is not gradable, never graded on what is left.
    assert [a["kind"] for a in catalog.scenario("prompt-1.refund-question").expect.assertions] == [
        "refused", "builtin"]
    assert catalog.keys == ("prompt-1.b", "prompt-1.refund-question", "prompt-1.test-1")


def test_promptfoo_bad_config_reports_every_problem(tmp_path):
    (tmp_path / "prompt.py").write_text("def prompt(): ...")
    path = _write(tmp_path, "bad.yaml", """\
prompts:
  - "Q: {{question}}"
  - file://missing.txt
  - file://prompt.py
  - "Shout {{ question | nl2br }}"
scenarios: []
tests:
  - description: bad regex
    vars: {question: hi}
    assert:
      - type: regex
        value: "(unclosed"
  - description: odd values
    vars: {question: "x"}
    assert:
      - type: contains
      - {type: equals, value: {a: 1}}
      - {type: is-json, value: {type: object}}
  - description: no var
    vars: {other: x, many: [a, b]}
    threshold: 2
    expect: nothing
  - "just a string"
""")
    assert _errors(path) == [
        (
            f"{path}:6: top-level key 'scenarios' is not supported by evaljobs; remove it or pass --lenient "
            "to skip it"
        ),
        f"{path}:3: prompt #2: prompt file 'missing.txt' not found (looked for {tmp_path}/missing.txt)",
        (
            f"{path}:4: prompt #3: prompt file 'prompt.py' (.py) cannot be read by evaljobs (only text and "
            "JSON/YAML chat files; code prompts are not run); use a text or chat file or pass --lenient to "
            "skip it"
        ),
        # promptfoo reads a string in the list as a glob of tests files (none matches here)
        (
            f"{path}:23: test #4: no tests file matches 'just a string' (looked in {tmp_path}); a test is a "
            "mapping with vars and assert, or a file:// path to a YAML, JSON or CSV file of tests"
        ),
        (
            f"{path}:11: test #1 ('bad regex'): assertion 'regex': regex '(unclosed' does not compile: "
            "missing ), unterminated subpattern"
        ),
        f"{path}:16: test #2 ('odd values'): assertion 'contains': value must be a string, not None",
        (
            f"{path}:17: test #2 ('odd values'): assertion type 'equals' with a non-text value (deep JSON "
            "equality) cannot be graded by evaljobs; remove it or pass --lenient to skip it"
        ),
        # (is-json with a schema, line 18, is graded now: jsonschema validates it)
        f"{path}:21: test #3 ('no var'): threshold must be a number from 0 to 1, not 2",
        (
            f"{path}:19: test #3 ('no var'): prompt 'prompt-1' uses {{{{question}}}} but the test has no var "
            "'question'; add it under vars (or defaultTest.vars)"
        ),
        # A Nunjucks filter evaljobs does not render is refused by name, once, at the prompt that uses it
        # (a list var such as 'many' is not a problem: promptfoo runs the test once per value, as evaljobs).
        (
            f"{path}:5: prompt #4: prompt 'prompt-4' uses the Nunjucks filter 'nl2br', which evaljobs does "
            "not render (known: abs, default, d, dump, first, float, int, join, last, length, list, load, "
            "lower, replace, reverse, safe, string, trim, upper); simplify it or pass --lenient to skip it"
        ),
    ]


def test_promptfoo_keys_promptfoo_ignores_are_ignored_with_a_warning(tmp_path):
    """promptfoo's test schema drops keys it does not know (promptfoo/examples/french-greeting-test has a
    test with ``type: assert-set``): evaljobs ignores them too, saying so; a promptfoo key evaljobs cannot
    honour is refused."""
    path = _write(tmp_path, "promptfooconfig.yaml", """\
prompts: ["Hi"]
tests:
  - type: assert-set
    threshold: 0.5
    expect: nothing
    assert: [{type: icontains, value: bonjour}, {type: icontains, value: salut}]
  - providerOutput: Bonjour
""")
    assert _errors(path) == [
        (
            f"{path}:7: test #2: unknown key 'providerOutput' (known: description, vars, assert, "
            "threshold, metadata, options); remove or rename it or pass --lenient to skip it"
        )
    ]
    result, catalog = _catalog(path, lenient=True)
    assert result.warnings[:2] == [
        f"{path}:3: test #1: key 'type' is not a promptfoo test key: promptfoo ignores it, and so does "
        "evaljobs",
        f"{path}:5: test #1: key 'expect' is not a promptfoo test key: promptfoo ignores it, and so does "
        "evaljobs",
    ]
    expect = catalog.scenario("prompt-1.test-1").expect
    assert expect.threshold == 0.5 and [a["kind"] for a in expect.assertions] == ["builtin", "builtin"]


def test_promptfoo_rubric_prompt_is_refused_with_the_llm_rubric_it_changes(tmp_path):
    """A custom rubricPrompt decides what the judge is asked (promptfoo's custom-grading-prompt example asks
    it to always pass): the llm-rubric it applies to is refused by name; a test without one is unaffected."""
    path = _write(tmp_path, "promptfooconfig.yaml", """\
prompts: ["Talk about {{topic}}"]
defaultTest:
  options:
    rubricPrompt: [{role: system, content: "Always pass."}, {role: user, content: "Output: {{ output }}"}]
tests:
  - vars: {topic: the economy}
    assert:
      - type: llm-rubric
  - vars: {topic: rates}
    assert: [{type: icontains, value: rate}]
""")
    assert _errors(path) == [
        (
            f"{path}:8: test #1: assertion type 'llm-rubric' with defaultTest's options.rubricPrompt (a "
            "judge prompt of its own) cannot be graded by evaljobs, whose judge asks its own prompt; remove "
            "the rubricPrompt or pass --lenient to skip it"
        )
    ]
    result, catalog = _catalog(path, lenient=True)
    assert result.counts["refused"] == 1
    assert [a["kind"] for a in catalog.scenario("prompt-1.test-1").expect.assertions] == ["refused"]
    assert [a["kind"] for a in catalog.scenario("prompt-1.test-2").expect.assertions] == ["builtin"]


def test_promptfoo_tests_list_mixes_tests_and_globs_of_tests_files(tmp_path):
    """promptfoo's readTests: a string in the tests list is a glob of tests files (examples/
    config-separate-test-configs: `- file://tests/*` among inline tests); each file's tests take its place."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "b.yaml").write_text(
        "- vars: {topic: b1}\n- description: Named\n  vars: {topic: b2}\n"
    )
    (tmp_path / "tests" / "a.yaml").write_text("vars: {topic: a1}\nassert: [{type: icontains, value: a1}]\n")
    (tmp_path / "more.csv").write_text("topic,__expected\nc1,icontains:c1\n")
    path = _write(tmp_path, "promptfooconfig.yaml", """\
prompts: ["Tell me about {{topic}}"]
tests:
  - vars: {topic: inline}
  - file://tests/*
  - file://more.csv
""")
    result, catalog = _catalog(path)
    assert [(s["key"], s["prompt"]) for s in result.data["groups"][0]["scenarios"]] == [
        ("prompt-1.test-1", "Tell me about inline"), ("prompt-1.a-1", "Tell me about a1"),
        ("prompt-1.b-1", "Tell me about b1"), ("prompt-1.named", "Tell me about b2"),
        ("prompt-1.more-1", "Tell me about c1")]
    assert catalog.scenario("prompt-1.more-1").expect.assertions[0]["expect"] == {"contains": ["c1"]}
    (tmp_path / "tests" / "c.txt").write_text("not tests")
    assert _errors(path) == [
        (
            f"{path}:4: tests: tests file 'tests/c.txt' is not YAML, JSON or CSV (code is not "
            "run by evaljobs); convert it to YAML or pass --lenient to skip it"
        )
    ]


def test_promptfoo_prompt_that_renders_to_a_json_chat_is_a_chat(tmp_path):
    """promptfoo's OpenAI provider sends a rendered prompt that parses as JSON as its messages."""
    path = _write(tmp_path, "promptfooconfig.yaml", """\
prompts: ["{{conversation}}", "Say {{conversation}}"]
tests:
  - vars: {conversation: '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]'}
""")
    _, catalog = _catalog(path)
    chat = catalog.scenario("prompt-1.test-1")
    assert chat.system == "Be brief." and chat.messages == ({"role": "user", "content": "Hi"},)
    assert catalog.scenario("prompt-2.test-1").prompt.startswith('Say [{"role": "system"')


def test_promptfoo_prompt_path_is_a_glob(tmp_path):
    """promptfoo reads `file://prompt*.txt` as a glob: every matching file's prompts, in name order."""
    (tmp_path / "prompt2.txt").write_text("Second {{x}}\n---\nThird {{x}}\n")
    (tmp_path / "prompt1.txt").write_text("First {{x}}\n")
    path = _write(
        tmp_path, "promptfooconfig.yaml", "prompts: [file://prompt*.txt]\ntests: [{vars: {x: a}}]\n"
    )
    result, _ = _catalog(path)
    assert [(g["name"], [s["prompt"] for s in g["scenarios"]]) for g in result.data["groups"]] == [
        ("prompt1", ["First a"]), ("prompt2-1", ["Second a"]), ("prompt2-2", ["Third a"])]
    missing = _write(tmp_path, "missing.yaml", "prompts: [file://none*.txt]\ntests: [{vars: {x: a}}]\n")
    assert _errors(missing) == [(f"{missing}:1: prompt #1: prompt file 'none*.txt' not found (looked for "
                                f"{tmp_path}/none*.txt)")]


def test_promptfoo_tests_file_and_default_test_vars_in_asserts(tmp_path):
    (tmp_path / "tests.yaml").write_text("- description: Capital\n  vars: {country: France, answer: Paris}\n")
    path = _write(tmp_path, "promptfooconfig.yaml", """\
prompts:
  - id: geo
    raw: "What is the capital of {{country}}?"
defaultTest:
  assert:
    - {type: icontains, value: "{{answer}}"}
tests: file://tests.yaml
""")
    _, catalog = _catalog(path)
    assert catalog.keys == ("geo.capital",)
    assert catalog.scenario("geo.capital").expect.assertions[0]["expect"] == {"contains": ["Paris"]}


# --------------------------------------------------------------------------- JSONL


def test_jsonl_samples_become_scenarios_graded_by_the_named_grader():
    assert _errors(JSONL) == [
        (f"{JSONL}: the samples do not say how to grade them (the eval that uses them does); pass --grader "
        "(OpenAI evals: match, includes, includes_ignore_case, fuzzy_match; Inspect: inspect_includes, "
        "inspect_match, inspect_exact, inspect_pattern:REGEX, inspect_answer:letter|word|line; or "
        "model_graded_fact (the LLM judge)), or run the eval's OpenAI evals registry YAML")]
    result, catalog = _catalog(JSONL, grader="includes")
    assert (result.format, result.excluded, result.warnings) == ("jsonl", 0, [])
    assert catalog.name == "samples"
    assert catalog.keys == ("17", "arith-1", "sample-1", "sample-5")  # line 3 is blank: ids count lines
    first = catalog.scenario("sample-1")
    assert first.prompt == "What is the capital of France? Answer in one word."
    # The grader is the one named, for 'ideal' and 'target' samples alike; the reference answer is a gate.
    assert (first.expect.ideal, first.expect.ideal_grader, first.expect.gates) == (("Paris",), "includes",
                                                                                  ("ideal",))
    arith = catalog.scenario("arith-1")
    assert arith.system == "Answer with a number only."
    assert arith.messages == ({"role": "user", "content": "What is 2 + 2?"},)
    assert arith.expect.ideal == ("4", "four") and arith.expect.ideal_grader == "includes"
    colour = catalog.scenario("17")
    assert colour.tags == ("difficulty:easy", "source:inspect")
    assert catalog.scenario("sample-5").expect.ideal == ("tac",)
    _, inspect = _catalog(JSONL, grader="inspect_match")
    assert inspect.scenario("arith-1").expect.ideal_grader == "inspect_match"


def test_jsonl_bad_lines_name_their_line_numbers(tmp_path):
    path = _write(tmp_path, "evals.jsonl", "\n".join([  # noqa: FLY002 -- one sample a line reads better
        '{"input": "ok", "ideal": "x"}',
        '{"input": "broken", ',
        '[1, 2]',
        '{"input": "no answer"}',
        '{"id": "a", "input": [{"role": "user", "content": [{"type": "image"}]}], "target": "x"}',
        '{"id": "dup", "input": "one", "target": "x"}',
        '{"id": "dup", "input": "two", "target": "x"}',
        '{"input": "q", "ideal": "a", "target": "b"}',
        '{"input": "q", "target": "a", "choices": ["a", "b"]}',
        '{"input": "q", "target": "b", "choices": ["a", "b"]}',
    ]) + "\n")
    assert _errors(path, grader="includes") == [
        f"{path}:2: sample: not valid JSON: Expecting property name enclosed in double quotes (column 21)",
        f"{path}:3: sample: must be a JSON object with 'input' and 'ideal' or 'target', not list",
        (
            f"{path}:4: sample 'sample-4': needs 'ideal' or 'target': the answer text (or a list of accepted "
            "answers), not None"
        ),
        (
            f"{path}:5: sample 'a': input[0] must be {{role, content}} with text content (images and other "
            "parts are not supported), not {'role': 'user', 'content': [{'type': 'image'}]}"
        ),
        f"{path}:7: sample 'dup': duplicate id (also on line 6); ids must be unique",
        f"{path}:8: sample 'sample-8': has both 'ideal' and 'target'; keep one",
        (
            f"{path}:9: field 'choices' (2 samples, first on line 9): Inspect's multiple_choice() solver "
            "writes the prompt from them; evaljobs sends the input as it is; remove the samples or pass "
            "--lenient to skip it"
        ),
    ]


def test_jsonl_lenient_skips_refused_samples_and_empty_files_are_errors(tmp_path):
    path = _write(tmp_path, "mc.jsonl", '{"input": "q", "target": "a", "choices": ["a", "b"]}\n'
                                        '{"input": "q2", "target": "b"}\n')
    result = load_any(path, lenient=True, grader="inspect_includes")
    assert result.warnings == [
        (
            f"{path}:1: field 'choices' (line 1): Inspect's multiple_choice() solver writes "
            "the prompt from them; evaljobs sends the input as it is; skipped (--lenient)"
        )
    ]
    # The sample with choices is refused, never graded on an input Inspect would not send.
    assert [s["key"] for s in result.data["scenarios"]] == ["sample-2"]
    assert result.counts == {"assertions": 2, "mapped": 1, "external": 0, "refused": 1}
    only = _write(tmp_path, "only.jsonl", '{"input": "q", "target": "a", "choices": ["a", "b"]}\n')
    assert _errors(only, lenient=True, grader="inspect_includes") == [
        (
            f"{only}: no samples left to run: --lenient skipped every sample; the first: {only}:1: field "
            "'choices' (line 1): Inspect's multiple_choice() solver writes the prompt from them; evaljobs "
            "sends the input as it is"
        )
    ]
    # Fields nobody reads are ignored, as the source tools ignore them, and said so in one warning.
    extra = _write(tmp_path, "extra.jsonl", '{"input": "q", "target": "a", "label": "a", "extra": 1}\n'
                                            '{"input": "q2", "target": "b", "label": "b"}\n')
    assert load_any(extra, grader="inspect_includes").warnings == [
        (f"{extra}: fields 'label', 'extra' are not used (evaljobs reads input, ideal, target, id, metadata; "
        "--field maps others)")]
    empty = _write(tmp_path, "empty.jsonl", "\n\n")
    assert _errors(empty, grader="includes") == [f"{empty}: no samples; write one JSON object per line"]


# --------------------------------------------------------------------------- stability and round trips


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_converting_twice_yields_identical_data(path):
    first, second = load_any(path, **_opts(path)), load_any(path, **_opts(path))
    assert first.data == second.data
    assert dump_native(first.data) == dump_native(second.data)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_converted_yaml_is_a_native_catalog_with_the_same_digest(path, tmp_path):
    result, catalog = _catalog(path, **_opts(path))
    text = dump_native(result.data)
    assert "&id" not in text and "*id" not in text  # no YAML aliases: every scenario reads on its own
    out = tmp_path / "converted.yaml"
    out.write_text(text)
    again = load_any(out)
    assert again.format == "native"
    assert parse_catalog(again.data, source=str(out)).digest == catalog.digest
    assert loads_catalog(text, source=str(out)).digest == catalog.digest


def test_keys_survive_edits_that_reorder_or_add_entries(tmp_path):
    data = yaml.safe_load(SUITE.read_text())
    data["groups"].reverse()
    data["groups"][0]["scenarios"].insert(0, {"key": "new", "prompt": "A new scenario"})
    path = _write(tmp_path, "edited.yaml", yaml.safe_dump(data))
    before = {s.key: s for s in _catalog(SUITE)[1].scenarios}
    after = {s.key: s for s in _catalog(path)[1].scenarios}
    assert set(after) == set(before) | {"orders.new"}
    assert all(after[key] == scenario for key, scenario in before.items())


def test_promptfoo_file_references_resolve_relative_to_the_config(tmp_path, monkeypatch):
    copy = tmp_path / "elsewhere"
    shutil.copytree(PROMPTFOO.parent, copy)
    monkeypatch.chdir(tmp_path)  # not the config's folder
    moved = load_any(Path("elsewhere") / "promptfooconfig.yaml")
    assert moved.data["groups"] == load_any(PROMPTFOO).data["groups"]


def test_unreadable_and_empty_files_are_one_line_errors(tmp_path):
    assert _errors(tmp_path / "nope.yaml") == [(f"{tmp_path / 'nope.yaml'}: cannot read: No such file or "
                                               "directory")]
    empty = _write(tmp_path, "empty.yaml", "  \n")
    assert _errors(empty) == [f"{empty}: the file is empty"]
    broken = _write(tmp_path, "broken.yaml", "suite: s\ngroups: [\n")
    assert _errors(broken)[0].startswith(f"{broken}:3: YAML syntax error: ")


def test_report_says_how_many_production_only_scenarios_were_left_out(cli, tmp_path, simulated_provider):


    simulated_provider(latency=0.0)
    result = cli("run", str(IMPORTS / "activeagent_suite.yaml"), "-m", "sim/a", "--strategy", "sequential",
                 "--db", f"sqlite:///{tmp_path}/x.db")
    assert result.exit_code == 0, result.output
    assert "1 production_only scenario left out" in result.output
