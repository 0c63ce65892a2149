"""Incremental runs (``--reuse RUN|latest``): copy the unchanged pairs of an earlier run instead of evaluating
them.

A team editing three scenarios of three hundred should pay for three. Before a
new run starts, each pair it expects — (scenario, model, epoch) — is copied from
the earlier run when all of these are unchanged:

* the scenario's canonical form (:func:`evaljobs.catalog.digest.scenario_digest`: prompt,
  tools, expectations, threshold, judge model … everything that defines it);
* the model spec (the exact ``provider/model[@label]`` string);
* the adapter (the run's ``adapter`` reference and its ``version``);
* the judge (``--judge-model``); and for a judged pair, the judge model that judged it (its row says
  which) is the one this run would judge it with — a judge named by the providers file counts too;
* the epoch (epoch 2 is copied from epoch 2 only);

and the earlier row was a verdict (``passed`` or ``failed``): an ``errored`` row
says the evaluation did not happen, so it is evaluated again. A copied row keeps
the earlier verdict, scores and transcript, is marked ``reused_from`` (the run
that evaluated it, followed through chains of reuse), and costs $0 in the new
run (the earlier cost and the provider calls it saved are kept in its
``details.reused``). Copies go through :func:`evaljobs.store.record_result`, the
same barrier as evaluated pairs, before the run is started — so ``start_run``
enqueues only the rest, a run of nothing but copies is finalized at once, and
the run still has exactly one row per expected pair and one report.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from evaljobs import config, store
from evaljobs.catalog import Scenario
from evaljobs.catalog.criteria import judged_names
from evaljobs.catalog.digest import judge_model_of, scenario_digest
from evaljobs.catalog.modelspec import ModelSpecError, parse_model_spec
from evaljobs.errors import UsageError
from evaljobs.evaluation.judge_models import judge_model_for
from evaljobs.evaluation.result import ERRORED, Result
from evaljobs.pipeline.run_providers import stored_providers

#: The run options that must be equal for a pair to be reused (with the scenario, model and epoch): the
#: table's (``RunOption.identity``) and the adapter's version the run recorded.
IDENTITY_OPTIONS = (*(o.name for o in config.RUN_OPTIONS if o.identity), "adapter_version")


@dataclass(frozen=True)
class Reused:
    """What ``--reuse`` did: ``pairs`` of the run's ``expected`` copied from ``source``; of the rest,
    ``changed`` (the scenario differs), ``new`` (no such scenario, model or epoch there), ``errored``
    (no verdict there to copy); ``why_none`` when nothing was comparable."""

    source: str | None
    pairs: int
    calls_saved: int
    expected: int = 0
    changed: int = 0
    new: int = 0
    errored: int = 0
    why_none: str | None = None

    def line(self) -> str:
        """The one line ``run``/``rerun`` print, whatever happened (``--reuse`` is never silent)."""
        if self.source is None or self.why_none:
            return f"--reuse: {self.why_none}; evaluating all {self.expected} pairs"
        errored = f", {self.errored} errored there" if self.errored else ""
        return (f"reused {self.pairs} of {self.expected} pairs from {self.source} "
                f"({self.changed} changed, {self.new} new{errored})")


def latest_of(catalog_name: str) -> str | None:
    """The newest run of the catalog named ``catalog_name`` (what ``--reuse latest`` means), if any."""
    found = store.pages.runs(limit=1, catalog=catalog_name)
    return found[0].id if found else None


def source_of(reuse: str, catalog_name: str) -> str | None:
    """The run ``--reuse`` names: ``latest`` is the newest run of the same catalog name (a run of another
    catalog has nothing to reuse; None when there is none), else an id or a unique prefix."""
    if reuse == "latest":
        return latest_of(catalog_name)
    return store.resolve_run_id(reuse)


def reuse_line(run_id: str, source: str | None, catalog_name: str) -> str:
    """Copy the unchanged pairs of ``source`` into the new run; the one line that says what happened
    (``--reuse`` is never silent, even when there was nothing to reuse)."""
    done = (reuse_into(run_id, source) if source is not None
            else nothing_to_reuse(run_id, f"no earlier run of catalog {catalog_name!r}"))
    return done.line()


def nothing_to_reuse(run_id: str, why: str) -> Reused:
    """No compatible run: every pair is evaluated, and the line says why."""
    return Reused(None, 0, 0, expected=len(store.expected_pairs(run_id)), why_none=why)


def provider_calls(result: Result) -> int:
    """The provider calls a result cost: its model turns, plus one judge call per judged criterion it was
    scored on."""
    details = result.details or {}
    turns = details.get("turns") if isinstance(details, dict) else None
    calls = int(turns) if isinstance(turns, int) and turns > 0 else 1
    return calls + len(judged_names().intersection(result.scores or {}))


def reuse_into(run_id: str, source_id: str) -> Reused:
    """Copy into the (created, not started) run ``run_id`` every pair of ``source_id`` that is unchanged."""
    run, source = store.get_run(run_id), store.get_run(source_id)
    if run_id == source_id:
        raise UsageError(f"--reuse {source_id}: a run cannot reuse itself")
    expected = store.expected_pairs(run_id)
    changed = [name for name in IDENTITY_OPTIONS if run.options.get(name) != source.options.get(name)]
    if changed:  # nothing is comparable: every pair is evaluated (the line says why)
        return Reused(source_id, 0, 0, expected=len(expected),
                      why_none=f"{source_id} is not comparable (its {', '.join(changed)} differs)")
    new_catalog, old_catalog = store.load_snapshot(run.digest), store.load_snapshot(source.digest)
    same = {s.key for s in new_catalog.scenarios
            if s.key in old_catalog and scenario_digest(s) == scenario_digest(old_catalog.scenario(s.key))}
    there = store.pair_statuses(source_id)
    wanted = {pair for pair in expected if pair[0] in same and pair in there}
    n_changed = sum(
        1 for pair in expected if pair[0] in old_catalog and pair[0] not in same and pair in there
    )
    n_new = sum(1 for pair in expected if pair not in there)
    n_errored = sum(1 for pair in wanted if there[pair] == ERRORED)
    judge_of = _judge_of(run)
    copied = calls = 0
    for result in store.list_results(source_id):
        if result.ident not in wanted or result.status == ERRORED:
            continue
        judged_by = judge_model_of(result.details)
        if judged_by is not None and judged_by != judge_of(new_catalog.scenario(result.scenario_key)):
            n_changed += 1  # its judge changed (the providers file's judge_model): judged again
            continue
        origin = result.reused_from or source_id
        earlier = dict((result.details or {}).get("reused") or {}) if isinstance(result.details, dict) else {}
        saved = int(earlier.get("calls") or provider_calls(result))
        details = {**(result.details or {}), "reused": {"run": origin, "calls": saved,
                                                        "cost": earlier.get("cost", result.cost)}}
        # No call is made for a copy: it costs nothing, and no prompt cache saved anything on it.
        copy = replace(result, reused_from=origin, cost=0.0, cached=False, details=details,
                       cache_read_tokens=0, cache_write_tokens=0, cache_saving=0.0)
        if store.record_result(run_id, copy).inserted:
            copied += 1
            calls += saved
    return Reused(source_id, copied, calls, expected=len(expected), changed=n_changed, new=n_new,
                  errored=n_errored)


def _judge_of(run: store.RunInfo) -> Callable[[Scenario], str | None]:
    """The judge model (canonical spec) ``run`` judges a scenario with: its ``--judge-model``, else the
    scenario's, else its providers file's (what the judge records in each judged row)."""
    providers = stored_providers(run.options.get("providers"))
    found: dict[str, str | None] = {}

    def judge(scenario: Scenario) -> str | None:
        text = judge_model_for(scenario, run.options.get("judge_model"), providers)
        if text and text not in found:
            try:
                found[text] = parse_model_spec(text, providers).spec
            except ModelSpecError:
                found[text] = text
        return found.get(text) if text else None

    return judge


__all__ = ["IDENTITY_OPTIONS", "Reused", "latest_of", "nothing_to_reuse", "provider_calls", "reuse_into",
           "reuse_line", "source_of"]
