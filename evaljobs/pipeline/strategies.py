"""Scheduling strategies. All share ``evaluate`` + ``record`` + ``finalize``.

- ``sequential``: an in-process loop, no queue (tests, hosts that want it).
- ``threads``: a bounded in-process thread pool of ``width`` (the comparison shape).
- ``fanout`` (default): one Dramatiq message per (scenario × model × epoch).
- ``per-model``: one Dramatiq message per model, scenarios in order within it.

The in-process strategies run here; the queued ones are driven by actors
(:mod:`evaljobs.pipeline.actors`) once ``start_run`` is sent.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from evaljobs.pipeline import barrier, runtime
from evaljobs import store
from evaljobs.evaluation.evaluate import evaluate_with_retries
from evaljobs.evaluation.judge import bind_judge

STRATEGIES = ("sequential", "threads", "fanout", "per-model")
QUEUED = ("fanout", "per-model")
DEFAULT_STRATEGY = "fanout"


def run_inline(run_id: str, *, width: int = 1, context_providers: Sequence = ()) -> store.RunInfo:
    """Drive a ``sequential`` or ``threads`` run to completion in this process."""
    run = store.get_run(run_id)
    catalog = store.load_snapshot(run.digest)
    store.mark_running(run_id)
    settings = runtime.RunSettings.from_options(run.options)
    policy = runtime.policy(settings)
    adapter = runtime.adapter(settings.adapter, cache=bool(settings.cache))
    allow = None
    if settings.judge_cap is not None:
        cap = settings.judge_cap
        allow = lambda: store.take_judge_call(run_id, cap)  # noqa: E731
    judge = runtime.judge_for(settings, allow)

    def one(pair: tuple[str, str, int]) -> None:
        runtime.set_permit_wait(60.0)  # no queue to hand a pair back to: wait in-process for a permit
        key, model, epoch = pair
        spec = runtime.model_spec(model)
        result = evaluate_with_retries(catalog.scenario(key), spec, adapter, policy=policy,
                                       judge=bind_judge(judge, spec), epoch=epoch,
                                       cache_across_epochs=bool(settings.cache_across_epochs))
        barrier.record(run_id, result, on_complete=barrier.finalize)

    pairs = store.missing_pairs(run_id)
    if run.strategy == "threads" and width > 1:
        context = run.context or {}

        def in_context(pair: tuple[str, str, int]) -> None:
            # Pool threads do not inherit the caller's thread-locals: restore the run's context.
            tokens = [(p, p.restore(context[p.name])) for p in context_providers if p.name in context]
            try:
                one(pair)
            finally:
                for provider, token in reversed(tokens):
                    provider.clear(token)

        # SQLite: each thread keeps one connection, as a worker thread does (closed as the thread ends).
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="evaljobs",
                                initializer=store.hold_connection) as pool:
            try:
                for _ in pool.map(in_context, pairs):
                    pass
            except store.StorageFailed:
                pool.shutdown(wait=True, cancel_futures=True)  # the rest would fail the same way
                raise
    else:
        with store.holding():
            for pair in pairs:
                one(pair)
    if not pairs:
        barrier.finalize(run_id)
    return store.get_run(run_id)
