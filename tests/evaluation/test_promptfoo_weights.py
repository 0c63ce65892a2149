"""promptfoo's weights, test thresholds and assert-sets: imported tests get promptfoo's verdict and score.

The expected verdicts are derived from promptfoo's own rules, transcribed below from its source
(``src/assertions/index.ts`` ``runAssertions`` / ``runAssertionInternal`` and
``src/assertions/assertionsResult.ts`` ``AssertionsResult``; commits in tests/data/promptfoo/SOURCE):

1. Each assertion gives (pass, score). A built-in check (contains, equals, is-json...) scores 1 when it
   passes, else 0. A javascript assertion returning a number n scores n and passes when n > 0; one
   returning a boolean b scores 1 or 0 and passes when b.
2. An assertion of weight 0 always passes ("If weight is 0, treat this as a metric-only assertion that
   can't fail").
3. The test's score is sum(score_i * weight_i) / sum(weight_i), weights defaulting to 1; 0 when the
   weights sum to 0.
4. Without a test ``threshold`` the test passes when no assertion failed.
5. With a numeric ``threshold`` the test passes when its score >= threshold, whatever the single
   verdicts ("A numeric test threshold overrides the pass/fail status of individual assertions").
6. An ``assert-set`` is a nested AssertionsResult with its own threshold; its (pass, score) counts as
   one assertion of the test, with the set's weight. Rule 2 applies to single assertions only: a failing
   set of weight 0 still fails the test.

The real file is promptfoo/examples/f-score's config (weight-0 counters beside an accuracy check, a
JSON-schema prompt, CSV tests); the worked example is the one promptfoo's documentation gives.
"""
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from evaljobs.catalog import parse_catalog
from evaljobs.catalog.importers import load_any
from evaljobs.evaluation.assertions import NodeRunner, ProcessRunner
from evaljobs.evaluation.grading import grade
from evaljobs.evaluation.replay import Replay
from evaljobs.evaluation.result import FAILED, PASSED

# python/javascript assertions and transforms are the catalog's code: these tests opt in (--allow-code)
pytestmark = pytest.mark.usefixtures("allow_code")

DATA = Path(__file__).parents[1] / "data" / "promptfoo"
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH")


def promptfoo_result(results: list[tuple], threshold: float | None) -> tuple[bool, float]:
    """Rules 2-6. ``results``: (pass, score, weight, is_set) per assertion of one list."""
    total = weights = 0.0
    failed = False
    for passed, score, weight, is_set in results:
        if weight == 0 and not is_set:
            passed = True                                           # rule 2
        total += score * weight
        weights += weight
        failed = failed or not passed
    score = total / weights if weights > 0 else 0.0                 # rule 3
    if threshold is None:
        return not failed, score                                    # rule 4
    return score >= threshold, score                                # rule 5


def _load(path: Path):
    imported = load_any(path)
    return imported, parse_catalog(imported.data, source=str(path))


@pytest.fixture(scope="module")
def runner():
    node = NodeRunner(timeout=5.0)
    yield ProcessRunner(node)
    node.close()


# --------------------------------------------------------------------------- the documentation's example


def _docs_example(tmp_path: Path, threshold: str) -> Path:
    """promptfoo's documentation (expected-outputs/index.md, "Weighted assertions" / "Setting a score
    requirement"): equals 'Hello world' with weight 2 and contains 'world' with weight 1."""
    path = tmp_path / "promptfooconfig.yaml"
    path.write_text(textwrap.dedent(f"""\
        prompts: ['Greet the {{{{who}}}}']
        tests:
          - vars: {{who: world}}
            {threshold}
            assert:
              - type: equals
                value: 'Hello world'
                weight: 2
              - type: contains
                value: 'world'
                weight: 1
    """))
    return path


@pytest.mark.parametrize("threshold, answer, passes, score", [
    # "If the LLM output is Goodbye world, the equals assertion fails but the contains assertion passes,
    # and the final score is 0.33 (1/3)" ... "below the 0.5 threshold, the test case fails. If the
    # threshold were lowered to 0.2, the test case would succeed."
    ("threshold: 0.5", "Goodbye world", False, 1 / 3),
    ("threshold: 0.2", "Goodbye world", True, 1 / 3),
    ("threshold: 0.5", "Hello world", True, 1.0),
    ("threshold: 0", "Goodbye moon", True, 0.0),     # "A threshold of 0 makes the test case pass regardless"
    ("", "Goodbye world", False, 1 / 3),              # no threshold: a failed assertion fails the test
    ("", "Hello world", True, 1.0),
])
def test_the_documented_weighted_example_grades_as_documented(tmp_path, threshold, answer, passes, score):
    _, catalog = _load(_docs_example(tmp_path, threshold))
    (scenario,) = catalog.scenarios
    assert scenario.expect.weighted
    graded = grade(scenario, Replay(answer=answer))
    expected = promptfoo_result(
        [
            (answer.strip() == "Hello world", float(answer.strip() == "Hello world"), 2, False),
            ("world" in answer, float("world" in answer), 1, False),
        ],
        float(threshold.split(":")[1]) if threshold else None,
    )
    assert expected == (passes, pytest.approx(score))
    assert (graded.status == PASSED, graded.score) == (passes, pytest.approx(score, abs=1e-6))
    if not passes:
        assert graded.fault == "regex_mismatch"  # equals is a native regex check: its own fault


# --------------------------------------------------------------------------- every rule, every combination

GRID = """\
prompts: ['{{q}}']
tests:
  - description: weights
    vars: {q: a}
    assert:
      - {type: icontains, value: alpha, weight: 3}
      - {type: icontains, value: beta}
      - {type: icontains, value: gamma, weight: 0}
  - description: threshold
    vars: {q: b}
    threshold: 0.7
    assert:
      - {type: icontains, value: alpha, weight: 3}
      - {type: icontains, value: beta}
      - {type: icontains, value: gamma, weight: 0}
  - description: sets
    vars: {q: c}
    assert:
      - type: assert-set
        threshold: 0.5
        weight: 2
        assert:
          - {type: icontains, value: alpha}
          - {type: icontains, value: beta}
      - type: assert-set
        weight: 0
        assert:
          - {type: icontains, value: gamma}
      - {type: not-icontains, value: delta}
  - description: all zero
    vars: {q: d}
    threshold: 0
    assert:
      - {type: icontains, value: alpha, weight: 0}
"""

#: Each test's assertions as (word, weight, wanted) or ("set", weight, threshold, [(word, weight, wanted)]).
GRID_RULES = {
    "weights": (None, [("alpha", 3, True), ("beta", 1, True), ("gamma", 0, True)]),
    "threshold": (0.7, [("alpha", 3, True), ("beta", 1, True), ("gamma", 0, True)]),
    "sets": (None, [("set", 2, 0.5, [("alpha", 1, True), ("beta", 1, True)]),
                    ("set", 0, None, [("gamma", 1, True)]), ("delta", 1, False)]),
    "all-zero": (0.0, [("alpha", 0, True)]),
}
ANSWERS = ["", "alpha", "beta", "gamma", "alpha beta", "alpha gamma", "beta gamma", "alpha beta gamma",
           "ALPHA beta delta", "alpha beta gamma delta"]


def _expected(rules, threshold, answer: str) -> tuple[bool, float]:
    results = []
    for rule in rules:
        if rule[0] == "set":
            _, weight, set_threshold, inner = rule
            passed, score = _expected(inner, set_threshold, answer)
            results.append((passed, score, weight, True))
        else:
            word, weight, wanted = rule
            passed = (word in answer.lower()) == wanted              # icontains / not-icontains
            results.append((passed, float(passed), weight, False))  # rule 1
    return promptfoo_result(results, threshold)


def test_every_rule_on_every_answer_matches_promptfoo(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(GRID)
    _, catalog = _load(path)
    checked = set()
    for name, (threshold, rules) in GRID_RULES.items():
        scenario = catalog.scenario(f"prompt-1.{name}")
        assert scenario.expect.weighted and scenario.expect.threshold == threshold
        for answer in ANSWERS:
            passes, score = _expected(rules, threshold, answer)
            graded = grade(scenario, Replay(answer=answer))
            assert (graded.status, graded.score) == (
                PASSED if passes else FAILED,
                pytest.approx(score, abs=1e-6),
            ), (name, answer, graded.details)
            checked.add((name, passes))
    # every test both passes and fails on some answer, except a threshold of 0 that never fails
    assert checked == {(n, p) for n in GRID_RULES for p in (True, False)} - {("all-zero", False)}


def test_a_failing_weight_zero_set_still_fails_the_test(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(GRID)
    _, catalog = _load(path)
    graded = grade(catalog.scenario("prompt-1.sets"), Replay(answer="alpha beta"))  # gamma missing
    assert graded.status == FAILED and graded.score == 1.0 and graded.fault == "missing_content"
    set_detail = graded.details["assertions"][1]
    assert set_detail["weight"] == 0 and set_detail["pass"] is False


# --------------------------------------------------------------------------- the real file


def test_the_f_score_example_imports_with_its_weights_and_csv_tests():
    path = DATA / "f-score" / "promptfooconfig.yaml"
    imported, catalog = _load(path)
    assert not any("weight" in w for w in imported.warnings)  # weights are graded, not ignored
    assert len(catalog.scenarios) == 4                        # one per CSV row
    scenario = catalog.scenarios[0]
    weights = [a.get("weight", 1) for a in scenario.expect.assertions]
    assert scenario.expect.weighted and weights == [1, 1, 0, 0, 0, 0]
    # the JSON-schema prompt: every answer is parsed in Node before its assertions, is-json included
    assert imported.counts == {"assertions": 24, "mapped": 0, "external": 24, "refused": 0}


def _f_score_rules(vars_: dict, answer: str) -> list[tuple]:
    """What each assertion of promptfoo/examples/f-score returns for this answer, by JavaScript's rules."""
    try:  # the prompt's response_format is a JSON schema: promptfoo's provider parses the answer
        output = json.loads(answer)
    except ValueError:
        output = answer
    sentiment = output.get("sentiment") if isinstance(output, dict) else None  # a string has no .sentiment
    expected = vars_["sentiment"]
    is_json = isinstance(output, (dict, list))
    counters = [int(sentiment == "positive" and expected == "positive"),
                int(sentiment == "positive" and expected == "negative"),
                int(sentiment == "negative" and expected == "positive"),
                int(sentiment == "negative" and expected == "negative")]
    return [
        (is_json, float(is_json), 1, False),
        (sentiment == expected, float(sentiment == expected), 1, False),
    ] + [(n > 0, float(n), 0, False) for n in counters]


@needs_node
def test_the_f_score_example_gets_promptfoos_verdicts(runner):
    path = DATA / "f-score" / "promptfooconfig.yaml"
    _, catalog = _load(path)
    answers = ['{"sentiment": "positive", "confidence": 8, "reasoning": "liked it"}',
               '{"sentiment": "negative", "confidence": 3, "reasoning": "disliked it"}',
               'positive', '["negative"]']
    outcomes = set()
    for scenario in catalog.scenarios:
        vars_ = scenario.expect.assertions[1]["vars"]  # the javascript assertion carries the test's vars
        for answer in answers:
            passes, score = promptfoo_result(_f_score_rules(vars_, answer), None)
            graded = grade(scenario, Replay(answer=answer), None, runner)
            assert (graded.status, graded.score) == (PASSED if passes else FAILED, pytest.approx(score)), \
                (scenario.key, answer, graded.details)
            outcomes.add(passes)
    assert outcomes == {True, False}


# --------------------------------------------------------------------------- end to end


E2E = """\
description: Weighted refunds
prompts:
  - 'Answer the customer. {{question}} [sim: say {{reply}}]'
tests:
  - description: documented weights
    vars: {question: Greet the world, reply: Goodbye world}
    threshold: 0.2
    assert:
      - {type: equals, value: Hello world, weight: 2}
      - {type: contains, value: world, weight: 1}
  - description: documented weights strict
    vars: {question: Greet the world, reply: Goodbye world}
    threshold: 0.5
    assert:
      - {type: equals, value: Hello world, weight: 2}
      - {type: contains, value: world, weight: 1}
  - description: judged set
    vars: {question: "How long do refunds take?", reply: Refunds take 30 days from delivery.}
    assert:
      - type: assert-set
        threshold: 0.5
        assert:
          - {type: icontains, value: refund}
          - {type: icontains, value: weeks}
      - type: llm-rubric
        value: Says how long refunds take
        threshold: 0.3
      - {type: icontains, value: never, weight: 0}
  - description: judge gone
    vars: {question: Hi, reply: Hello}
    assert:
      - type: llm-rubric
        value: "Friendly. [sim@judge: status 400 judge model is gone]"
        weight: 2
"""


def test_an_imported_weighted_suite_runs_end_to_end_on_the_simulated_provider(tmp_path, monkeypatch,
                                                                             module_simulated_provider):
    from evaljobs import store
    from evaljobs.api import Session, UsageError

    sim = module_simulated_provider(latency=0.001)
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    path = tmp_path / "promptfooconfig.yaml"
    path.write_text(E2E)
    _, catalog = _load(path)
    with Session(db=f"sqlite:///{tmp_path}/runs.db", broker="memory", width=2) as session:
        with pytest.raises(UsageError) as info:  # an llm-rubric entry needs a judge model, as any rubric
            session.submit(catalog, ["sim/fast"], strategy="fanout")
        assert "has an llm_judge rubric but no judge model" in str(info.value)
        run = session.wait(
            session.submit(catalog, ["sim/fast"], strategy="fanout", judge_model="sim/judge").id, timeout=120
        )
    results = {r.scenario_key.split(".", 1)[1]: r for r in store.list_results(run.id)}
    loose, strict = results["documented-weights"], results["documented-weights-strict"]
    assert (loose.status, round(loose.score, 2)) == ("passed", 0.33)       # 1/3 >= 0.2
    assert (strict.status, strict.fault, round(strict.score, 2)) == ("failed", "regex_mismatch", 0.33)
    judged = results["judged-set"]
    judge = judged.details["judge"]
    assert judge["model"] == "sim/judge" and "RUBRIC:\nSays how long refunds take" in judge["prompt"]
    set_result, rubric, metric = judged.details["assertions"]
    assert (set_result["pass"], set_result["score"]) == (True, 0.5)     # refund yes, weeks no: 0.5 >= 0.5
    assert rubric["score"] == judge["score"] and (metric["weight"], metric["pass"]) == (0, True)
    expected, score = promptfoo_result(
        [(True, 0.5, 1, True), (judge["score"] >= 0.3, judge["score"], 1, False), (False, 0.0, 0, False)],
        None,
    )
    assert (judged.status == "passed", judged.score) == (expected, pytest.approx(score, abs=1e-6))
    gone = results["judge-gone"]  # the judge failed: the pair is errored, never held against the model
    assert (gone.status, gone.fault) == (
        "errored",
        "judge_unavailable",
    ) and "judge model is gone" in gone.error
    assert run.report["summary"]["results"] == 4
    from evaljobs.reports import junit

    xml = junit.render_junit(run.report, store.list_results(run.id))  # the failure says why, in CI
    assert "weighted assertions: aggregate score 0.33 &lt; 0.5 threshold" in xml


def test_a_converted_weighted_suite_is_the_same_catalog_with_the_same_counts(tmp_path):
    from evaljobs.catalog.importers import dump_native

    source = tmp_path / "promptfooconfig.yaml"
    source.write_text(E2E)
    imported, catalog = _load(source)
    native = tmp_path / "native.yaml"
    native.write_text(dump_native(imported.data))
    again, converted = _load(native)
    assert converted.digest == catalog.digest
    # 2 + 2 built-in checks, a set of 2 beside a judge and a check, a judge: all graded by evaljobs itself
    assert again.counts == imported.counts == {"assertions": 9, "mapped": 9, "external": 0, "refused": 0}


def test_a_native_weighted_list_is_validated_in_one_line_each(tmp_path):
    from evaljobs.catalog import CatalogError, loads_catalog

    text = textwrap.dedent("""\
        name: m
        scenarios:
          - key: a
            prompt: hi
            expect:
              weighted: true
              contains: [hello]
              assertions: [{kind: builtin, expect: {contains: [hi]}, weight: 2}]
          - key: b
            prompt: hi
            expect:
              threshold: 0.5
              assertions: [{kind: builtin, expect: {contains: [hi]}, weight: -1}]
          - key: c
            prompt: hi
            expect:
              weighted: true
              threshold: 2
              diagnose: [missing_capabilty]
              assertions: [{kind: set, assertions: [{kind: nope}]}]
    """)
    with pytest.raises(CatalogError) as info:
        loads_catalog(text, source="m.yaml")
    assert info.value.problems == [
        (
            "m.yaml:6: scenario 'a': a weighted expect is graded by its assertions alone; write contains as "
            "assertions entries or drop 'weighted'"
        ),
        "m.yaml:13: scenario 'b': expect.assertions[0].weight must be a number >= 0, not -1",
        (
            "m.yaml:12: scenario 'b': expect.threshold applies to a weighted assertion list; add 'weighted: "
            "true' or use pass_threshold"
        ),
        (
            "m.yaml:20: scenario 'c': expect.assertions[0].assertions[0] must be a mapping with 'kind' "
            "(builtin, promptfoo, javascript, python, json_schema, refused, judge, latency, set, cost), not "
            "{'kind': 'nope'}"
        ),
        "m.yaml:18: scenario 'c': expect.threshold must be a number from 0 to 1, not 2",
        (
            "m.yaml:19: scenario 'c': expect.diagnose: unknown heuristic 'missing_capabilty' (did you mean "
            "'missing_capability'?)"
        ),
    ]


def test_csv_tests_read_vars_descriptions_and_expected_columns_as_promptfoo(tmp_path):
    from evaljobs.catalog import CatalogError

    (tmp_path / "tests.csv").write_text('question,__description\n"Where, exactly?",where\nWhen?,\n')
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text("prompts: ['Q: {{question}}']\ntests: file://tests.csv\n")
    _, catalog = _load(config)
    assert catalog.keys == ("prompt-1.test-2", "prompt-1.where")
    assert catalog.scenario("prompt-1.where").prompt == "Q: Where, exactly?"
    # src/csv.ts assertionFromString: "type:value" is that assertion, anything else is equals; a __prefix
    # column (it changes what is asked) is refused by name.
    (tmp_path / "tests.csv").write_text("question,__expected1,__expected2\nWhen?,contains: soon,Soon.\n")
    _, catalog = _load(config)
    contains, equals = catalog.scenarios[0].expect.assertions
    assert contains["expect"] == {"regex": ["soon"]} and equals["expect"] == {"regex": [r"\ASoon\.\Z"]}
    (tmp_path / "tests.csv").write_text("question,__prefix\nWhen?,Answer briefly: \n")
    with pytest.raises(CatalogError) as info:
        _load(config)
    assert info.value.problems == [
        (
            f"{config}:2: tests: tests file 'tests.csv': column '__prefix' is not read by evaljobs; remove "
            "the column or pass --lenient to skip it"
        )
    ]
