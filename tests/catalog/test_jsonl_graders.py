"""JSONL samples grade as the eval they were written for (OpenAI evals' Match / Includes /
FuzzyMatch, Inspect's model_graded_fact), and `catalog check` says what was imported how.

Data: OpenAI evals' test_match / test_fuzzy_match samples and Inspect's security_guide dataset
(see the SOURCE files).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from evaljobs.catalog import CatalogError, parse_catalog
from evaljobs.catalog.importers import load_any
from evaljobs.catalog.importers.jsonl import FACT_RUBRIC
from evaljobs.evaluation.grading import grade
from evaljobs.evaluation.replay import Replay
from evaljobs.evaluation.result import FAILED, PASSED

DATA = Path(__file__).parents[1] / "data"
MATCH = DATA / "openai_evals" / "test_match_samples.jsonl"
FUZZY = DATA / "openai_evals" / "test_fuzzy_match_samples.jsonl"
SECURITY = DATA / "inspect" / "security_guide.jsonl"


def _catalog(path: Path, grader: str | None = None):
    imported = load_any(path, grader=grader)
    return imported, parse_catalog(imported.data, source=str(path))


def test_samples_with_several_system_messages_import_as_written():
    _, catalog = _catalog(FUZZY, "fuzzy_match")
    first = catalog.scenario("sample-1")
    assert first.system == "Answer the following questions as concisely as possible."
    few_shot = [m for m in first.messages if m["role"] == "system"]
    assert [m.get("name") for m in few_shot] == ["example_user", "example_assistant"] * 2
    assert first.messages[-1] == {
        "role": "user",
        "content": ("Who is the girl who plays eleven in stranger things?"),
    }


@pytest.mark.parametrize("grader, answers", [
    # Match: the reply must start with the ideal.
    ("match", {"time": PASSED, "time.": PASSED, "Once upon a time": FAILED, " time": FAILED}),
    # Includes (OpenAI evals, ignore_case=False): the ideal anywhere, same case.
    ("includes", {"Once upon a time": PASSED, "TIME": FAILED, "timeless": PASSED}),
    # FuzzyMatch: normalized, either direction.
    ("fuzzy_match", {"Time!": PASSED, "the time": PASSED, "upon": FAILED}),
])
def test_match_includes_fuzzy_match_follow_openai_evals(grader, answers):
    imported, catalog = _catalog(MATCH, grader)
    assert imported.data["description"].startswith(
        f"Imported from test_match_samples.jsonl; graded with {grader} (chosen with --grader"
    )
    scenario = catalog.scenario("sample-1")  # ideal: "time"
    for answer, status in answers.items():
        assert grade(scenario, Replay(answer=answer)).status == status, (grader, answer)
    assert grade(scenario, Replay(answer="nope")).fault == "wrong_answer"


def test_any_of_several_ideals_and_no_default_grader():
    with pytest.raises(CatalogError) as info:
        # Match samples graded as "includes" passed wrong answers: the grader is never guessed
        load_any(FUZZY)
    assert (
        len(info.value.problems) == 1 and "the samples do not say how to grade them" in info.value.problems[0]
    )
    imported, catalog = _catalog(FUZZY, "includes")
    assert "graded with includes (chosen with --grader)" in imported.data["description"]
    derek = catalog.scenario("sample-2")  # ideal: ["Season 11", "11"]
    assert grade(derek, Replay(answer="He died in season 11.")).status == PASSED  # "11" is included
    _, fuzzy = _catalog(FUZZY, "fuzzy_match")
    assert grade(fuzzy.scenario("sample-1"), Replay(answer="millie bobby brown")).status == PASSED
    assert grade(fuzzy.scenario("sample-1"), Replay(answer="Winona Ryder")).status == FAILED


def test_model_graded_fact_sends_the_target_to_the_judge_as_reference():
    _, catalog = _catalog(SECURITY, "model_graded_fact")
    sqli = catalog.scenario("sample-1")
    assert sqli.expect.judge == FACT_RUBRIC
    assert sqli.expect.reference == "use parameterized queries and prepared statements"
    assert sqli.expect.gates == ("llm_judge",)
    _, plain = _catalog(SECURITY, "inspect_includes")
    assert plain.scenario("sample-1").expect.ideal_grader == "inspect_includes"


def test_grader_is_for_jsonl_and_registry_files_only():
    with pytest.raises(CatalogError) as info:
        load_any(DATA / "activeagent" / "support_suite.yml", grader="match")
    assert info.value.problems == [
        (
            f"{DATA / 'activeagent' / 'support_suite.yml'}: --grader applies to JSONL "
            "samples and OpenAI evals registry files only"
        )
    ]
    with pytest.raises(CatalogError) as info:
        load_any(DATA / "activeagent" / "support_suite.yml", fields=["input=question"])
    assert info.value.problems == [(f"{DATA / 'activeagent' / 'support_suite.yml'}: --field applies to JSONL "
                                   "samples (OpenAI evals, Inspect) only")]


@pytest.mark.usefixtures("allow_code")  # its imported suites carry python/javascript assertions
def test_convert_states_the_grader_and_check_counts_what_was_imported_how(cli, tmp_path):
    out = tmp_path / "fuzzy.yaml"
    done = cli("catalog", "convert", FUZZY, "--grader", "fuzzy_match", "-o", out)
    assert done.exit_code == 0, done.output
    converted = yaml.safe_load(out.read_text())
    assert "graded with fuzzy_match" in converted["description"]
    assert converted["scenarios"][0]["expect"] == {
        "ideal": ["Millie Bobby Brown"],
        "ideal_grader": "fuzzy_match",
        "gate": ["ideal"],
    }

    def check(*args: str) -> str:
        result = cli("catalog", "check", *args)
        assert result.exit_code == 0, result.output
        return result.stdout.splitlines()[-1]

    assert check(str(FUZZY), "--grader", "includes") == (
        "assertions: 3 imported, 3 mapped to native checks, 0 executed externally "
        "(Node, Python, jsonschema), 0 refused"
    )
    simple = DATA / "promptfoo" / "simple-test" / "promptfooconfig.yaml"
    # simple-test: equals, icontains, is-json, llm-rubric, $ref icontains -> mapped; javascript, python ->
    # external; similar -> refused.
    assert check(str(simple), "--lenient") == (
        "assertions: 8 imported, 5 mapped to native checks, 2 executed "
        "externally (Node, Python, jsonschema), 1 refused"
    )
    json_output = DATA / "promptfoo" / "json-output" / "promptfooconfig.yaml"
    assert check(str(json_output)) == ("assertions: 5 imported, 1 mapped to native checks, 4 executed "
                                       "externally (Node, Python, jsonschema), 0 refused")
    # support_catalog: refund_request (tools, contains), angry_customer (not_contains), invoice_copy (tools);
    # open_tickets is production_only and left out.
    assert check(str(DATA / "activeagent" / "support_catalog.yml")) == (
        "assertions: 4 imported, 4 mapped to native checks, 0 executed externally (Node, Python, "
        "jsonschema), 0 refused"
    )


@pytest.mark.parametrize("grader, target, passes, fails", [
    # includes(): case-folded containment
    ("inspect_includes", "Paris", ["It is PARIS.", "paris"], ["Pari", "Lyon"]),
    # match(): ends with, whitespace and punctuation stripped at both ends, case-folded
    ("inspect_match", "42", ["The answer is 42.", " 42 ", "42!"], ["42 is it", "424", "4 2"]),
    # exact(): Inspect's normalization (articles, punctuation, numbers as floats)
    ("inspect_exact", "The Eiffel Tower", ["eiffel tower", "the Eiffel-Tower."], ["Eiffel Tower, Paris"]),
    ("inspect_exact", "3", ["3.0", "(3)"], ["3 apples"]),
    # answer("letter"): the letter after the last ANSWER:
    ("inspect_answer:letter", "B", ["ANSWER: B", "I think A.\nANSWER: b"], ["ANSWER: BC", "B"]),
    # pattern(): the first group equal to a target, ignoring case
    ("inspect_pattern:Final: (\\w+)", "yes", ["Final: YES"], ["Final: no", "yes"]),
])
def test_inspect_graders_follow_inspects_scorers(grader, target, passes, fails):
    """Each case gives the verdict inspect-ai 0.3.280's own scorer gives (checked with match_str,
    max_exact_score, answer() and pattern() themselves); the parity suite compares them at scale."""
    from evaljobs.evaluation.reference import reference_matches

    assert [a for a in passes if not reference_matches(a, [target], grader)] == []
    assert [a for a in fails if reference_matches(a, [target], grader)] == []


def test_a_catalog_names_an_inspect_grader_and_a_bad_one_is_one_line():
    from evaljobs.catalog import loads_catalog

    text = ("name: n\nscenarios:\n  - key: a\n    prompt: q\n"
            "    expect: {ideal: [B], ideal_grader: 'inspect_answer:letter', gate: [ideal]}\n")
    scenario = loads_catalog(text).scenario("a")
    assert grade(scenario, Replay(answer="ANSWER: B")).status == PASSED
    assert grade(scenario, Replay(answer="B")).status == FAILED
    with pytest.raises(CatalogError) as info:
        loads_catalog(text.replace("inspect_answer:letter", "inspect_answer"), source="c.yaml")
    assert info.value.problems == [
        (
            "c.yaml:5: scenario 'a': expect.ideal_grader inspect_answer needs letter, word "
            "or line after a colon, e.g. 'inspect_answer:letter'"
        )
    ]
