"""What the :class:`evaljobs.api.Session` methods return: a recovery, a run's detail, a cancellation, a
rendered report (with its gate), a demo run; a rerun's selection checked and a finished run rendered.

Re-exported by :mod:`evaljobs.api`, where hosts and the CLI import them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from evaljobs import reports, store
from evaljobs.errors import UsageError
from evaljobs.evaluation.result import Result
from evaljobs.reports.gate import Verdict
from evaljobs.reports.render import render


@dataclass
class Recovery:
    """What :meth:`Session.recover` did: one line per action, and the runs it touched (as they are now)."""

    actions: list[str] = field(default_factory=list)
    runs: list[store.RunInfo] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``recover --json`` prints: the actions, and each touched run's state."""
        return {"actions": self.actions,
                "runs": [{"id": info.id, "status": info.status, "persisted": info.persisted,
                          "expected": info.expected, "report": info.report is not None}
                         for info in self.runs]}


@dataclass
class RunDetail:
    """What :meth:`Session.show` read: the run, each of its results, and the pairs with none yet."""

    run: store.RunInfo
    results: list[Result] = field(default_factory=list)
    #: (scenario, model, epoch) of each pair with no persisted result.
    missing: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass
class Cancellation:
    """What :meth:`Session.cancel` did: the run as it is now, and how many provider batches were asked
    to cancel."""

    run: store.RunInfo
    batches: int = 0


@dataclass
class RenderedReport:
    """What :meth:`Session.render_report` made: the text, and the run it is the report of."""

    text: str
    run: store.RunInfo
    #: With ``prefer_human``: the reviewers' labels (:func:`evaljobs.labels.human_review`), None when
    #: nobody reviewed.
    human: dict[str, Any] | None = None

    def verdict(self, threshold: float | None = None, mode: str = "point") -> Verdict:
        """The exit of ``evaljobs report``: a gate only when given a ``threshold``
        (:meth:`RunInfo.gate` then decides); without one, rendering is all it does. With
        ``prefer_human`` and reviewed results, the pass rate holds each one's human verdict instead."""
        if threshold is None:
            return Verdict(True)
        machine = self.run.gate(threshold, mode)
        # a run with nothing to hold (interrupted, all errored, no report) and --gate ci keep the machine's
        if self.human is None or mode != "point" or self.run.report is None or self.run.status == "failed":
            return machine
        return reports.human.hold_preferring_human(self.human, threshold)


@dataclass
class DemoRun:
    """What :meth:`Session.demo` made: the finished run, its report text and where its HTML was written."""

    run: store.RunInfo
    text: str
    html_path: Path


def rerun_selection(which: Sequence[str]) -> list[str]:
    """``which`` checked as a rerun's selection: at least one of ``errored``/``failed``, or ``all`` alone."""
    chosen = list(dict.fromkeys(which))
    if not chosen:
        raise UsageError("say what to rerun: --errored, --failed (both may be given) or --all")
    if "all" in chosen and len(chosen) > 1:
        raise UsageError("--all already includes every pair: give it alone")
    return chosen


def render_run(info: store.RunInfo, format: str = "table") -> str:
    """A finished run's report as ``format`` (``table`` or ``json``: what ``run``, ``rerun`` and
    ``watch`` print), from its stored report alone; :meth:`Session.report` renders every format."""
    if info.report is None:
        raise UsageError(f"run {info.id} has no report yet ({info.status})")
    return render(info.report, format)

