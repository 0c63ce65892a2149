"""The LLM judge: asks a judge model to score an answer against the scenario's rubric.

Kept apart from :mod:`evaluate` because it is the one grader that calls a
provider: it takes the process's :class:`~evaljobs.providers.calls.ProviderCalls`
(governor permits, response cache) as an argument, so evaluation code never
looks up pipeline state. :mod:`grading` receives it as a plain callable.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable

from evaljobs import telemetry
from evaljobs.catalog import Scenario
from evaljobs.catalog.modelspec import ModelSpec, ProvidersConfig, parse_model_spec
from evaljobs.evaluation.grading import Judge, JudgeVerdict
from evaljobs.evaluation.judge_models import judge_model_for
from evaljobs.evaluation.replay import Replay
from evaljobs.providers import BatchingClient, ProviderCalls
from evaljobs.providers import ProviderError, RateLimited
from evaljobs.governor import Busy

JUDGE_SYSTEM = (
    "You are an evaluation judge. Score the ANSWER against the RUBRIC, from 0 (fails the rubric) "
    'to 1 (fully meets it). Reply with only a JSON object: {"score": <number 0..1>, "reason": "<one '
    'sentence>"}.'
)

_DIRECTIVE = re.compile(r"\[sim(?:@[^:\]]+)?:[^\]]*\]")


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

    ``allow()`` is asked before every call so a run can cap its judge calls; ``release()`` gives the
    call back when the provider did not answer it (rate limited, no permit: the pair asks again). A
    judge that cannot give a verdict (a provider error, or an answer that is not
    the expected JSON, after ``attempts`` tries) returns a verdict with ``error``
    set and its raw answer kept: the pair is then ``errored`` (``judge_unavailable``),
    never failed against the model under test. A rate limit or a busy governor is
    a wait, not a failure: it is raised so the pair is retried later.
    """

    #: Part of the response-cache key of judge calls: bump it when the judge prompt's meaning changes.
    version = "judge-2"

    def __init__(
        self,
        providers: ProvidersConfig,
        *,
        default_model: str | None = None,
        allow: Callable[[], bool] | None = None,
        release: Callable[[], None] | None = None,
        calls: ProviderCalls | None = None,
        attempts: int = 2,
    ):
        self.providers = providers
        #: The run's ``--judge-model``: overrides the catalog's.
        self.default_model = default_model
        self.allow = allow or (lambda: True)
        self.release = release or (lambda: None)
        #: The governance and response cache the pipeline bound; the default calls the provider directly.
        self.calls = calls or ProviderCalls()
        self.attempts = max(1, attempts)

    def __call__(
        self, scenario: Scenario, replay: Replay, model: ModelSpec | None = None
    ) -> JudgeVerdict | None:
        spec_text = judge_model_for(scenario, self.default_model, self.providers)
        messages = judge_prompt(scenario, replay.answer or "")
        prompt = messages[-1]["content"]
        if not spec_text:
            return JudgeVerdict(0.0, error="no judge model configured (set judge_model or --judge-model)",
                                prompt=prompt)
        judge_model = parse_model_spec(spec_text, self.providers)
        # The judge's calls count against the judge model's budget like any other call.
        client = self.calls.client(self.providers, judge_model, self.version)
        # A batched judgement spans two evaluations of the pair (its request parked, then answered):
        # the cap was taken when it was parked, not again when the answer is read.
        taken = not (isinstance(client, BatchingClient) and client.requested(messages))
        if taken and not self.allow():
            return None
        tokens_in = tokens_out = 0
        cost: float | None = 0.0  # None once a paid call's price is unknown: unknown is not zero
        raw = ""
        problem = ""
        for _ in range(self.attempts):
            try:
                completion = client.complete(judge_model.model, messages, first=False, temperature=0)
            except (RateLimited, Busy):
                if taken:  # the judgement is asked again later: it takes the cap's call then
                    self.release()
                raise
            except ProviderError as exc:
                problem = f"judge {judge_model.spec} unavailable: {exc.reason}"
                continue
            tokens_in += completion.input_tokens
            tokens_out += completion.output_tokens
            if not getattr(completion, "cached", False):  # an answer from the cache costs nothing
                entry = self.providers.get(judge_model.provider)  # batched (--batch-judge): the batch price
                call = entry.cost(judge_model.model, completion.usage,
                                  batch=bool(getattr(completion, "batched", False)))
                cost = None if cost is None or call is None else cost + call
            raw = completion.content or ""
            parsed = parse_judge_verdict(raw)
            if isinstance(parsed, tuple):
                return JudgeVerdict(parsed[0], parsed[1], tokens_in, tokens_out, cost, passed=parsed[2],
                                    prompt=prompt, raw=raw, model=judge_model.spec)
            problem = f"judge {judge_model.spec}: {parsed}"
        return JudgeVerdict(
            0.0,
            "",
            tokens_in,
            tokens_out,
            cost,
            error=problem,
            prompt=prompt,
            raw=raw[:4000],
            model=judge_model.spec,
        )


def parse_judge_json(text: str) -> tuple[float, str] | str:
    """Strict: a JSON object with a numeric ``score`` in [0, 1] -> (score, reason); else what is wrong."""
    parsed = parse_judge_verdict(text)
    return parsed[:2] if isinstance(parsed, tuple) else parsed


_PASS_WORDS = re.compile(r"(true|yes|pass|y)", re.IGNORECASE)


def parse_judge_verdict(text: str) -> tuple[float, str, bool | None] | str:
    """Strict: a JSON object with a numeric ``score`` in [0, 1] and optionally ``pass`` -> (score, reason,
    pass or None); else what is wrong. As promptfoo's llm-rubric reads its judge: a non-boolean ``pass``
    is true when it reads "true", "yes", "pass" or "y"; an answer with ``pass`` and no ``score`` scores 1
    or 0."""
    body = (text or "").strip()
    if body.startswith("```"):
        body = body.strip("`")
        body = body[4:] if body.lower().startswith("json") else body
    try:
        data = json.loads(body)
    except ValueError:
        return f"answer is not JSON: {(text or '')[:120]!r}"
    if not isinstance(data, dict):
        return f"answer has no numeric 'score': {(text or '')[:120]!r}"
    passed = data.get("pass")
    if passed is not None and not isinstance(passed, bool):
        passed = _PASS_WORDS.fullmatch(str(passed).strip()) is not None
    score = data.get("score")
    if score is None and passed is not None:
        score = 1.0 if passed else 0.0
    if not isinstance(score, (int, float)) or isinstance(score, bool):
        return f"answer has no numeric 'score': {(text or '')[:120]!r}"
    score = float(score)
    if not 0.0 <= score <= 1.0:
        return f"score {score} is outside 0..1"
    return score, str(data.get("reason", ""))[:500], passed


def parse_judge_answer(text: str) -> tuple[float, str]:
    """Compatibility: (score, reason), or (0, what is wrong) for an answer that is not a verdict."""
    parsed = parse_judge_json(text)
    return parsed if isinstance(parsed, tuple) else (0.0, f"judge {parsed}")


def bind_judge(judge: ProviderJudge | None, model: ModelSpec) -> Judge | None:
    """The judge for one pair (the model under test is passed for context, never used as the judge)."""
    if judge is None:
        return None

    def judged(scenario: Scenario, replay: Replay) -> JudgeVerdict | None:
        with telemetry.span("judge", {"evaljobs.scenario.key": scenario.key, "evaljobs.model": model.spec}):
            return judge(scenario, replay, model)

    return judged


__all__ = [
    "JUDGE_SYSTEM",
    "ProviderJudge",
    "bind_judge",
    "judge_prompt",
    "parse_judge_answer",
    "parse_judge_json",
    "parse_judge_verdict",
]
