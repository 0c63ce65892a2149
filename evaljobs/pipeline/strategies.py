"""Scheduling strategies. All share ``evaluate`` + ``record`` + ``finalize``.

- ``sequential``: an in-process loop, no queue (tests, hosts that want it).
- ``threads``: a bounded in-process thread pool of ``width`` (the comparison shape).
- ``fanout`` (default): one Dramatiq message per (scenario × model × epoch).
- ``per-model``: one Dramatiq message per model, scenarios in order within it.

The in-process strategies run here; the queued ones are driven by actors
(:mod:`evaljobs.pipeline.actors`) once ``start_run`` is sent.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from evaljobs import store
from evaljobs.capacity import thread_start_failed
from evaljobs.evaluation.result import Result
from evaljobs.pipeline import barrier
from evaljobs.pipeline.pairs import GiveUp, Pair, PairState, Parked, Recorded, Retry, RunPlan, attempt

from evaljobs.pipeline.strategy_names import DEFAULT_STRATEGY, QUEUED, STRATEGIES  # noqa: F401 - re-exported


def settle(pair: Pair) -> Result:
    """Attempt ``pair`` until it ends, in place: the in-process mapping of the pair runner's outcomes.

    There is no queue to hand the pair back to, so a hand-back or a retry is a sleep on this
    thread, never past the pair's deadline (:func:`evaljobs.pipeline.pairs.attempt` decides which,
    and for how long). The time limit covers the whole pair, retries and waits included.
    """
    state = PairState(in_place=True)
    while True:
        outcome = attempt(pair, state)
        if isinstance(outcome, (Recorded, GiveUp)):
            return outcome.result
        assert not isinstance(outcome, Parked)  # only a batch run parks a pair, and it needs fanout
        wait = outcome.backoff if isinstance(outcome, Retry) else outcome.delay
        left = state.left()
        time.sleep(wait if left is None else min(wait, left))


def run_inline(run_id: str, *, width: int = 1, context_providers: Sequence = ()) -> store.RunInfo:
    """Drive a ``sequential`` or ``threads`` run to completion in this process."""
    run = store.get_run(run_id)
    RunPlan.for_run(run_id, run)  # the snapshot is known before the run is marked running
    store.mark_running(run_id)

    def one(pair: tuple[str, str, int]) -> None:
        barrier.record(run_id, settle(Pair(run_id, *pair)), on_complete=barrier.finalize)

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
            except (store.StorageFailed, KeyboardInterrupt, BrokenPipeError):
                # a full disk: the rest would fail the same way; SIGINT/SIGTERM, or the output was closed
                # (a listener of the run's events, `| head`): take no new pair
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            except RuntimeError as exc:
                if "can't start new thread" not in str(exc):
                    raise
                pool.shutdown(wait=True, cancel_futures=True)  # what started finishes; one line says why
                raise thread_start_failed(width, exc) from None
    else:
        with store.holding():
            for pair in pairs:
                one(pair)
    if not pairs:
        barrier.finalize(run_id)
    return store.get_run(run_id)
