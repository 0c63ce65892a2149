"""Incremental runs (``--reuse RUN|latest``): copy the unchanged pairs of an earlier run instead of evaluating them.

A team editing three scenarios of three hundred should pay for three. Before a
new run starts, each pair it expects — (scenario, model, epoch) — is copied from
the earlier run when all of these are unchanged:

* the scenario's canonical form (:func:`evaljobs.catalog.digest.scenario_digest`: prompt,
  tools, expectations, threshold, judge model … everything that defines it);
* the model spec (the exact ``provider/model[@label]`` string);
* the adapter (the run's ``adapter`` reference and its ``version``);
* the judge (``--judge-model``);
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

from evaljobs import store
from evaljobs.catalog.digest import scenario_digest
from evaljobs.errors import UsageError
from evaljobs.evaluation.result import ERRORED, Result

#: The run options that must be equal for a pair to be reused (with the scenario, model and epoch).
IDENTITY_OPTIONS = ("adapter", "adapter_version", "judge_model")


@dataclass(frozen=True)
class Reused:
    source: str
    pairs: int
    calls_saved: int


def provider_calls(result: Result) -> int:
    """The provider calls a result cost: its model turns, plus one judge call when it was judged."""
    details = result.details or {}
    turns = details.get("turns") if isinstance(details, dict) else None
    calls = int(turns) if isinstance(turns, int) and turns > 0 else 1
    return calls + (1 if "llm_judge" in (result.scores or {}) else 0)


def reuse_into(run_id: str, source_id: str) -> Reused:
    """Copy into the (created, not started) run ``run_id`` every pair of ``source_id`` that is unchanged."""
    run, source = store.get_run(run_id), store.get_run(source_id)
    if run_id == source_id:
        raise UsageError(f"--reuse {source_id}: a run cannot reuse itself")
    changed = [name for name in IDENTITY_OPTIONS if run.options.get(name) != source.options.get(name)]
    if changed:  # nothing is comparable: every pair is evaluated (say why, in the record)
        return Reused(source_id, 0, 0)
    new_catalog, old_catalog = store.load_snapshot(run.digest), store.load_snapshot(source.digest)
    same = {s.key for s in new_catalog.scenarios
            if s.key in old_catalog and scenario_digest(s) == scenario_digest(old_catalog.scenario(s.key))}
    wanted = {pair for pair in store.expected_pairs(run_id) if pair[0] in same and pair[1] in source.models}
    copied = calls = 0
    for result in store.list_results(source_id):
        if result.ident not in wanted or result.status == ERRORED:
            continue
        origin = result.reused_from or source_id
        earlier = dict((result.details or {}).get("reused") or {}) if isinstance(result.details, dict) else {}
        saved = int(earlier.get("calls") or provider_calls(result))
        details = {**(result.details or {}), "reused": {"run": origin, "calls": saved,
                                                        "cost": earlier.get("cost", result.cost)}}
        copy = replace(result, reused_from=origin, cost=0.0, cached=False, details=details)
        if store.record_result(run_id, copy).inserted:
            copied += 1
            calls += saved
    return Reused(source_id, copied, calls)


__all__ = ["reuse_into", "Reused", "provider_calls", "IDENTITY_OPTIONS"]
