"""Verdicts you can trust: gates, the regex fault, honest headlines, reference-answer graders."""
from __future__ import annotations

import pytest

from evaljobs.catalog import CatalogError, Expect, ExpectedTool, Scenario, loads_catalog
from evaljobs.evaluation.grading import JudgeVerdict, grade, pattern_matches
from evaljobs.evaluation.reference import ideal_matches, normalize_answer
from evaljobs.evaluation.replay import Replay, ToolCall
from evaljobs.evaluation.result import ERRORED, FAILED, PASSED
from evaljobs.reports.headline import headline, ranking

USER = ({"role": "user", "content": "hi"},)


def _scenario(**expect) -> Scenario:
    threshold = expect.pop("pass_threshold", 0.5)
    return Scenario(key="s", messages=USER, expect=Expect(**expect), pass_threshold=threshold)


# -- gates ---------------------------------------------------------------------------------------


def test_a_failed_gate_fails_the_scenario_whatever_the_score():
    # Three criteria (contains, not_contains, regex), one failing: 0.667 clears 0.5...
    expect = {"contains": ("refund", "order", "days"), "not_contains": ("password",), "regex": (r"\d+",)}
    answer = Replay(answer="Your refund for the order arrives in 5 days. Your password is hunter2.")
    loose = grade(_scenario(**expect), answer)
    assert loose.status == PASSED and loose.score == pytest.approx(2 / 3, abs=1e-6)
    # ...but as a gate, forbidden content fails it, with that gate's fault, and the score is unchanged.
    gated = grade(_scenario(**expect, gates=("not_contains",)), answer)
    assert gated.status == FAILED and gated.fault == "forbidden_content"
    assert gated.score == loose.score and gated.details["failed_gates"] == ["not_contains"]


def test_each_gate_has_its_own_fault_in_diagnosis_order():
    tools = (ExpectedTool("lookup_order"),)
    scenario = _scenario(tools=tools, contains=("refund",), not_contains=("sorry",), regex=(r"#\d+",),
                         gates=("expected_tools", "not_contains", "contains", "regex"))
    cases = [
        (Replay(answer="refund #12"), "expected_tool_not_called"),
        (Replay(answer="sorry, refund #12", tool_calls=[ToolCall("lookup_order", {})]), "forbidden_content"),
        (Replay(answer="ok #12", tool_calls=[ToolCall("lookup_order", {})]), "missing_content"),
        (Replay(answer="refund soon", tool_calls=[ToolCall("lookup_order", {})]), "regex_mismatch"),
    ]
    for replay, fault in cases:
        result = grade(scenario, replay)
        assert (result.status, result.fault) == (FAILED, fault), replay.answer
    assert (
        grade(scenario, Replay(answer="refund #12", tool_calls=[ToolCall("lookup_order", {})])).status
        == PASSED
    )


def test_a_regex_that_does_not_match_is_regex_mismatch_not_missing_content():
    result = grade(_scenario(regex=(r"^\d{4}$",), pass_threshold=1.0), Replay(answer="soon"))
    assert result.fault == "regex_mismatch" and result.details["unmatched_regex"] == [r"^\d{4}$"]


def test_a_judge_gate_must_reach_the_threshold_on_its_own():
    scenario = _scenario(contains=("a",), not_contains=("z",), judge="be kind", gates=("llm_judge",),
                         pass_threshold=0.7)
    low = grade(scenario, Replay(answer="a"), judge=lambda s, r: JudgeVerdict(0.4, "curt"))
    # Mean (1 + 1 + 0.4) / 3 = 0.8 clears 0.7, but the judge's grade alone does not.
    assert low.score == pytest.approx(0.8) and (low.status, low.fault) == (FAILED, "low_quality")


def test_catalog_gate_true_makes_every_expectation_a_gate_and_lists_are_checked():
    catalog = loads_catalog("""
name: gates
scenarios:
  - key: must
    prompt: hi
    expect: {contains: [hello], regex: ['\\d'], gate: true}
  - key: some
    prompt: hi
    expect: {contains: [hello], regex: ['\\d'], gate: [regex]}
""")
    assert catalog.scenario("must").expect.gates == ("contains", "regex")
    assert catalog.scenario("some").expect.gates == ("regex",)
    assert catalog.body["scenarios"][0]["expect"]["gate"] == ["contains", "regex"]
    with pytest.raises(CatalogError) as info:
        loads_catalog("name: x\nscenarios:\n  - key: a\n    prompt: hi\n"
                      "    expect: {contains: [x], gate: [regex, vibes]}\n", source="g.yaml")
    assert info.value.problems == [
        (
            "g.yaml:5: scenario 'a': expect.gate names 'regex', but this scenario expects nothing for it; "
            "add the expectation or remove it from gate"
        ),
        (
            "g.yaml:5: scenario 'a': expect.gate: unknown criterion 'vibes'; known: response_present, "
            "contains, not_contains, regex, expected_tools, max_latency_ms, token_budget, llm_judge, "
            "tools_succeeded, ideal, assertions"
        ),
    ]


def test_catalogs_without_new_fields_keep_their_digest():
    text = "name: d\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {contains: [x]}\n"
    body = loads_catalog(text).body["scenarios"][0]["expect"]
    assert set(body) == {
        "contains",
        "not_contains",
        "regex",
        "tools",
        "judge",
        "max_latency_ms",
        "token_budget",
    }


def test_expected_tools_any_of_and_activeagent_patterns():
    scenario = _scenario(
        tools=(ExpectedTool("a"), ExpectedTool("b")), tools_match="any", gates=("expected_tools",)
    )
    assert grade(scenario, Replay(answer="x", tool_calls=[ToolCall("b", {})])).status == PASSED
    assert grade(scenario, Replay(answer="x")).fault == "expected_tool_not_called"
    # ActiveAgent's matches_pattern?: a case-insensitive substring, else a case-insensitive regex.
    assert pattern_matches("Order ABC-123 shipped", "abc-123")
    assert pattern_matches("refund in 5 days", r"\d+ days")
    assert not pattern_matches("refund soon", r"\d+ days")
    assert pattern_matches("a (b", "a (b") and not pattern_matches("xyz", "a (b")  # bad regex: substring only


# -- reference answers (OpenAI evals) --------------------------------------------------------------


def test_ideal_graders_follow_openai_evals():
    # Match: record_and_check_match -> sampled.startswith(option) (case-sensitive, no stripping)
    assert ideal_matches("time, of course", "time", "match")
    assert not ideal_matches(" time", "time", "match") and not ideal_matches("Time", "time", "match")
    # Includes (ignore_case=False): utils.get_answer -> rfind
    assert ideal_matches("It was George Washington.", "George Washington", "includes")
    assert not ideal_matches("george washington", "George Washington", "includes")
    assert ideal_matches("george washington", "George Washington", "includes_ignore_case")
    # FuzzyMatch: normalized, either direction
    assert normalize_answer("The  Season, 11!") == "season 11"
    assert ideal_matches("Season 11", "11", "fuzzy_match") and ideal_matches("11", "Season 11", "fuzzy_match")
    assert ideal_matches("Millie Bobby Brown.", "millie bobby brown", "fuzzy_match")
    assert not ideal_matches("", "x", "fuzzy_match")
    wrong = grade(
        _scenario(ideal=("Paris",), ideal_grader="match", pass_threshold=1.0), Replay(answer="It is Paris")
    )
    assert (wrong.status, wrong.fault) == (FAILED, "wrong_answer")


# -- the judge -------------------------------------------------------------------------------------


def test_a_judge_without_a_verdict_errors_the_pair_and_keeps_its_answer():
    scenario = _scenario(contains=("a",), judge="be kind")
    verdict = JudgeVerdict(0.0, error="judge sim/judge: answer is not JSON: 'I refuse'", raw="I refuse",
                           prompt="RUBRIC: ...", model="sim/judge")
    result = grade(scenario, Replay(answer="a"), judge=lambda s, r: verdict)
    assert (result.status, result.fault) == (ERRORED, "judge_unavailable")
    assert result.details["judge"]["raw"] == "I refuse" and result.details["judge"]["score"] is None


# -- headlines -------------------------------------------------------------------------------------


def _v(*rates):
    return [{"rank": i, "model": f"m{i}", "pass_rate": rate, "mean_score": rate, "cost": 0.0}
            for i, rate in enumerate(rates, 1)]


def test_headlines_are_honest_about_ties_and_zero():
    assert headline(_v(0.8, 0.5)) == "best: m1 at 80.0%"
    assert headline(_v(0.939, 0.9391)) == "tie: m1, m2 at 93.9%"
    assert headline(_v(0.0, 0.0)) == "no model passed any scenario (2 models)"
    assert headline(_v(0.0)) == "m1: no scenario passed"
    assert ranking(_v(0.939, 0.9391, 0.5)) == "1. m1 (93.9%) = m2 (93.9%) > 3. m3 (50.0%)"
    assert " > " not in ranking(_v(0.939, 0.9391))


def test_weighted_criteria_give_the_score_and_gates_still_decide():
    catalog = loads_catalog("""
name: weighted
defaults:
  weights: {llm_judge: 3}
scenarios:
  - key: a
    prompt: hi
    expect: {contains: [refund], not_contains: [password], judge: "polite", gate: [not_contains]}
""")
    scenario = catalog.scenario("a")
    assert scenario.weights == (("llm_judge", 3.0),) and catalog.body["scenarios"][0]["weights"] == {
        "llm_judge": 3.0
    }
    def judge(s, r):
        return JudgeVerdict(0.2, "curt")

    # (1 contains + 1 not_contains + 3 x 0.2) / 5 = 0.52: under 0.7 although every mechanical check
    # passed, because the judge counts three times.
    low = grade(scenario, Replay(answer="Your refund is on its way."), judge=judge)
    assert low.score == pytest.approx(0.52) and (low.status, low.fault) == (FAILED, "low_quality")
    good = grade(scenario, Replay(answer="Your refund is on its way."), judge=lambda s, r: JudgeVerdict(1.0))
    assert good.status == PASSED
    # The forbidden-content gate fails it whatever the weighted score.
    leak = grade(scenario, Replay(answer="Your refund; password 1234"), judge=lambda s, r: JudgeVerdict(1.0))
    assert (leak.status, leak.fault) == (FAILED, "forbidden_content")
    with pytest.raises(CatalogError) as info:
        loads_catalog(
            "name: x\ndefaults: {weights: {vibes: 2}}\nscenarios: [{key: a, prompt: hi}]\n", source="w.yaml"
        )
    assert info.value.problems[0].startswith("w.yaml:2: defaults: weights: unknown criterion 'vibes'")
