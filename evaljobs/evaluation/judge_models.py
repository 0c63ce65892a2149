"""Which judge models a run calls, and the checks a submit makes of them, apart from the judge itself
(:mod:`evaljobs.evaluation.judge`, which calls a provider).

Why a module of its own: a submit refuses a judged catalog without a judge model, and a model judging
itself, before the run exists; on Redis it runs no pair, so it must not import the provider client the
judge calls through (issue 42, item 3).
"""
from __future__ import annotations

from evaljobs.catalog import Scenario
from evaljobs.catalog.digest import is_judged
from evaljobs.catalog.modelspec import ProvidersConfig, parse_model_spec
from evaljobs.errors import UsageError


class JudgeModelMissing(UsageError):
    """llm_judge criteria but no judge model: the run is refused before it is created."""


def judge_model_for(
    scenario: Scenario, run_judge_model: str | None, providers: ProvidersConfig
) -> str | None:
    """The judge model of one scenario: the run's ``--judge-model`` overrides the catalog's
    ``judge_model``, which overrides the providers file's default. Never the model under test."""
    return run_judge_model or scenario.judge_model or providers.judge_model


_judged = is_judged  # one definition, beside the digest that folds the judge in (compare, --reuse)


def judge_models(scenarios, run_judge_model: str | None, providers: ProvidersConfig) -> list[str]:
    """Every judge model the run will call (sorted), wherever it was named: the run, catalog or providers
    file."""
    found = {judge_model_for(s, run_judge_model, providers) for s in scenarios if _judged(s)}
    return sorted(m for m in found if m)


def require_judge_models(scenarios, run_judge_model: str | None, providers: ProvidersConfig) -> None:
    """Refuse a run whose judged scenarios have no judge model (no self-judging by default)."""
    unjudged = [s.key for s in scenarios if _judged(s) and not judge_model_for(s, run_judge_model, providers)]
    if unjudged:
        more = f" (and {len(unjudged) - 1} more)" if len(unjudged) > 1 else ""
        raise JudgeModelMissing(
            f"scenario {unjudged[0]!r}{more} has an llm_judge rubric but no judge model; set 'judge_model' "
            f"in the catalog's defaults, pass --judge-model provider/model, or set 'judge_model' in the "
            f"providers file (a model does not judge its own answers)")


def self_judging(judges, models, providers: ProvidersConfig, *, allow: bool = False) -> list[str]:
    """The models under test that are also a judge model (sorted); refused in one line unless ``allow``
    (``--allow-self-judge``): a model grading its own answers is not a verdict."""
    found = sorted({parse_model_spec(j, providers).spec for j in judges} & set(models))
    if found and not allow:
        raise UsageError(
            f"{found[0]} would judge its own answers (it is both a model under test and the judge "
            f"model); name another judge with --judge-model, or pass --allow-self-judge to insist"
        )
    return found


__all__ = ["JudgeModelMissing", "judge_model_for", "judge_models",
           "require_judge_models", "self_judging"]
