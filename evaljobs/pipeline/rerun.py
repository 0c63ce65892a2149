"""Reruns: a NEW run over chosen pairs of an earlier run (its errored, failed, or all pairs).

The original run is never touched: its results and its one report stay as
they were. The new run grades against the same catalog snapshot (by digest,
whatever happened to the YAML since), with the models that have a chosen
pair, and the original's host context, options and strategy. It expects
exactly the chosen pairs (:func:`evaljobs.store.create_run` with ``pairs``),
so the barrier, ``missing_pairs``, recovery and finalize treat it like any
other run. (To finish the *same* run's missing pairs, use ``evaljobs recover``.)
"""
from __future__ import annotations

from evaljobs.errors import UsageError
from contextlib import contextmanager
from typing import Iterable, Iterator, Sequence

from evaljobs import store
from evaljobs.pipeline import batch_choice, runtime
from evaljobs.evaluation.result import ERRORED, FAILED
from evaljobs.pipeline.strategies import QUEUED, run_inline

#: What a rerun can select: pairs whose result has this status, or every pair the run expected.
SELECTIONS = (ERRORED, FAILED, "all")


class RerunError(UsageError):
    """A rerun that cannot be made (one line naming the run and the reason)."""


def select_pairs(run_id: str, which: Iterable[str]) -> list[tuple[str, str, int]]:
    """The (scenario, model, epoch) pairs of ``run_id`` to run again, in catalog order.

    Per epoch: a rerun of the errored pairs of an ``--epochs`` run reruns the errored epochs only.

    ``which`` holds ``"errored"`` and/or ``"failed"`` (pairs whose persisted result has
    that status), or ``"all"`` (every pair the run expected, persisted or not).
    """
    which = set(which)
    unknown = which - set(SELECTIONS)
    if not which or unknown:
        raise RerunError("choose what to rerun: --errored, --failed or --all "
                         f"(not {sorted(unknown) or 'nothing'})")
    expected = store.expected_pairs(run_id)
    if "all" in which:
        return expected
    statuses = store.pair_statuses(run_id)
    return [pair for pair in expected if statuses.get(pair) in which]


def create_rerun(run_id: str, which: Iterable[str], *, batch: bool | None = None,
                 providers: dict | None = None) -> store.RunInfo:
    """Create (do not start) the new run over the selected pairs of ``run_id``.

    ``batch`` (``rerun --batch``/``--no-batch``): True makes it a batch run (its models' providers with
    a batch API; the judge's calls too when the original batched them), False an interactive one;
    None keeps the original's choice. Pairs that errored ``batch_expired`` can so be taken again either way.
    ``providers`` (``rerun --providers FILE``): the new run travels with that definition, not the original's.
    """
    which = sorted(set(which))
    original = store.get_run(run_id)
    pairs = select_pairs(run_id, which)
    if not pairs:
        what = " or ".join(which)
        raise RerunError(f"run {run_id} has no {what} pairs ({original.persisted}/{original.expected} "
                         f"persisted, status {original.status}): nothing to rerun")
    catalog = store.load_snapshot(original.digest)
    models = [m for m in original.models if any(model == m for _, model, _ in pairs)]
    options = dict(original.options)
    options["rerun_of"] = original.id
    options["rerun"] = "+".join(which)
    if batch is False:
        options.pop("batch", None)
        options.pop("batch_judge", None)
    elif batch and not options.get("batch"):
        options["batch"] = list(batch_choice.choose(
            runtime.providers(), models, True, original.strategy,
            plain=not (options.get("adapter") or options.get("cache"))))
        options.pop("pairs_per_message", None)  # a batch run's pairs go one a message
    if providers is not None:  # `rerun --providers FILE`: the new run travels with that file
        options["providers"] = providers
    return store.create_run(catalog, models, strategy=original.strategy, context=original.context,
                            options=options, pairs=pairs, epochs=original.epochs,
                            order=original.scenario_order)


def start(run: store.RunInfo, *, binding=None, width: int = 8,
          context_providers: Sequence = ()) -> store.RunInfo:
    """Start ``run`` the way ``Session.submit`` does for its strategy, with the run's stored context.

    Queued strategies (``fanout``, ``per-model``) need ``binding`` (from
    :func:`evaljobs.pipeline.broker.configure`): ``start_run`` is enqueued with the run's
    context attached explicitly, so the rerun carries the original host context
    whatever this process's own context is. In-process strategies run to
    completion here with that context restored.
    """
    if run.strategy in QUEUED:
        if binding is None:
            raise RerunError(f"run {run.id} uses the {run.strategy} strategy: it needs a broker")
        message = binding.actors.start_run.message(run.id)
        if run.context:
            for middleware in binding.broker.middleware:
                attach = getattr(middleware, "attach", None)
                if attach is not None:
                    attach(message, run.context)
        binding.broker.enqueue(message)
        return store.get_run(run.id)
    with _restored(run.context, context_providers):
        return run_inline(run.id, width=width, context_providers=context_providers)


@contextmanager
def _restored(context: dict | None, providers: Sequence) -> Iterator[None]:
    """The run's host context in this thread while it runs in-process, cleared afterwards."""
    tokens = []
    try:
        for provider in providers:
            if context and provider.name in context:
                tokens.append((provider, provider.restore(context[provider.name])))
        yield
    finally:
        for provider, token in reversed(tokens):
            provider.clear(token)


def rerun(run_id: str, which: Iterable[str], *, binding=None, width: int = 8,
          context_providers: Sequence = ()) -> store.RunInfo:
    """Create the rerun of ``run_id``'s selected pairs and start it; returns the new run."""
    return start(create_rerun(run_id, which), binding=binding, width=width,
                 context_providers=context_providers)


__all__ = ["rerun", "create_rerun", "select_pairs", "start", "RerunError", "SELECTIONS"]
