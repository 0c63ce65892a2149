"""A stored run's report, as ``evaljobs report`` and :meth:`evaljobs.api.Session.report` give it.

The run is read from the store (its report, or a partial one built from its rows so far), rendered by
:mod:`evaljobs.reports`, and given what the reports package cannot read for itself: a baseline's
comparison, the reviewers' labels and the judges' agreement with them. Why here and not in
``reports/``: rendering a report is a pure function of its inputs (docs/internals.md), and reading the
store is the caller's; why not in the API: none of it needs a session.

The comparison, the reviewers' block, the agreement and the flaky list load on first use through the
reports face (:mod:`evaljobs.lazy`): ``evaljobs run`` renders a report and needs none of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence

from evaljobs import reports, store
from evaljobs.errors import UsageError
from evaljobs.outcomes import RenderedReport
from evaljobs.reports.build import build_report
from evaljobs.reports.render import FORMATS, render

if TYPE_CHECKING:
    from evaljobs.reports.compare import Comparison

#: What a note about a comparison is told to.
Note = Callable[[str], None]


def compare(baseline_id: str, run_id: str, *, on_note: Note | None = None) -> Comparison:
    """What changed from ``baseline_id`` to ``run_id`` (``latest``, ids or prefixes); see
    :meth:`evaljobs.api.Session.compare`."""
    base, base_side = _side(store.resolve_run_id(baseline_id))
    info, side = _side(store.resolve_run_id(run_id))
    return _compare(base, base_side, info, side, on_note)


def report(run_id: str, format: str = "md", *, baseline: str | None = None,
           on_note: Note | None = None) -> str:
    """The run's report rendered as ``format``, optionally against a ``baseline`` run id, with the
    reviewers' block and the judges' agreement with them when the run has labels."""
    if format not in FORMATS:
        raise UsageError(f"unknown report format {format!r}: use one of {', '.join(FORMATS)}")
    if baseline and format == "junit":
        raise UsageError("--baseline does not apply to --format junit: use md, html, table or json")
    info = store.get_run(run_id)
    # a run that did not finish (cancelled, interrupted, timed out, still running) gets a partial
    # report: what finished, what is missing, and the command that resumes it (never stored)
    built = info.report if info.report is not None else store.partial_report(run_id, build_report)
    comparison = None
    if baseline:
        base, base_side = _side(baseline)
        comparison = _compare(base, base_side, info, built, on_note)
    results = store.list_results(run_id) if format in ("junit", "html") else ()
    human = human_review(run_id) if format in ("md", "table", "json") else None
    agreement = agreement_of([run_id]) if human else None
    if human and format == "json":
        built = {**built, "human": human, "judge_agreement": agreement.to_dict()["agreements"]
                 if agreement else []}
    text = render(built, format, results=results, comparison=comparison)
    if human and format in ("md", "table"):
        text += reports.human.human_markdown(human)
        if agreement and agreement.agreements:
            text += "\n## Judge agreement with the reviewers\n\n" + agreement.render()
            text += "".join(f"\n{line}\n" for line in agreement.warnings)
    return text


def render_report(run_id: str, format: str = "md", *, baseline: str | None = None, flaky: bool = False,
                  on_note: Note | None = None, prefer_human: bool = False) -> RenderedReport:
    """``evaljobs report``: the report of ``run_id`` (``latest``, an id or a prefix) with the run to hold to
    a gate, or (``flaky``) its flaky scenarios; see :meth:`evaljobs.api.Session.render_report`."""
    if baseline and format == "junit":  # before anything is read
        raise UsageError("--baseline does not apply to --format junit: use md, html, table or json")
    run_id = store.resolve_run_id(run_id)
    baseline = store.resolve_run_id(baseline) if baseline else None
    info = store.get_run(run_id)
    if flaky:
        if info.report is None:
            raise UsageError(f"run {run_id} has no report yet ({info.status}): wait for it")
        return RenderedReport(text=reports.variance.flaky_text(info.report), run=info)
    return RenderedReport(text=report(run_id, format, baseline=baseline, on_note=on_note), run=info,
                          human=human_review(run_id) if prefer_human else None)


def human_review(run_id: str) -> dict[str, Any] | None:
    """The reviewers' labels of a run as the report's ``human`` block (None: nobody reviewed it):
    counts, disagreements with the machine, and the pass rate with the human verdicts preferred."""
    labels = store.labels_for_run(run_id)
    if not labels:
        return None
    return reports.human.human_review(store.list_results(run_id), {k: v.as_dict() for k, v in labels.items()},
                                      run_id)


def agreement_of(ids: Sequence[str], min_kappa: float | None = None) -> JudgeAgreement:
    """How far each judge model agrees with the reviewers over resolved run ids, on the store already
    connected (:func:`evaljobs.labels.judge_agreement` opens it)."""
    runs = list(dict.fromkeys(ids))
    agreement = reports.agreement
    items = [agreement.Judged(**item) for run_id in runs for item in store.judged_labels(run_id)]
    floor = agreement.MIN_KAPPA if min_kappa is None else min_kappa
    return JudgeAgreement(runs=runs, agreements=agreement.agreements(items, min_kappa=floor))


@dataclass
class JudgeAgreement:
    """What :func:`agreement_of` found: per judge model and rubric, an ``Agreement``."""

    runs: list[str]
    agreements: list[Any]

    @property
    def warnings(self) -> list[str]:
        return [w for a in self.agreements for w in a.warnings]

    def render(self) -> str:
        return reports.agreement.render_agreements(self.agreements)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "agreements": [a.to_dict() for a in self.agreements]}


def _side(run_id: str) -> tuple[store.RunInfo, Any]:
    """What a comparison reads for a run: its report when it has one, else its rows so far."""
    info = store.get_run(run_id)
    return info, (info.report if info.report is not None else store.list_results(run_id))


def _compare(base: store.RunInfo, base_side: Any, info: store.RunInfo, side: Any,
             on_note: Note | None) -> Comparison:
    if base.digest != info.digest and on_note is not None:
        on_note(f"{base.id} ran catalog {base.digest[:19]}, {info.id} ran {info.digest[:19]}; "
                "pairs are matched by scenario key and model")
    thresholds = {s.key: s.pass_threshold for s in store.load_snapshot(info.digest).scenarios}
    # rows stored before they carried their scenario's digest: their run's snapshot tells it
    return reports.compare.compare(base_side, side, run_a=base.id, run_b=info.id, thresholds=thresholds,
                                   digests_a=partial(store.verdict_digest_in, base.digest,
                                                     judges=store.run_judges(base.options)),
                                   digests_b=partial(store.verdict_digest_in, info.digest,
                                                     judges=store.run_judges(info.options)),
                                   order=info.scenario_order or base.scenario_order)


__all__ = ["JudgeAgreement", "agreement_of", "compare", "human_review", "render_report", "report"]
