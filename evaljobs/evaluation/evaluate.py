"""Evaluate one (scenario, model) pair: run the adapter, grade, build the Result.

Every strategy shares this code. An exception anywhere becomes an ``errored``
result with the reason — one bad pair never aborts a run — except retryable
provider faults when the caller asked to handle retries itself.
"""
from __future__ import annotations

import json
import re
import time
from typing import Any, Callable

from evaljobs.evaluation.adapters import Adapter, ConversationAdapter, DeadlineExceeded
from evaljobs.catalog import Scenario
from evaljobs.evaluation.grading import Judge, JudgeVerdict, grade
from evaljobs.catalog.modelspec import ModelSpec, ProvidersConfig, parse_model_spec
from evaljobs.providers.errors import PermanentError, ProviderError, RateLimited, TransientError
from evaljobs.evaluation.replay import Replay
from evaljobs.evaluation.result import ERRORED, Result
from evaljobs.evaluation.retry import RetryPolicy

from evaljobs.providers.governor import Busy  # noqa: E402 - the governor's "no permit yet": hand the pair back, not a fault

RETRYABLE = (RateLimited, TransientError, Busy)

JUDGE_SYSTEM = (
    "You are an evaluation judge. Score the ANSWER against the RUBRIC, from 0 (fails the rubric) "
    "to 1 (fully meets it). Reply with only a JSON object: {\"score\": <number 0..1>, \"reason\": \"<one sentence>\"}."
)

_DIRECTIVE = re.compile(r"\[sim(?:@[^:\]]+)?:[^\]]*\]")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ProviderError):
        return exc.reason
    text = str(exc) or exc.__class__.__name__
    return f"{exc.__class__.__name__}: {text}"[:2000]


def evaluate(
    scenario: Scenario,
    model: ModelSpec,
    adapter: Adapter,
    *,
    judge: Judge | None = None,
    attempts: int = 1,
    raise_retryable: bool = False,
    time_limit: float | None = None,
) -> Result:
    """Run and grade one pair.

    With ``raise_retryable`` a rate limit or transient provider fault is raised
    to the caller (a queue retries it); otherwise it becomes ``errored``.
    """
    started = time.perf_counter()
    deadline = time.monotonic() + time_limit if time_limit else None
    try:
        if isinstance(adapter, ConversationAdapter):
            replay = adapter(scenario, model, deadline=deadline)
        else:
            replay = adapter(scenario, model)
        if not isinstance(replay, Replay):
            raise TypeError(f"adapter returned {type(replay).__name__}, expected a Replay")
    except RETRYABLE:
        if raise_retryable:
            raise
        return _errored(scenario, model, _last_reason(), attempts, started)
    except DeadlineExceeded as exc:
        return _errored(scenario, model, f"timed out after {time_limit:g} s ({exc})", attempts, started)
    except Exception as exc:  # noqa: BLE001 - any adapter failure is this pair's error, not the run's
        return _errored(scenario, model, _describe(exc), attempts, started)

    try:
        runner = None
        if scenario.expect.assertions:
            from evaljobs.evaluation.assertions import process_runner  # lazy: only imported suites carry external assertions

            runner = process_runner()
        grades = grade(scenario, replay, judge, runner)
    except RETRYABLE:
        if raise_retryable:
            raise
        return _errored(scenario, model, _last_reason(), attempts, started)
    except Exception as exc:  # noqa: BLE001
        return _errored(scenario, model, f"grading failed: {_describe(exc)}", attempts, started)

    details: dict[str, Any] = dict(grades.details)
    details["turns"] = replay.turns
    details["messages"] = replay.messages[-40:]
    if replay.meta:
        details["meta"] = replay.meta
    judge_info = details.get("judge")
    extra_cost = judge_info.pop("cost", 0.0) if isinstance(judge_info, dict) else 0.0
    return Result(
        scenario_key=scenario.key,
        model=model.spec,
        status=grades.status,
        score=grades.score,
        scores=grades.scores,
        fault=grades.fault,
        output=replay.answer,
        tool_calls=[c.to_dict() for c in replay.tool_calls],
        duration_ms=int(round(replay.duration_ms)),
        input_tokens=replay.input_tokens,
        output_tokens=replay.output_tokens,
        cost=round(replay.cost + extra_cost, 8),
        attempts=attempts,
        error=replay.error or _grading_error(grades),
        details=details,
        cached=replay.cached,
    )


def _grading_error(grades) -> str | None:
    """Why grading could not give a verdict (the judge, or an assertion that cannot run)."""
    if grades.fault == "judge_unavailable":
        judge = grades.details.get("judge")
        return str(judge.get("reason") if isinstance(judge, dict) else judge)
    if grades.fault == "not_gradable":
        return "not gradable: " + "; ".join(grades.details.get("not_gradable") or ["no assertion can run"])
    return None


def _last_reason() -> str:
    import sys

    exc = sys.exc_info()[1]
    return _describe(exc) if exc else "provider error"


def _errored(scenario: Scenario, model: ModelSpec, reason: str, attempts: int, started: float) -> Result:
    return Result.errored(scenario.key, model.spec, reason, attempts=attempts,
                          duration_ms=int((time.perf_counter() - started) * 1000))


def evaluate_with_retries(
    scenario: Scenario,
    model: ModelSpec,
    adapter: Adapter,
    *,
    policy: RetryPolicy,
    judge: Judge | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Result:
    """The in-process retry loop used by the ``sequential`` and ``threads`` strategies."""
    retries = 0
    waits = 0
    while True:
        attempts = retries + 1  # a rate-limit wait or a busy governor is not an attempt
        try:
            return evaluate(scenario, model, adapter, judge=judge, attempts=attempts,
                            raise_retryable=True, time_limit=policy.time_limit)
        except Busy as exc:
            # The shared budget is full: wait our turn in-process (this path has no queue to hand back to).
            sleep(max(0.05, exc.retry_in))
        except RateLimited as exc:
            waits += 1
            if waits > policy.max_rate_limit_waits:
                return Result.errored(scenario.key, model.spec,
                                      f"still rate limited after {waits - 1} waits: {exc.reason}",
                                      attempts=attempts)
            sleep(policy.rate_limit_delay(exc.retry_after))
        except TransientError as exc:
            if retries >= policy.max_retries:
                return Result.errored(scenario.key, model.spec,
                                      f"{exc.reason} (gave up after {attempts} attempts)", attempts=attempts)
            sleep(policy.backoff(retries))
            retries += 1


class JudgeModelMissing(ValueError):
    """llm_judge criteria but no judge model: the run is refused before it is created."""


def judge_model_for(scenario: Scenario, run_judge_model: str | None, providers: ProvidersConfig) -> str | None:
    """The judge model of one scenario: the run's ``--judge-model`` overrides the catalog's
    ``judge_model``, which overrides the providers file's default. Never the model under test."""
    return run_judge_model or scenario.judge_model or providers.judge_model


def require_judge_models(scenarios, run_judge_model: str | None, providers: ProvidersConfig) -> None:
    """Refuse a run whose judged scenarios have no judge model (no self-judging by default)."""
    unjudged = [s.key for s in scenarios
                if s.expect.judge and (s.criteria is None or "llm_judge" in s.criteria or "llm_judge" in s.expect.gates)
                and not judge_model_for(s, run_judge_model, providers)]
    if unjudged:
        more = f" (and {len(unjudged) - 1} more)" if len(unjudged) > 1 else ""
        raise JudgeModelMissing(
            f"scenario {unjudged[0]!r}{more} has an llm_judge rubric but no judge model; set 'judge_model' "
            f"in the catalog's defaults, pass --judge-model provider/model, or set 'judge_model' in the "
            f"providers file (a model does not judge its own answers)")


def judge_prompt(scenario: Scenario, answer: str) -> list[dict[str, str]]:
    """The judge's messages: the rubric, the request, the reference answer (if any) and the answer."""
    request = _DIRECTIVE.sub("", scenario.prompt).strip()
    rubric = (scenario.expect.judge or "").strip()  # directives here steer a simulated judge (tests)
    parts = [f"RUBRIC:\n{rubric}", f"REQUEST:\n{request}"]
    if scenario.expect.reference:
        parts.append(f"REFERENCE ANSWER:\n{scenario.expect.reference}")
    parts.append(f"ANSWER:\n{answer}")
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


class ProviderJudge:
    """An LLM judge: asks a judge model to score the answer against the rubric, strict JSON.

    ``allow()`` is asked before every call so a run can cap its judge calls. A
    judge that cannot give a verdict (a provider error, or an answer that is not
    the expected JSON, after ``attempts`` tries) returns a verdict with ``error``
    set and its raw answer kept: the pair is then ``errored`` (``judge_unavailable``),
    never failed against the model under test. A rate limit or a busy governor is
    a wait, not a failure: it is raised so the pair is retried later.
    """

    #: Part of the response-cache key of judge calls: bump it when the judge prompt's meaning changes.
    version = "judge-2"

    def __init__(self, providers: ProvidersConfig, *, default_model: str | None = None,
                 allow: Callable[[], bool] | None = None, cache_ttl: float | None = None, attempts: int = 2):
        self.providers = providers
        #: The run's ``--judge-model``: overrides the catalog's.
        self.default_model = default_model
        self.allow = allow or (lambda: True)
        #: Seconds cached judge answers stay valid (a run with ``--cache``); None: always ask.
        self.cache_ttl = cache_ttl
        self.attempts = max(1, attempts)

    def __call__(self, scenario: Scenario, replay: Replay, model: ModelSpec | None = None) -> JudgeVerdict | None:
        spec_text = judge_model_for(scenario, self.default_model, self.providers)
        messages = judge_prompt(scenario, replay.answer or "")
        prompt = messages[-1]["content"]
        if not spec_text:
            return JudgeVerdict(0.0, error="no judge model configured (set judge_model or --judge-model)",
                                prompt=prompt)
        judge_model = parse_model_spec(spec_text, self.providers)
        if not self.allow():
            return None
        from evaljobs.providers.calls import complete

        tokens_in = tokens_out = 0
        cost = 0.0
        raw = ""
        problem = ""
        for _ in range(self.attempts):
            try:
                # The judge's calls count against the judge model's budget like any other call.
                if self.cache_ttl is not None:
                    from evaljobs.providers.cache import CachingClient, GovernedCalls

                    cache = CachingClient(GovernedCalls(self.providers, judge_model), judge_model.provider,
                                          self.cache_ttl, adapter_version=self.version)
                    completion = cache.complete(judge_model.model, messages, first=False, temperature=0)
                else:
                    completion = complete(self.providers, judge_model, messages, first=False, temperature=0)
            except (RateLimited, Busy):
                raise
            except ProviderError as exc:
                problem = f"judge {judge_model.spec} unavailable: {exc.reason}"
                continue
            tokens_in += completion.input_tokens
            tokens_out += completion.output_tokens
            if not getattr(completion, "cached", False):  # an answer from the cache costs nothing
                cost += self.providers.get(judge_model.provider).cost(
                    judge_model.model, completion.input_tokens, completion.output_tokens)
            raw = completion.content or ""
            parsed = parse_judge_json(raw)
            if isinstance(parsed, tuple):
                return JudgeVerdict(parsed[0], parsed[1], tokens_in, tokens_out, cost, prompt=prompt, raw=raw,
                                    model=judge_model.spec)
            problem = f"judge {judge_model.spec}: {parsed}"
        return JudgeVerdict(0.0, "", tokens_in, tokens_out, cost, error=problem, prompt=prompt, raw=raw[:4000],
                            model=judge_model.spec)


def parse_judge_json(text: str) -> tuple[float, str] | str:
    """Strict: a JSON object with a numeric ``score`` in [0, 1] -> (score, reason); else what is wrong."""
    body = (text or "").strip()
    if body.startswith("```"):
        body = body.strip("`")
        body = body[4:] if body.lower().startswith("json") else body
    try:
        data = json.loads(body)
    except ValueError:
        return f"answer is not JSON: {(text or '')[:120]!r}"
    if not isinstance(data, dict) or not isinstance(data.get("score"), (int, float)) \
            or isinstance(data.get("score"), bool):
        return f"answer has no numeric 'score': {(text or '')[:120]!r}"
    score = float(data["score"])
    if not 0.0 <= score <= 1.0:
        return f"score {score} is outside 0..1"
    return score, str(data.get("reason", ""))[:500]


def parse_judge_answer(text: str) -> tuple[float, str]:
    """Compatibility: (score, reason), or (0, what is wrong) for an answer that is not a verdict."""
    parsed = parse_judge_json(text)
    return parsed if isinstance(parsed, tuple) else (0.0, f"judge {parsed}")


def bind_judge(judge: ProviderJudge | None, model: ModelSpec) -> Judge | None:
    """The judge for one pair (the model under test is passed for context, never used as the judge)."""
    if judge is None:
        return None
    return lambda scenario, replay: judge(scenario, replay, model)


__all__ = ["evaluate", "evaluate_with_retries", "ProviderJudge", "parse_judge_answer", "parse_judge_json",
           "bind_judge", "judge_model_for", "require_judge_models", "JudgeModelMissing", "judge_prompt",
           "RETRYABLE", "PermanentError", "ERRORED"]
