"""The pair runner (evaljobs/pipeline/pairs.py): one plan per run, one check, one decision function.

Each outcome is produced by a real provider call to the simulated provider over loopback; the
strategies' own behaviour (fan-out, batches, in-process) is covered by the fault, deadline,
retry-after and batch suites, which run unchanged on the runner.
"""
from __future__ import annotations

import pytest
from evaljobs_middleware import crashes

from evaljobs import config, store
from evaljobs.catalog import loads_catalog
from evaljobs.pipeline import pairs
from evaljobs.pipeline.pairs import (
    GiveUp,
    HandBack,
    InvalidMessage,
    Pair,
    PairState,
    Recorded,
    Retry,
    RunPlan,
)

CATALOG = """\
name: runner
scenarios:
  - key: fine
    prompt: "[sim: say all good]"
    expect: {contains: [all good]}
  - key: broken
    prompt: "[sim: status 503]"
  - key: limited
    prompt: "[sim: ratelimit 7]"
"""


@pytest.fixture
def run(sqlite_url, simulated_provider, monkeypatch):
    simulated_provider(latency=0)
    monkeypatch.setenv("EVALJOBS_MAX_RETRIES", "2")
    monkeypatch.setenv("EVALJOBS_GOVERNOR", "off")
    store.connect(sqlite_url)
    pairs.forget_plans()
    return store.create_run(loads_catalog(CATALOG, source="runner.yaml"), ["sim/a"], strategy="sequential",
                            options={"time_limit": 60}, epochs=2)


def test_a_plan_is_resolved_once_per_run_and_again_when_the_settings_change(run, monkeypatch):
    plan = RunPlan.for_run(run.id)
    assert RunPlan.for_run(run.id) is plan and RunPlan.for_run(run.id, store.get_run(run.id)) is plan
    assert plan.policy.time_limit == 60 and plan.policy.max_retries == 2
    assert plan.spec("sim/a") is plan.spec("sim/a") and plan.adapter() is plan.adapter()
    monkeypatch.setenv("EVALJOBS_MAX_RETRIES", "1")  # replaced settings: a new plan, with the new policy
    again = RunPlan.for_run(run.id)
    assert again is not plan and again.policy.max_retries == 1


@pytest.mark.parametrize("pair, message", [
    (Pair("r_nope", "fine", "sim/a"), "unknown run 'r_nope': list runs with `evaljobs runs`"),
    (Pair("RUN", "nope", "sim/a"), "scenario 'nope' is not in run RUN's catalog"),
    (Pair("RUN", "fine", "sim/b"), "model 'sim/b' is not part of run RUN (models: sim/a)"),
    (Pair("RUN", "fine", "sim/a", 2), "epoch 2 is not one of run RUN's 2 epochs"),
    (Pair("RUN", "fine", "sim/a", True), "epoch True is not one of run RUN's 2 epochs"),
])
def test_a_pair_outside_its_run_is_an_invalid_message(run, pair, message):
    pair = Pair(*(run.id if value == "RUN" else value for value in
                  (pair.run_id, pair.scenario_key, pair.model, pair.epoch)))
    with pytest.raises(InvalidMessage) as caught:
        pairs.check(pair)
    assert str(caught.value) == message.replace("RUN", run.id)
    assert pairs.check(Pair(run.id, "fine", "sim/a", 1)).run.id == run.id


def test_a_good_answer_is_recorded(run):
    outcome = pairs.attempt(Pair(run.id, "fine", "sim/a", 1), PairState())
    assert isinstance(outcome, Recorded)
    assert (outcome.result.status, outcome.result.epoch, outcome.result.attempts) == ("passed", 1, 1)


def test_a_transient_fault_is_retried_until_the_retries_run_out(run):
    pair, state = Pair(run.id, "broken", "sim/a"), PairState(in_place=True)
    first = pairs.attempt(pair, state)
    assert isinstance(first, Retry) and "503" in first.reason and state.retries == 1
    assert 0.5 <= first.backoff <= 0.5 + 1e-9  # the policy's first backoff: min_backoff
    assert isinstance(pairs.attempt(pair, state), Retry) and state.retries == 2
    last = pairs.attempt(pair, state)
    assert isinstance(last, GiveUp) and last.result.status == "errored" and last.result.attempts == 3
    assert last.result.error.endswith("(gave up after 3 attempts)"), last.result.error


def test_a_rate_limit_hands_the_pair_back_without_using_a_retry(run, monkeypatch):
    monkeypatch.setenv("EVALJOBS_MAX_RATE_LIMIT_WAITS", "1")
    pair, state = Pair(run.id, "limited", "sim/a"), PairState(in_place=True)
    first = pairs.attempt(pair, state)
    assert isinstance(first, HandBack) and 7 <= first.delay <= 7 * 1.05
    assert (state.retries, state.rate_limit_waits) == (0, 1)
    last = pairs.attempt(pair, state)
    assert isinstance(last, GiveUp) and last.result.error.startswith("still rate limited after 1 waits"), last


def test_a_pair_whose_time_ran_out_while_waiting_gives_up_without_a_call(run, simulated_provider):
    state = PairState(spent=60.0, retries=1, last="HTTP 503")  # a retry that arrives with its time used up
    outcome = pairs.attempt(Pair(run.id, "fine", "sim/a"), state)
    assert isinstance(outcome, GiveUp)
    assert outcome.result.error.startswith("timed out after 60 s") and "waiting to retry: HTTP 503" in \
        outcome.result.error


def test_the_crash_limit_defaults_to_the_crash_counters_own():
    assert config.Settings().crash_limit() == crashes.DEFAULT_MAX_CRASHES == config.DEFAULT_MAX_CRASHES
