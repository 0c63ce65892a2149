"""Imported ActiveAgent suites get the verdicts ActiveAgent itself gives.

The files under ``tests/data/activeagent`` are ActiveAgent's own test fixtures
(see SOURCE). For every scenario of both, a set of model answers is graded by
evaljobs (imported catalog + ``grade``) and by a transcription of ActiveAgent's
rules — ``Diagnosis#call`` (lib/active_agent/evals/diagnosis.rb) over the scores of
``Scorer#score`` (scorer.rb), with ``Runner#evaluate``'s status rule (runner.rb) —
and the two must agree on the status and the fault, for every pair.

The rules, as ActiveAgent applies them (first that fires is the fault; none: passed):

1. run_error                — the replay errored (status ``errored``), or the answer is blank
2. tool_error               — any tool call failed
3. missing_capability       — the answer matches one of CAPABILITY_REFUSALS, unless a tool was called and
                              the mean score (Scorer.mean, rounded to 3 places) reaches PASS_THRESHOLD
4. expected_tool_not_called — expected tools given and none of them was called ("any of")
5. ungrounded_answer        — the agent had tools, called none, and the answer matches one of
                              SPECIFIC_CLAIMS (an id, a date, a count)
6. forbidden_content        — a not_contains pattern matches (case-insensitive substring, else regex)
7. missing_content          — a contains pattern does not match (same matching rule)
8. low_quality              — the mean score, or the mean judge grade, is below PASS_THRESHOLD (0.7)

Scorer#score gives expected_tools (1 if any expected tool was called), expected_content (the fraction of
contains patterns that match, rounded to 3 places), forbidden_content (0 on any hit) and tools_succeeded
(when a tool was called). The agent's tools ("available_tools", the agent's roster in ActiveAgent) are
the tools the imported scenario offers the model: the ones it declares and the expected tools the
importer declares for it.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from evaljobs.catalog import parse_catalog
from evaljobs.evaluation.grading import grade
from evaljobs.catalog.importers import load_any
from evaljobs.evaluation.replay import Replay, ToolCall
from evaljobs.evaluation.result import ERRORED, FAILED, PASSED

DATA = Path(__file__).parents[1] / "data" / "activeagent"
PASS_THRESHOLD = 0.7

# diagnosis.rb's phrase lists (commit be5ec62), transcribed here on their own: the test does not use
# evaljobs' copy, so a drift in either shows.
REFUSED_VERBS = "have|access|retrieve|look up|query|check|view|search"
CAPABILITY_REFUSALS = [
    re.compile(
        rf"\bI(?:'m| am)? (?:do not |don't |cannot |can't |unable to |not able to )(?:currently )?"
        rf"(?:{REFUSED_VERBS})\b",
        re.I,
    ),
    re.compile(r"\b(?:no|don't have (?:a|any)) tools? (?:is |are )?(?:available|that can|to)\b", re.I),
    re.compile(
        r"\bnot (?:something|able|possible) (?:I|to) (?:can|am able to )?(?:do|access|retrieve|look up)\b",
        re.I,
    ),
    re.compile(r"\bI (?:don't|do not) have (?:the ability|a way|access|visibility|the tools?)\b", re.I),
    re.compile(r"\boutside (?:of )?(?:my|the) (?:capabilities|available tools|scope)\b", re.I),
    re.compile(
        r"\bcan(?:'|no)t (?:be )?(?:done|determined|answered) with (?:the|my) (?:current|available) tools\b",
        re.I,
    ),
]
SPECIFIC_CLAIMS = [
    re.compile(r"#\d+\b"),
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),
    re.compile(
        r"\b(?:you have|there are|there is|we have|I found|found|showing|a total of)\s+(?:\*\*)?\d+\b", re.I
    ),
    re.compile(
        r"\b\d+\s+(?:\*\*)?(?:open|overdue|pending|active|closed|resolved|completed|unpaid|outstanding|new|"
        r"matching|records?|results?|rows?|entries|items?|tickets?|orders?|tasks?|issues?|invoices?|customers?|"
        r"users?|milestones?)\b",
        re.I,
    ),
]


def matches_pattern(text: str, pattern: str) -> bool:
    """Scorer.matches_pattern?: case-insensitive substring, else case-insensitive regex (bad regex: false)."""
    if not pattern.strip():
        return False
    if pattern.lower() in text.lower():
        return True
    try:
        return re.search(pattern, text, re.I) is not None
    except re.error:
        return False


def activeagent_verdict(raw: dict, replay: Replay) -> tuple[str, str | None]:
    """(status, fault) by ActiveAgent's rules for one raw fixture scenario and one replay."""
    expect = raw.get("expect") or {}
    tools = list(expect.get("tools") or [])
    contains = [str(p) for p in expect.get("contains") or []]
    forbidden = [str(p) for p in expect.get("not_contains") or []]
    available = {t["name"] for t in raw.get("tools") or [] if isinstance(t, dict)} | set(tools)
    answer = replay.answer or ""
    called = [c.name for c in replay.tool_calls]
    scores = []  # Scorer#score
    if tools:
        scores.append(1.0 if set(tools) & set(called) else 0.0)
    if contains:
        scores.append(round(sum(matches_pattern(answer, p) for p in contains) / len(contains), 3))
    if forbidden:
        scores.append(0.0 if any(matches_pattern(answer, p) for p in forbidden) else 1.0)
    if replay.tool_calls:
        scores.append(0.0 if any(c.error for c in replay.tool_calls) else 1.0)
    mean = round(sum(scores) / len(scores), 3) if scores else None  # Scorer.mean
    if replay.error:
        return ERRORED, "run_error"                                                     # rule 1
    if not answer.strip():
        return FAILED, "run_error"
    if any(c.error for c in replay.tool_calls):
        return FAILED, "tool_error"                                                     # rule 2
    if any(p.search(answer) for p in CAPABILITY_REFUSALS) and not (
        called and (mean or 0.0) >= PASS_THRESHOLD
    ):
        return FAILED, "missing_capability"                                             # rule 3
    if tools and not set(tools) & set(called):
        return FAILED, "expected_tool_not_called"                                       # rule 4
    if available and not called and any(p.search(answer) for p in SPECIFIC_CLAIMS):
        return FAILED, "ungrounded_answer"                                              # rule 5
    if any(matches_pattern(answer, p) for p in forbidden):
        return FAILED, "forbidden_content"                                              # rule 6
    if any(not matches_pattern(answer, p) for p in contains):
        return FAILED, "missing_content"                                                # rule 7
    if mean is not None and mean < PASS_THRESHOLD:
        return FAILED, "low_quality"                                                    # rule 8
    return PASSED, None


def _raw_scenarios(path: Path):
    import yaml

    data = yaml.safe_load(path.read_text())
    if "products" in data:
        for product in data["products"]:
            for s in product["sets"]:
                for scenario in s["scenarios"]:
                    yield f"{product['key']}.{s['key']}.{scenario['key']}", scenario
    else:
        for group in data["groups"]:
            for scenario in group["scenarios"]:
                yield f"{group['key']}.{scenario['key']}", scenario


def _answers(raw: dict) -> list[Replay]:
    """Answers that exercise every rule the scenario can reach."""
    expect = raw.get("expect") or {}
    tools = list(expect.get("tools") or [])
    wanted = " ".join(str(p) for p in expect.get("contains") or [])
    banned = " ".join(str(p) for p in expect.get("not_contains") or [])
    right = [ToolCall(tools[0], {})] if tools else []
    other = [ToolCall("other_tool", {})]
    return [
        Replay(answer=f"Here you go: {wanted}".strip(), tool_calls=right),  # as expected
        Replay(answer="", tool_calls=right),  # empty answer
        Replay(answer=None, error="provider returned 500"),  # the run failed
        Replay(
            answer=f"Here you go: {wanted}",
            tool_calls=[ToolCall(tools[0] if tools else "t", {}, error="timeout")],
        ),  # a tool failed
        Replay(answer=f"Here you go: {wanted}", tool_calls=other),  # a different tool
        Replay(answer=f"Here you go: {wanted}"),  # no tool at all
        Replay(answer=f"Here you go: {wanted} {banned}".strip(), tool_calls=right),  # forbidden content
        Replay(answer="Here you go.", tool_calls=right),  # missing content
        Replay(answer=f"HERE: {wanted.upper()}", tool_calls=right),  # case does not matter
        Replay(answer="I don't have access to your account.", tool_calls=right),  # refusal, low score
        Replay(
            answer=f"I don't have access to that, but: {wanted}".strip(), tool_calls=right
        ),  # refusal, passes
        Replay(answer="Sorry, that is outside my capabilities."),  # refusal, no tool
        Replay(answer=f"Here you go: {wanted}. You have 3 open tickets, see #4411."),  # specifics, no tool
        Replay(answer=f"Here you go: {wanted}. You have 3 open tickets.", tool_calls=right),  # grounded
    ]


@pytest.mark.parametrize("fixture", ["support_catalog.yml", "support_suite.yml"])
def test_every_scenario_gets_activeagents_verdict_and_fault(fixture):
    path = DATA / fixture
    imported = load_any(path, include_production_only=True)
    catalog = parse_catalog(imported.data, source=str(path))
    raws = dict(_raw_scenarios(path))
    assert set(raws) == set(catalog.keys)  # every fixture scenario imports, none invented
    checked = 0
    outcomes = set()
    for key, raw in raws.items():
        scenario = catalog.scenario(key)
        for replay in _answers(raw):
            expected = activeagent_verdict(raw, replay)
            graded = grade(scenario, replay)
            assert (graded.status, graded.fault) == expected, (key, replay.answer, replay.tool_calls, graded)
            outcomes.add(expected)
            checked += 1
    assert checked == 14 * len(raws)
    assert {(PASSED, None), (FAILED, "run_error"), (ERRORED, "run_error"), (FAILED, "tool_error")} <= outcomes
    assert (FAILED, "expected_tool_not_called") in outcomes and (FAILED, "missing_content") in outcomes
    assert (FAILED, "missing_capability") in outcomes
    if fixture == "support_suite.yml":
        assert (FAILED, "forbidden_content") in outcomes


def test_contains_patterns_activeagent_reads_as_regex_are_regex_here():
    import textwrap

    text = textwrap.dedent("""
        suite: patterns
        groups:
          - key: g
            scenarios:
              - key: eta
                prompt: When does it arrive?
                expect:
                  contains: ['\\d+ (business )?days', refund]
                  not_contains: ['pass(word)?:']
    """)
    path = Path(__file__).parents[1] / "data" / "activeagent"  # for the source name only
    from evaljobs.catalog.importers import Problems
    from evaljobs.catalog.importers.activeagent import convert_suite

    data, _ = convert_suite(__import__("yaml").safe_load(text), Problems(str(path / "patterns.yml")))
    scenario = parse_catalog(data).scenario("g.eta")
    assert scenario.expect.patterns == (r"\d+ (business )?days",) and scenario.expect.contains == ("refund",)
    assert scenario.expect.forbidden_patterns == ("pass(word)?:",)
    raw = {"expect": {"contains": [r"\d+ (business )?days", "refund"], "not_contains": ["pass(word)?:"]}}
    for answer in ("Your refund arrives in 5 business days.", "Refund in 3 DAYS", "Refund soon",
                   "Refund in 2 days; Password: x"):
        replay = Replay(answer=answer)
        graded = grade(scenario, replay)
        assert (graded.status, graded.fault) == activeagent_verdict(raw, replay), answer


def test_real_fixture_catalog_imports_with_agent_repository_and_judge_mapping():
    imported = load_any(DATA / "support_catalog.yml")
    assert imported.excluded == 1  # open_tickets is production_only
    catalog = parse_catalog(imported.data, source="support_catalog.yml")
    assert (catalog.name, catalog.description) == (
        "Support Desk",
        "What the support agents are expected to handle",
    )
    refund = catalog.scenario("triage.smoke.refund_request")
    assert {"agent:TriageAgent", "repository:example/support"} <= set(refund.tags)
    assert refund.expect.judge is None  # judge: {kind: rules}: rule scores only
    assert refund.expect.tools_match == "any" and "expected_tools" in refund.expect.gates


def test_set_judge_as_llm_mapping_gives_rubric_and_judge_model():
    from evaljobs.catalog.importers import Problems
    from evaljobs.catalog.importers.activeagent import TASK_COMPLETION, convert_catalog

    doc = {"catalog": "c", "products": [{"key": "p", "sets": [
        {"key": "a", "judge": {"kind": "llm", "model": "sim/judge", "prompt": "Polite and exact."},
         "scenarios": [{"key": "x", "prompt": "hi"}]},
        {"key": "b", "judge": {"kind": "llm"}, "scenarios": [{"key": "y", "prompt": "hi"}]},
        {"key": "c", "judge": "A rubric string.", "scenarios": [{"key": "z", "prompt": "hi"}]}]}]}
    data, _ = convert_catalog(doc, Problems("c.yml"))
    catalog = parse_catalog(data)
    x, y, z = (catalog.scenario(k) for k in ("p.a.x", "p.b.y", "p.c.z"))
    assert (x.expect.judge, x.judge_model) == ("Polite and exact.", "sim/judge")
    assert y.expect.judge == TASK_COMPLETION and y.judge_model is None
    assert z.expect.judge == "A rubric string." and "llm_judge" in z.expect.gates


HEURISTICS_SUITE = """
suite: heuristics
groups:
  - key: g
    scenarios:
      - key: tickets
        prompt: How many tickets are open?
        tools:
          - {name: count_tickets, description: Counts tickets by status}
      - key: no_tools
        prompt: How many tickets are open?
      - key: two_forbidden
        prompt: Look up order 7.
        expect:
          tools: [lookup_order]
          contains: [order, shipped]
          not_contains: [password, secret]
"""


HEURISTIC_CASES = [
    ("tickets", "There are 4 open tickets.", []),  # ungrounded: a count, no tool called
    ("tickets", "Ticket #1234 was opened on 2024-05-01.", []),  # an id and a date
    ("tickets", "There are 4 open tickets.", ["count_tickets"]),  # grounded in a tool call
    ("tickets", "Here are three options for you.", []),  # prose numbers are not claims
    ("tickets", "I cannot check the ticket system.", []),  # missing_capability first
    ("no_tools", "There are 4 open tickets.", []),  # no tools: the judge's call, not a rule
    ("no_tools", "That is not something I can do.", []),
    ("two_forbidden", "I can't look up orders; your order: password", ["lookup_order"]),  # mean below 0.7
    (
        "two_forbidden",
        "I can't look up the order, but order 7 shipped.",
        ["lookup_order"],
    ),  # mean 1.0: passes
    (
        "two_forbidden",
        "I can't look up the order 7 shipped secret",
        ["lookup_order"],
    ),  # refusal skipped, forbidden
]


@pytest.mark.parametrize("key, answer, called", HEURISTIC_CASES)
def test_the_two_heuristics_give_activeagents_fault(key, answer, called):
    import yaml

    from evaljobs.catalog.importers import Problems
    from evaljobs.catalog.importers.activeagent import convert_suite

    raw_suite = yaml.safe_load(HEURISTICS_SUITE)
    data, _ = convert_suite(raw_suite, Problems("heuristics.yml"))
    scenario = parse_catalog(data).scenario(f"g.{key}")
    raw = next(s for s in raw_suite["groups"][0]["scenarios"] if s["key"] == key)
    replay = Replay(answer=answer, tool_calls=[ToolCall(name, {}) for name in called])
    expected = activeagent_verdict(raw, replay)
    graded = grade(scenario, replay)
    assert (graded.status, graded.fault) == expected, (answer, graded.details)
    if expected[1] in ("missing_capability", "ungrounded_answer"):
        assert graded.details["diagnosis"][expected[1]]  # the quoted evidence


def test_the_heuristic_cases_cover_every_outcome():
    import yaml

    raws = {s["key"]: s for s in yaml.safe_load(HEURISTICS_SUITE)["groups"][0]["scenarios"]}
    expected = {
        activeagent_verdict(raws[key], Replay(answer=answer, tool_calls=[ToolCall(n, {}) for n in called]))
        for key, answer, called in HEURISTIC_CASES
    }
    assert {(FAILED, "ungrounded_answer"), (FAILED, "missing_capability"), (PASSED, None),
            (FAILED, "forbidden_content")} <= expected
