"""The partial report of a run that did not finish (cancelled, interrupted, timed out, still running).

Invariant 3 holds: a run's one report is the one ``finalize`` stores once every pair is in. A partial
report is a *view*: built on each read from the rows persisted so far, never stored, so when the run is
resumed (``evaljobs recover RUN``) and completes, its stored report is simply the one report there is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evaljobs.store.connections import _connection, _reconnecting
from evaljobs.store.results import ReportBuilder, _missing, _report_results, _report_run
from evaljobs.store.runs import _get_row, pair_label
from evaljobs.store.schema import CANCELLED, INTERRUPTED, _loads, _now


#: The statuses of a run that stopped before its report (the viewer marks its page partial).
STOPPED_STATUSES = (CANCELLED, INTERRUPTED)


def resume_command(run_id: str) -> str:
    """The command that resumes ``run_id`` (the same run goes on; ``rerun`` and ``--reuse`` start another)."""
    return f"evaljobs recover {run_id}"


@dataclass(frozen=True)
class Unfinished:
    """What a stopped run lacks, as the viewer shows it: the first ``missing`` pairs (labels), how many
    there are in all, and the command that resumes it."""

    status: str
    finished: int
    expected: int
    missing: list[str]
    missing_count: int
    resume: str


@_reconnecting
def unfinished(run_id: str, limit: int = 50) -> Unfinished | None:
    """What ``run_id`` still lacks when it stopped (cancelled or interrupted) before its report; None for a
    run that finished or still goes on."""
    with _connection():
        run = _get_row(run_id)
        if run.status not in STOPPED_STATUSES or run.report is not None:
            return None
        missing = _missing(run)
    epochs = run.epochs or 1
    return Unfinished(run.status, run.expected - len(missing), run.expected,
                      [pair_label(*pair, epochs=epochs) for pair in missing[:limit]], len(missing),
                      resume_command(run.id))


@_reconnecting
def partial_report(run_id: str, build: ReportBuilder) -> dict[str, Any]:
    """The report of what ``run_id`` has so far, marked ``partial``: its status, the missing pairs and the
    command that resumes the run. Nothing is written."""
    with _connection():
        run = _get_row(run_id)
        results = _report_results(run_id, batched=bool((_loads(run.options) or {}).get("batch")))
        missing = _missing(run)
        built = build({**_report_run(run, run.finished_at or _now()), "finished_at": None}, results)
    epochs = run.epochs or 1
    built["partial"] = {
        "status": run.status,
        "finished": len(results),
        "expected": run.expected,
        "missing": [pair_label(*pair, epochs=epochs) for pair in missing],
        # the same pairs for machines (JUnit lists each as a test case that did not finish)
        "missing_pairs": [{"scenario_key": key, "model": model, "epoch": epoch}
                          for key, model, epoch in missing],
        "resume": resume_command(run.id),
    }
    return built


__all__ = ["STOPPED_STATUSES", "Unfinished", "partial_report", "resume_command", "unfinished"]
