"""A run's submission: everything checked, in one line each, before the run exists.

:meth:`evaljobs.api.Session.submit` is three steps: :func:`check_request` (the strategy, the models, the
judge model, the adapter: before the catalog is read), :func:`load` (a native catalog read, or a foreign
one imported, its live tools refused or expanded) and :func:`plan` (the selection, the judges, the
simulated models' names, the batch choice, the stored options and the host context). Only then does the
session create the run and start it: a bad catalog, model or option creates nothing, and no run is left
``pending`` (issue 40.17).

Why here and not in the API: none of it needs a session (a broker, workers, a held lease); it is the
pipeline's own pre-flight, which the pytest plugin and scripts reach through the session as the CLI does.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from evaljobs_middleware.context import ContextError

from evaljobs import config, pipeline
from evaljobs.catalog import Catalog, CatalogSource, parse_source, read_catalog
from evaljobs.catalog.importers import load_any
from evaljobs.catalog.modelspec import (ModelSpec, ModelSpecError, ProvidersConfig, parse_model_spec,
                                       storable_definition)
from evaljobs.catalog.subset import Selection, select
from evaljobs.errors import UsageError
from evaljobs.evaluation.adapter_version import BUILT_IN_ADAPTER_VERSION
from evaljobs.evaluation.assertions import refusal
from evaljobs.evaluation.judge_models import (JudgeModelMissing, judge_models, require_judge_models,
                                              self_judging)
from evaljobs.extras import require_for_catalog
from evaljobs.pipeline import batch_choice, message_size, pair_path, run_providers
from evaljobs.pipeline.run_settings import RunSettings, SubmitOptions
from evaljobs.pipeline.strategy_names import STRATEGIES
from evaljobs.providers import require_callable
from evaljobs.store import RunInfo
from evaljobs.simulated.directives import unknown_judge_problem, unknown_model_problem
from evaljobs.tools import catalog_refusal, expand_source
from evaljobs.tools.roots import folder_of

#: The ContextMiddleware's default cap, checked before a run exists so an oversized context leaves no run.
CONTEXT_MAX_BYTES = 8192


def check_providers(models: Sequence[str], providers: str | ProvidersConfig | None = None) -> None:
    """Raise ``ProviderProblems`` (a ``UsageError``, one line per problem) unless every model can be called.

    Checks configuration only, no network: the provider is known, its wire format
    is supported, its base URL is http(s), its API-key variable is set (or it needs
    none). ``run``, ``rerun`` and ``bench`` call this before creating anything;
    ``evaljobs providers check`` goes further and makes one real call per model.
    """
    config_ = providers if isinstance(providers, ProvidersConfig) else run_providers.providers(providers)
    require_callable(config_, models)


def capture_context(providers: Sequence[Any]) -> dict[str, Any] | None:
    """The host context to store on the run, checked exactly as the middleware will carry it.

    Runs before the run is created, so a value that cannot travel fails here,
    naming its provider, and leaves no pending run behind.
    """
    values = {}
    for provider in providers:
        value = provider.capture()
        if value is None:
            continue
        try:
            values[provider.name] = json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ContextError(f"context provider {provider.name!r} returned a value that is not "
                               f"JSON-serializable ({type(value).__name__}): {exc}") from None
    size = len(json.dumps({"v": values}, sort_keys=True, separators=(",", ":")))
    if size > CONTEXT_MAX_BYTES:
        raise ContextError(f"host context is {size} bytes, over the cap of {CONTEXT_MAX_BYTES} bytes "
                           f"(providers: {', '.join(sorted(values))}); carry an identifier instead")
    return values or None


class Loaded(NamedTuple):
    """A catalog read for a run, and what an import of a foreign one warned about or left out."""

    catalog: Catalog
    excluded: int = 0  # production_only scenarios an import left out (the report says so)
    warnings: tuple[str, ...] = ()


def load(catalog: str | Path, providers: ProvidersConfig, *, format: str | None = None,
         include_production_only: bool = False, lenient: bool = False, grader: str | None = None,
         fields: Sequence[str] | dict[str, str] | None = None) -> Loaded:
    """Read a native catalog, or import a foreign one (:func:`evaljobs.catalog.importers.load_any`), with
    its live tools checked against this process's allowance and its MCP tool imports listed."""
    imported = load_any(str(catalog), format=format, include_production_only=include_production_only,
                        lenient=lenient, grader=grader, fields=fields)
    # A catalog with MCP tools and no `mcp` extra: one line now, not a connect timeout per server later.
    require_for_catalog(imported.data, source=str(catalog))
    # A live tool this process's operator does not allow (a variable, an endpoint, a program:
    # evaljobs.tools.allowance): one line before any server is started, checked as a worker would.
    problem = catalog_refusal(imported.data)
    if problem:
        raise UsageError(f"{catalog}: {problem}")
    if imported.format == "native":
        # MCP tool imports are listed from their servers here, an explicit step: parsing does no I/O.
        source = imported.native or read_catalog(catalog)  # read once: 100,000 scenarios in seconds
        return Loaded(parse_source(expand_source(source), providers=providers))
    source = expand_source(CatalogSource(source=str(catalog), data=imported.data))
    return Loaded(parse_source(source, providers=providers), imported.excluded, tuple(imported.warnings))


def check_request(models: Sequence[str], providers: ProvidersConfig, strategy: str,
                  options: SubmitOptions) -> list[ModelSpec]:
    """The models parsed, once the strategy, the models, the epochs, the judge model and the adapter are
    known to be usable (before the catalog is read)."""
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy '{strategy}': use one of {', '.join(STRATEGIES)}")
    if not models:
        raise UsageError("no model given: pass at least one -m provider/model")
    epochs = options.get("epochs")
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
        raise UsageError(f"--epochs must be a whole number of 1 or more, not {epochs!r}")
    parsed = []
    for text in models:
        try:
            parsed.append(parse_model_spec(text, providers))
        except ModelSpecError as exc:
            raise UsageError(str(exc)) from None
    specs = [spec.spec for spec in parsed]
    if len(set(specs)) != len(specs):
        raise UsageError(f"a model is given twice: {', '.join(specs)}")
    judge_model, adapter, cache = options.get("judge_model"), options.get("adapter"), options.get("cache")
    if judge_model:
        try:
            parse_model_spec(judge_model, providers)
        except ModelSpecError as exc:
            raise UsageError(f"--judge-model: {exc}") from None
    if adapter is None:  # a host adapter makes its own calls, with its own credentials
        check_providers(specs + ([judge_model] if judge_model else []), providers)
    if adapter or cache:
        pair_path.runtime.adapter(adapter, cache=bool(cache))  # fail now, not on a worker
    return parsed


@dataclass(frozen=True)
class Plan:
    """What a run is created with (:func:`evaljobs.store.create_run`), every part of it checked."""

    catalog: Catalog  # its selected scenarios
    models: list[str]
    epochs: int
    options: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] | None = None
    reuse: bool = False
    reuse_source: str | None = None  # the run --reuse copies from (None: there was none)

    def reuse_line(self, run_id: str) -> str | None:
        """Copy what ``--reuse`` reuses into the created run; the one line that says what it did."""
        if not self.reuse:
            return None
        return pipeline.reuse.reuse_line(run_id, self.reuse_source, self.catalog.name)


def plan(catalog: Catalog, parsed: Sequence[ModelSpec], providers: ProvidersConfig, *, strategy: str,
         options: SubmitOptions, excluded: int = 0,
         context: Callable[[], Sequence[Any]] = tuple) -> Plan:
    """Check the run ``options`` against the loaded ``catalog`` and say what the run is created with.

    ``context`` gives the host's context providers (captured last, after every check).
    """
    judge_model, adapter, reuse = options.get("judge_model"), options.get("adapter"), options.get("reuse")
    cache = bool(options.get("cache"))
    specs = [spec.spec for spec in parsed]
    cat, chosen = select(catalog, options.get("selection") or Selection())
    _check_simulated_models(cat, [spec.model for spec in parsed if spec.provider == "sim"])
    source = pipeline.reuse.source_of(reuse, cat.name) if reuse else None  # 'latest': an earlier run
    try:  # no self-judging: a judged catalog needs a judge model before anything is created
        require_judge_models(cat.scenarios, judge_model, providers)
    except JudgeModelMissing as exc:
        raise UsageError(f"{cat.source}: {exc}") from None
    # The judge is called by evaljobs whatever the adapter: every judge model, whether named by
    # --judge-model, the catalog or the providers file, passes the same pre-flight checks.
    judges = judge_models(cat.scenarios, judge_model, providers)
    check_providers(judges, providers)
    # --judge-model is checked even where no criterion is judged: a typo there is a typo
    _check_simulated_judges(cat, list(dict.fromkeys([*([judge_model] if judge_model else []), *judges])),
                            judge_model, providers)
    self_judged = self_judging(judges, specs, providers, allow=bool(options.get("allow_self_judge")))
    external = [a for s in cat.scenarios for a in s.expect.assertions]
    problem = refusal(external) if external else None  # javascript without node
    if problem:
        raise UsageError(f"{cat.source}: {problem}")
    batched = batch_choice.choose(providers, specs, bool(options.get("batch")), strategy,
                              plain=not (adapter or cache))
    judged = batch_choice.choose_judge(providers, judges, bool(options.get("batch_judge")), specs, batched)
    epochs = options.get("epochs")
    epochs = epochs if epochs is not None else cat.epochs
    per_message = 1
    if strategy == "fanout" and not batched:  # unset: several a message for a provider known to be fast
        per_message = message_size.pairs_per_message(config.settings().pairs_per_message, specs,
                                                     len(cat.scenarios) * len(specs) * epochs)
    try:  # the providers file travels with the run (variable names only): every worker uses it
        stored_providers = storable_definition(providers)
    except ModelSpecError as exc:
        raise UsageError(str(exc)) from None
    # The per-pair limits in force here (a flag's time limit first) travel with the run: a worker
    # started with another environment applies them, not its own.
    limits = RunSettings.limits_of(config.settings(), options.get("time_limit"))
    settings = RunSettings(adapter=adapter, judge_model=judge_model, judge_cap=options.get("judge_cap"),
                           **limits, cache=cache or None,
                           cache_across_epochs=options.get("cache_across_epochs") or None,
                           pairs_per_message=per_message if per_message > 1 else None,
                           batch=batched or None, batch_judge=judged or None,
                           providers=stored_providers)
    captured = capture_context(context())
    stored = settings.to_options()
    # What --reuse compares besides the scenario, model and epoch (see evaljobs.pipeline.reuse).
    # The built-in adapter's version is known without building it (and loading the provider client: a
    # Redis submit makes no call); a host adapter was loaded by check_request already.
    version = (getattr(pair_path.runtime.adapter(adapter, cache=cache), "version", "") if adapter
               else BUILT_IN_ADAPTER_VERSION)
    stored["adapter_version"] = str(version or "")
    root = folder_of(cat.source)
    if root is not None:  # what a catalog's relative MCP paths mean, beside the snapshot (.tools.roots)
        stored["catalog_root"] = root
    if excluded:
        stored["excluded"] = excluded
    if chosen:
        stored["selection"] = chosen
    if self_judged:  # --allow-self-judge: every report says so
        stored["self_judge"] = self_judged
    return Plan(cat, specs, epochs, stored, captured,
                reuse=bool(reuse), reuse_source=source)


def resubmit(original: RunInfo, which: Sequence[str], providers: ProvidersConfig, *, reuse: str | None = None,
             batch: bool | None = None, replace_providers: bool = False) -> tuple[RunInfo, str | None]:
    """A rerun of ``original``'s ``which`` pairs created (:func:`evaljobs.pipeline.rerun.create_rerun`), and
    the line saying what ``reuse`` copied into it (None: no ``--reuse``).

    Its models are checked as a run's are (unless a host adapter makes their calls), and with
    ``replace_providers`` (a providers file given to the session) ``providers`` replace the file stored
    with the original run.
    """
    if not (original.options or {}).get("adapter"):  # a host adapter makes its own calls
        chosen = {model for _, model, _ in pipeline.rerun.select_pairs(original.id, sorted(set(which)))}
        check_providers([m for m in original.models if m in chosen], providers)
    source = pipeline.reuse.source_of(reuse, original.catalog_name) if reuse else None
    try:
        given = storable_definition(providers) if replace_providers else None
    except ModelSpecError as exc:
        raise UsageError(str(exc)) from None
    new = pipeline.rerun.create_rerun(original.id, which, batch=batch, providers=given)
    return new, (pipeline.reuse.reuse_line(new.id, source, original.catalog_name) if reuse else None)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in _strings(item)]
    return []


def _check_simulated_models(cat: Catalog, names: Sequence[str]) -> None:
    """Refuse a ``sim/`` model the catalog's ``[sim@NAME: …]`` directives would silently skip (a typo)."""
    if not names:
        return
    texts = _strings(cat.body)
    for name in names:
        problem = unknown_model_problem(name, texts, source=cat.source)
        if problem:
            raise UsageError(problem)


def _check_simulated_judges(cat: Catalog, judges: Sequence[str], given: str | None,
                            providers: ProvidersConfig) -> None:
    """Refuse a ``sim/`` judge model the simulator does not know (``--judge-model sim/jduge``): a model
    under test may be any name, but a judge is a role the simulated provider plays under its own names."""
    parsed = [(judge, parse_model_spec(judge, providers)) for judge in judges]
    names = [(judge, spec.model) for judge, spec in parsed if spec.provider == "sim"]
    if not names:
        return
    texts = _strings(cat.body)
    for judge, model in names:
        problem = unknown_judge_problem(model, texts)
        if problem:
            raise UsageError(f"--judge-model: {problem}" if judge == given else f"{cat.source}: {problem}")


__all__ = ["CONTEXT_MAX_BYTES", "Loaded", "Plan", "capture_context", "check_providers", "check_request",
           "load", "plan", "resubmit"]
