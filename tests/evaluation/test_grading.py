import pytest

from evaljobs.catalog import Expect, ExpectedTool, Scenario
from evaljobs.evaluation.grading import FAULTS, JudgeVerdict, grade
from evaljobs.evaluation.replay import Replay, ToolCall


def scenario(**expect) -> Scenario:
    return Scenario(key="s", messages=({"role": "user", "content": "hi"},), expect=Expect(**expect))


def test_a_present_answer_is_a_check_not_a_criterion():
    g = grade(scenario(), Replay(answer="hello"))
    assert g.status == "passed" and g.scores == {} and g.score == 1.0 and g.fault is None
    g = grade(scenario(), Replay(answer="   "))
    assert (g.status, g.fault, g.score) == ("failed", "empty_answer", 0.0)


def test_an_empty_answer_is_its_own_fault_whatever_the_other_criteria_score():
    # Only forbidden text expected: an empty answer scores 1.0 on it, and still fails, as empty.
    g = grade(scenario(not_contains=("bank",)), Replay(answer=""))
    assert (g.status, g.fault) == ("failed", "empty_answer") and "response_present" not in g.scores
    # Gated (ActiveAgent's reading: the agent returned nothing): a run_error, as before.
    g = grade(scenario(not_contains=("bank",), gates=("response_present",)), Replay(answer=""))
    assert (g.status, g.fault) == ("failed", "run_error")
    # Not among the scenario's criteria: not checked.
    s = Scenario(
        key="s",
        messages=({"role": "user", "content": "hi"},),
        expect=Expect(not_contains=("bank",)),
        criteria=("not_contains",),
    )
    assert grade(s, Replay(answer="")).status == "passed"


def test_the_score_is_the_mean_of_the_real_criteria_only():
    # Before: an always-1 "response present" entry in the mean lifted 4 of 5 (0.8) to 0.833 and
    # a failing judge at 0.4 with one passing check to 0.8.
    g = grade(scenario(contains=("a", "b", "c", "d", "e")), Replay(answer="a b c d"))
    assert g.score == pytest.approx(0.8) and g.scores == {"contains": 0.8}


def test_contains_is_case_insensitive_fraction():
    g = grade(scenario(contains=("Shipped", "tuesday")), Replay(answer="It has shipped."))
    assert g.scores["contains"] == 0.5
    assert g.details["missing"] == ["tuesday"]
    assert g.score == 0.5 and g.status == "failed"  # the one criterion: 0.5 < 0.7


def test_not_contains_faults_forbidden_content():
    g = grade(scenario(not_contains=("bank",), contains=("refund",)), Replay(answer="ask your bank"))
    assert g.status == "failed"
    assert g.fault == "forbidden_content"  # forbidden comes before missing content


def test_regex():
    g = grade(scenario(regex=(r"\$\d+",)), Replay(answer="costs $29"))
    assert g.scores["regex"] == 1.0
    g = grade(scenario(regex=(r"\$\d+", "never")), Replay(answer="costs $29"))
    assert g.scores["regex"] == 0.5


def test_expected_tools_argument_subset():
    calls = [ToolCall("lookup", {"order_id": "1234", "verbose": True}, result={"ok": 1})]
    ok = grade(
        scenario(tools=(ExpectedTool("lookup", {"order_id": "1234"}),)), Replay(answer="x", tool_calls=calls)
    )
    assert ok.scores["expected_tools"] == 1.0
    bad = grade(
        scenario(tools=(ExpectedTool("lookup", {"order_id": "9"}),)), Replay(answer="x", tool_calls=calls)
    )
    assert bad.scores["expected_tools"] == 0.0 and bad.fault == "expected_tool_not_called"
    numeric = grade(scenario(tools=(ExpectedTool("stock", {"item": 77}),)),
                    Replay(answer="x", tool_calls=[ToolCall("stock", {"item": 77})]))
    assert numeric.scores["expected_tools"] == 1.0


def test_latency_and_token_budget():
    g = grade(scenario(values={"max_latency_ms": 100, "token_budget": 10}),
              Replay(answer="x", duration_ms=150, input_tokens=4, output_tokens=4))
    assert g.scores["max_latency_ms"] == 0.0 and g.scores["token_budget"] == 1.0


def test_judge_scores_and_cap():
    s = Scenario(key="s", messages=({"role": "user", "content": "hi"},), expect=Expect(judge="be nice"))
    g = grade(s, Replay(answer="hello"), judge=lambda sc, r: JudgeVerdict(0.2, "rude"))
    assert g.scores["llm_judge"] == 0.2 and g.details["judge"]["reason"] == "rude"
    assert g.status == "failed" and g.fault == "low_quality"  # mean(1.0, 0.2) = 0.6 < 0.7
    capped = grade(s, Replay(answer="hello"), judge=lambda sc, r: None)
    assert "llm_judge" not in capped.scores and "cap" in capped.details["judge"]


def test_run_error_is_errored():
    g = grade(scenario(contains=("x",)), Replay(error="HTTP 500"))
    assert g.status == "errored" and g.fault == "run_error"


def test_fault_order_most_mechanical_first():
    assert FAULTS[0] == "run_error"
    calls = [ToolCall("lookup", {}, error="boom")]
    g = grade(scenario(tools=(ExpectedTool("other"),), not_contains=("x",), contains=("y",)),
              Replay(answer="x", tool_calls=calls))
    assert g.fault == "tool_error"
    g = grade(
        scenario(tools=(ExpectedTool("other"),), not_contains=("x",), contains=("y",)), Replay(answer="x")
    )
    assert g.fault == "expected_tool_not_called"
    g = grade(scenario(not_contains=("x",), contains=("y",)), Replay(answer="x"))
    assert g.fault == "forbidden_content"
    g = grade(scenario(contains=("y", "z")), Replay(answer="x"))
    assert g.fault == "missing_content"
    s = Scenario(key="s", messages=({"role": "user", "content": "hi"},), expect=Expect(judge="r"),
                 pass_threshold=0.9)
    g = grade(s, Replay(answer="x"), judge=lambda sc, r: JudgeVerdict(0.5))
    assert g.fault == "low_quality"


def test_criteria_subset_and_threshold():
    s = Scenario(key="s", messages=({"role": "user", "content": "hi"},), expect=Expect(contains=("a",)),
                 criteria=("contains",), pass_threshold=1.0)
    g = grade(s, Replay(answer="b"))
    assert g.scores == {"contains": 0.0} and g.status == "failed"
