"""promptfoo imports grade the way promptfoo does: $ref templates, transforms, javascript in Node,
python in a subprocess, is-json schemas, YAML 1.2, and honest refusals.

The configs under ``tests/data/promptfoo`` are promptfoo's own examples (see SOURCE).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evaljobs.catalog import CatalogError, parse_catalog
from evaljobs.catalog.importers import load_any
from evaljobs.evaluation.assertions import NodeRunner, ProcessRunner
from evaljobs.evaluation.grading import grade
from evaljobs.evaluation.replay import Replay
from evaljobs.evaluation.result import ERRORED, FAILED, PASSED

# python/javascript assertions and transforms are the catalog's code: these tests opt in (--allow-code)
pytestmark = pytest.mark.usefixtures("allow_code")

DATA = Path(__file__).parents[1] / "data" / "promptfoo"
SIMPLE = DATA / "simple-test" / "promptfooconfig.yaml"
JSON_OUTPUT = DATA / "json-output" / "promptfooconfig.yaml"
PYTHON_INLINE = DATA / "python-assert" / "promptfooconfig-inline.yaml"

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH")


def _catalog(path: Path, *, lenient: bool = False):
    imported = load_any(path, lenient=lenient)
    return imported, parse_catalog(imported.data, source=str(path))


@pytest.fixture(scope="module")
def runner():
    node = NodeRunner(timeout=2.0)
    yield ProcessRunner(node)
    node.close()


def test_simple_test_imports_with_yaml_12_refs_and_one_refusal():
    # Without --lenient, exactly one thing stops the import: 'similar', with its reason.
    with pytest.raises(CatalogError) as info:
        load_any(SIMPLE)
    assert info.value.problems == [
        (
            f"{SIMPLE}:38: test #4 ('Check for semantic similarity'): assertion type 'similar' needs an "
            "embedding model to compare meanings, which evaljobs does not have (write the expected phrases "
            "as icontains, or a rubric as llm-rubric); remove it or pass --lenient to skip it"
        )
    ]
    _, catalog = _catalog(SIMPLE, lenient=True)
    assert len(catalog.scenarios) == 10  # 2 prompts x 5 tests
    exact = catalog.scenario("prompts-1.check-for-exact-match")
    assert exact.prompt == "Rephrase this from English to Pirate: Yes"  # YAML 1.2: 'Yes' is text, not true
    pirate = catalog.scenario("prompts-2.use-llm-to-evaluate-output")
    judge, ref = pirate.expect.assertions  # every test is its assertion list, graded as promptfoo grades it
    assert judge["rubric"] == "Is spoken like a pirate" and ref["expect"] == {"contains": ["arrr"]}  # $ref
    similar = catalog.scenario("prompts-1.check-for-semantic-similarity").expect.assertions
    assert [a["kind"] for a in similar] == ["javascript", "python", "refused"]


def test_a_missing_ref_is_one_line_or_skipped_under_lenient(tmp_path):
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(
        "prompts: ['Say {{x}}']\ntests:\n  - vars: {x: hi}\n    assert:\n"
        "      - $ref: '#/assertionTemplates/nope'\n      - type: icontains\n        value: hi\n"
    )
    with pytest.raises(CatalogError) as info:
        load_any(config)
    assert info.value.problems == [
        (
            f"{config}:5: test #1: $ref '#/assertionTemplates/nope' points to nothing in this file; define "
            "it under assertionTemplates or fix the name or pass --lenient to skip it"
        )
    ]
    imported, catalog = _catalog(config, lenient=True)
    # The test lost an assertion: it is not gradable (never graded on what is left).
    assert [a["kind"] for a in catalog.scenarios[0].expect.assertions] == ["builtin", "refused"]
    assert "skipped (--lenient)" in imported.warnings[0]


@needs_node
def test_json_output_transforms_schema_and_javascript_run_like_promptfoo(runner):
    _, catalog = _catalog(JSON_OUTPUT)
    banana, passion = catalog.scenario("prompt-1.test-1"), catalog.scenario("prompt-1.test-2")
    assert passion.expect.assertions[0]["transforms"] == ["JSON.parse(output)"]
    assert passion.expect.assertions[2]["transforms"] == ["JSON.parse(output)", "output.countries"]

    good = '{"color": "purple", "countries": ["Brazil", "India"]}'
    result = grade(passion, Replay(answer=good), assertions=runner)
    assert result.status == PASSED, result.details
    # contains-any on the transformed output (output.countries): none of the listed countries.
    wrong = grade(
        passion, Replay(answer='{"color": "purple", "countries": ["Brazil", "Peru"]}'), assertions=runner
    )
    assert (wrong.status, wrong.fault) == (FAILED, "regex_mismatch")  # contains-any is a native regex check
    assert [o["pass"] for o in wrong.details["assertions"]] == [True, True, False]
    # The schema: countries must be strings.
    schema = grade(passion, Replay(answer='{"color": "purple", "countries": [1]}'), assertions=runner)
    assert "does not match the schema at countries/0" in schema.details["assertions"][0]["reason"]
    # Not JSON: the transform throws, and promptfoo's assertions fail with the error.
    broken = grade(passion, Replay(answer="purple, from Brazil"), assertions=runner)
    assert broken.status == FAILED and "JavaScript error" in broken.details["assertions"][0]["reason"]

    yellow = '{"color": "yellow", "countries": ["Ecuador"]}'
    assert grade(banana, Replay(answer=yellow), assertions=runner).status == PASSED
    assert (
        grade(banana, Replay(answer='{"color": "green", "countries": []}'), assertions=runner).status
        == FAILED
    )


def test_python_assertions_inline_run_in_a_subprocess(runner):
    _, catalog = _catalog(PYTHON_INLINE)
    bananas, potatoes = catalog.scenario("prompt-1.test-1"), catalog.scenario("prompt-1.test-2")
    assert grade(bananas, Replay(answer="I love bananas!"), assertions=runner).status == PASSED
    assert grade(bananas, Replay(answer="I love apples!"), assertions=runner).status == FAILED
    result = grade(potatoes, Replay(answer="Potatoes rock"), assertions=runner)
    assert (
        result.status == FAILED
        and result.details["assertions"][0]["reason"] == "Did not contain expected output"
    )
    assert grade(potatoes, Replay(answer="Expected output"), assertions=runner).status == PASSED


def test_python_file_assertion_source_is_stored_and_run(tmp_path, runner):
    (tmp_path / "grader.py").write_text("def check(output, context):\n    return len(output) / 10\n")
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text("prompts: ['Say {{x}}']\ntests:\n  - vars: {x: hi}\n    assert:\n"
                      "      - type: python\n        value: file://grader.py:check\n        threshold: 0.5\n")
    _, catalog = _catalog(config)
    entry = catalog.scenarios[0].expect.assertions[0]
    assert entry["function"] == "check" and "len(output)" in entry["code"]  # runs on any worker
    assert grade(catalog.scenarios[0], Replay(answer="hello world"), assertions=runner).status == PASSED
    assert grade(catalog.scenarios[0], Replay(answer="hey"), assertions=runner).status == FAILED


@needs_node
def test_javascript_file_modules_run_like_promptfoo(tmp_path, runner):
    """file://x.js[:function] (promptfoo's loadFromJavaScriptFile): a CommonJS module.exports, an ES module's
    default export (promptfoo/examples/eval-custom-grader-csv names a .ts file of plain JavaScript from a CSV
    cell), or a named function; the source is stored in the catalog, so any worker runs the same code."""
    (tmp_path / "cjs.js").write_text(
        "module.exports = (output, context) => output.includes(context.vars.x);\n"
    )
    (tmp_path / "esm.ts").write_text("export default function (output, context) {\n"
                                     "  return output.toLowerCase().includes('ahoy');\n}\n")
    (tmp_path / "named.mjs").write_text("export function score(output) { return output.length / 10; }\n")
    (tmp_path / "tests.csv").write_text("x,__expected\nhi,javascript:file://esm.ts\n")
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text("prompts: ['Say {{x}}']\ntests:\n  - vars: {x: hi}\n    assert:\n"
                      "      - {type: javascript, value: 'file://cjs.js'}\n"
                      "      - {type: javascript, value: 'file://named.mjs:score', threshold: 0.5}\n")
    _, catalog = _catalog(config)
    scenario = catalog.scenarios[0]
    assert scenario.expect.assertions[0]["module"].startswith("module.exports")
    assert grade(scenario, Replay(answer="hi there"), assertions=runner).status == PASSED
    assert grade(scenario, Replay(answer="hi"), assertions=runner).status == FAILED      # score 0.2 < 0.5
    assert grade(scenario, Replay(answer="hello world"), assertions=runner).status == FAILED  # no 'hi'
    config.write_text("prompts: ['Say {{x}}']\ntests: file://tests.csv\n")
    _, catalog = _catalog(config)
    assert grade(catalog.scenarios[0], Replay(answer="Ahoy!"), assertions=runner).status == PASSED
    assert grade(catalog.scenarios[0], Replay(answer="Hello"), assertions=runner).status == FAILED


@needs_node
@pytest.mark.parametrize("code, answer, passes", [
    ("output.length > 3\n", "hello", True),                       # a YAML block's trailing newline: one line
    ("const n = output.length; n > 3", "hello", True),             # the last expression is returned
    ("const n = output.length; n > 3;", "hi", False),
    ("output === 'a;b'", "a;b", True),
])
def test_javascript_assertion_body_is_built_as_promptfoo_builds_it(runner, code, answer, passes):
    from evaljobs.catalog import Expect, Scenario
    scenario = Scenario(key="s", messages=({"role": "user", "content": "x"},), expect=Expect(
        weighted=True, assertions=({"kind": "javascript", "code": code, "label": "js"},)))
    assert (grade(scenario, Replay(answer=answer), assertions=runner).status == PASSED) is passes


@needs_node
def test_javascript_has_a_timeout_and_the_node_process_survives(runner):
    from evaljobs.catalog import Expect, Scenario

    loop = Scenario(
        key="s",
        messages=({"role": "user", "content": "x"},),
        pass_threshold=1.0,
        expect=Expect(
            assertions=({"kind": "javascript", "code": "while (true) {}\nreturn true", "label": "loop"},)
        ),
    )
    result = grade(loop, Replay(answer="x"), assertions=runner)
    assert result.status == FAILED and "timed out" in result.details["assertions"][0]["reason"]
    ok = Scenario(
        key="t",
        messages=({"role": "user", "content": "x"},),
        pass_threshold=1.0,
        expect=Expect(assertions=({"kind": "javascript", "code": "output.length", "label": "len"},)),
    )
    assert grade(ok, Replay(answer="abc"), assertions=runner).scores["assertions"] == 1.0


def test_without_node_a_javascript_assertion_is_refused_in_one_line():
    _, catalog = _catalog(JSON_OUTPUT)
    no_node = ProcessRunner(NodeRunner(node=None))
    no_node.node.node = None
    result = grade(catalog.scenario("prompt-1.test-1"), Replay(answer="{}"), assertions=no_node)
    assert (result.status, result.fault) == (ERRORED, "not_gradable")
    (line,) = result.details["not_gradable"]
    assert line.startswith("test #1: assertion #2 (javascript): needs Node.js: install Node.js")
    assert "\n" not in line


def test_a_test_whose_every_assertion_was_refused_is_not_gradable(tmp_path):
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(
        "prompts: ['Say {{x}}']\ntests:\n  - vars: {x: hi}\n    assert:\n"
        "      - type: similar\n        value: hello\n      - type: moderation\n"
    )
    _, catalog = _catalog(config, lenient=True)
    result = grade(catalog.scenarios[0], Replay(answer="hello"))
    assert (result.status, result.fault) == (ERRORED, "not_gradable")
    assert len(result.details["not_gradable"]) == 2 and "response_present" not in result.scores


def test_a_run_with_javascript_is_refused_before_creation_without_node(tmp_path, monkeypatch):
    from evaljobs.api import Session, UsageError
    from evaljobs.evaluation import assertions
    from evaljobs.evaluation.result import Result
    from evaljobs.reports import junit

    monkeypatch.setattr(assertions.shutil, "which", lambda name: None)
    with Session(db=f"sqlite:///{tmp_path}/runs.db", broker="memory") as session, \
            pytest.raises(UsageError) as info:
        session.submit(str(JSON_OUTPUT), ["sim/fast"], strategy="sequential")
    assert str(info.value).startswith(
        f"{JSON_OUTPUT}: test #1: assertion #2 (javascript): needs Node.js: install"
    )
    # JUnit carries the grader's account of external assertions and gates.
    result = Result(
        "k",
        "m",
        "failed",
        details={
            "failed_gates": ["assertions"],
            "assertions": [
                {
                    "assertion": "test #2: assertion #3 (contains-any)",
                    "pass": False,
                    "reason": "no match for /India/",
                }
            ],
        },
    )
    lines = junit.grade_lines(result)
    assert "failed gates: assertions" in lines
    assert "assertion failed: test #2: assertion #3 (contains-any): no match for /India/" in lines


def test_cost_is_graded_with_the_price_of_the_call_as_promptfoo_grades_it(tmp_path):
    """promptfoo's cost: pass when the call's cost is at most the threshold (not-cost: above it), score 1 or
    0; its weight counts in a weighted test. An unknown price is not gradable (promptfoo errors), never $0;
    a cost without a threshold is refused by name (promptfoo errors: 'must have a threshold')."""
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(
        "prompts: ['Say {{x}}']\ntests:\n"
        "  - vars: {x: a}\n    assert:\n      - type: cost\n        threshold: 0.002\n"
        "  - vars: {x: b}\n    assert:\n      - type: not-cost\n        threshold: 0.002\n"
        "  - vars: {x: c}\n    threshold: 0.5\n    assert:\n      - type: cost\n        threshold: 0.002\n"
        "        weight: 3\n      - type: contains\n        value: zzz\n"
    )
    _, catalog = _catalog(config)
    cheap, costly, unknown = (Replay(answer="hi", cost=c) for c in (0.0019, 0.0021, None))
    plain, negated, weighted = catalog.scenarios
    assert grade(plain, cheap).status == PASSED and grade(plain, costly).status == FAILED
    assert grade(negated, cheap).status == FAILED and grade(negated, costly).status == PASSED
    assert grade(weighted, cheap).status == PASSED and grade(weighted, cheap).score == 0.75
    assert grade(weighted, costly).status == FAILED
    for scenario in catalog.scenarios:  # an unknown price cannot be compared with a threshold
        result = grade(scenario, unknown)
        assert (result.status, result.fault) == (ERRORED, "not_gradable")
        assert "the price of the call is unknown" in str(result.details)
    config.write_text("prompts: ['Say {{x}}']\ntests:\n  - vars: {x: a}\n    assert:\n      - type: cost\n")
    with pytest.raises(CatalogError) as info:
        _catalog(config)
    assert "cost" in str(info.value) and "threshold" in str(info.value) and "\n" not in str(info.value)
