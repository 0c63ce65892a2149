"""Record a result and finish the run: the code every strategy shares.

``record`` is the barrier (one transaction in the store that inserts the pair
if absent and counts distinct persisted pairs); the call that completes the
run triggers ``on_complete`` — a ``finalize_run`` message for queued
strategies, a direct :func:`finalize` for in-process ones. Events go out only
after the commit they describe.
"""
from __future__ import annotations

from typing import Callable, Sequence

from evaljobs.pipeline import events, prefetch
from evaljobs import store, telemetry
from evaljobs.reports.build import build_report
from evaljobs.evaluation.result import Result


def record(run_id: str, result: Result, *, on_complete: Callable[[str], object]) -> store.Recorded:
    try:
        with telemetry.span("record_result", {"db.operation.name": "record_result"}):
            recorded = store.record_result(run_id, result)
    except store.StorageFailed as exc:
        # Not worth a retry (the disk stays full) and not silent: whoever waits on the run stops
        # with this one line; the pair stays missing, for `evaljobs recover` once space is freed.
        events.publish_storage_failed(run_id, str(exc))
        raise
    closed: BrokenPipeError | None = None
    if recorded.inserted:
        try:
            events.publish_result(run_id, result, recorded, prefetch.carried_releases())
        except BrokenPipeError as exc:  # an in-process listener's output was closed: the run stops, but
            closed = exc                # the pair is in, and a run it completed still gets its report
        _observed(result)
    if recorded.completed:
        events.flush_held()  # the run's last result is announced before its finalize is sent
        on_complete(run_id)
    if closed is not None:
        raise closed
    return recorded


def record_many(run_id: str, results: Sequence[Result], *,
                on_complete: Callable[[str], object]) -> list[store.Recorded]:
    """:func:`record` for several results of one run in one transaction (a group commit): each is
    still its own row, uniqueness check and count; events go out after the commit, one per row."""
    try:
        with telemetry.span("record_results", {"db.operation.name": "record_results",
                                               "db.operation.batch.size": len(results)}):
            recorded = store.record_results(run_id, results)
    except store.StorageFailed as exc:
        events.publish_storage_failed(run_id, str(exc))
        raise
    events.publish_results(run_id, [(result, outcome) for result, outcome in zip(results, recorded)
                                    if outcome.inserted], prefetch.carried_releases())
    for result, outcome in zip(results, recorded):
        if outcome.inserted:
            _observed(result)
    if any(outcome.completed for outcome in recorded):
        events.flush_held()
        on_complete(run_id)
    return recorded


def resume(run: store.RunInfo, *, on_complete: Callable[[str], object]) -> None:
    """Send a run's finalize again when a redelivered message finds its pair recorded and the run full.

    ``completed`` is true for exactly one commit per run, and the finalize goes out after it: a worker
    killed between that commit and its send leaves every pair in and no report. Its message comes back
    (never acknowledged), finds its pair recorded and would return — so whoever finds a run with every
    pair persisted but not finalized sends the finalize again (finalizing twice is harmless).
    """
    if run.status == "running" and run.expected and run.persisted >= run.expected:
        on_complete(run.id)


def _observed(result: Result) -> None:
    """Report a newly recorded pair to the process's observers (metrics), after its commit."""
    if telemetry.watched():
        telemetry.pair_recorded(
            telemetry.PairRecorded(result.model, result.status, result.duration_ms / 1000.0, result.cost)
        )


def finalize(run_id: str) -> store.Finalized | None:
    """Finalize (idempotent) and announce ``complete`` once the report is committed.

    Returns None when the run is not complete yet (recovery will finish it).
    """
    try:
        outcome = store.finalize(run_id, build_report)
    except store.Incomplete:
        return None
    except store.StorageFailed as exc:
        events.publish_storage_failed(run_id, str(exc))
        raise
    if outcome.created:
        events.publish_complete(run_id, outcome.report)
    return outcome
