"""Human review labels: a reviewer's pass/fail (and optional score and comment) on a pair, beside the
machine's verdict, never over it (issue 43).

A label is given on one pair of one run (run, scenario, model, epoch) and remembers the answer it judged:
the scenario's digest, the model and a digest of the normalised answer. A later run that gives the same
answer to the same scenario with the same model finds it as "reviewed in RUN", so nobody labels one answer
twice (:func:`labels_for_run`). Labels are plain dicts at the edges (:func:`export_labels`,
:func:`import_labels`): the JSONL a repository keeps beside its catalog.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, cast

from evaljobs.store.connections import _connection, _reconnecting, _transaction
from evaljobs.store.errors import StoreError, UnexpectedPair
from evaljobs.store.results import list_results
from evaljobs.store.runs import _get_row, get_run
from evaljobs.store.snapshots import load_snapshot
from evaljobs.store.schema import Label, ResultRow, Run, _datetime, _iso, _now

VERDICTS = ("pass", "fail")
#: What a label export line holds, in order.
FIELDS = ("run_id", "scenario_key", "model", "epoch", "scenario_digest", "output_digest", "verdict", "score",
          "comment", "reviewer", "created_at")
#: The longest comment and reviewer name kept (a label is a note, not a document).
MAX_COMMENT, MAX_REVIEWER = 4000, 80
_SPACE = re.compile(r"\s+")


class BadLabel(StoreError):
    """A label that cannot be kept (an unknown verdict, a score outside 0..1, a pair not in the run)."""


@dataclass(frozen=True)
class LabelInfo:
    """One label. ``run_id`` is the run it was given in: for a pair of a later run with the same answer
    it is the run the answer was "reviewed in"."""

    run_id: str
    scenario_key: str
    model: str
    epoch: int
    scenario_digest: str | None
    output_digest: str
    verdict: str
    score: float | None
    comment: str | None
    reviewer: str
    created_at: str | None

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def output_digest(output: str) -> str:
    """The answer's identity for carrying a label forward: sha256 of the text with its runs of
    whitespace made one space and its ends trimmed (a trailing newline is the same answer)."""
    return hashlib.sha256(_SPACE.sub(" ", output or "").strip().encode("utf-8")).hexdigest()


def _info(row: Label) -> LabelInfo:
    return LabelInfo(run_id=row.run_id, scenario_key=row.scenario_key, model=row.model, epoch=row.epoch,
                     scenario_digest=row.scenario_digest, output_digest=row.output_digest,
                     verdict=row.verdict, score=row.score, comment=row.comment, reviewer=row.reviewer,
                     created_at=_iso(_datetime(row.created_at)))


def _checked(verdict: str, score: Any, comment: str | None, reviewer: str) -> tuple[float | None, str | None,
                                                                                   str]:
    if verdict not in VERDICTS:
        raise BadLabel(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    value: float | None = None
    if score not in (None, ""):
        try:
            value = float(score)
        except (TypeError, ValueError):
            raise BadLabel(f"score {score!r} is not a number: give 0..1 or nothing") from None
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise BadLabel(f"score {score!r} is outside 0..1")
    text = (comment or "").strip()[:MAX_COMMENT] or None
    who = (reviewer or "").strip()[:MAX_REVIEWER]
    if not who:
        raise BadLabel("a label needs a reviewer name")
    return value, text, who


@_reconnecting
def record_label(run_id: str, scenario_key: str, model: str, epoch: int, *, verdict: str,
                 score: float | str | None = None, comment: str | None = None,
                 reviewer: str) -> LabelInfo:
    """Keep a reviewer's verdict on a pair of ``run_id`` (replacing their earlier one on that pair).

    The pair must have a result: the label remembers the answer it judged (its scenario digest and the
    digest of its normalised output), which is what carries it forward.
    """
    value, text, who = _checked(verdict, score, comment, reviewer)
    with _transaction():
        _get_row(run_id)
        row = (ResultRow.select(ResultRow.output, ResultRow.scenario_digest)
               .where((ResultRow.run == run_id) & (ResultRow.scenario_key == scenario_key)
                      & (ResultRow.model == model) & (ResultRow.epoch == int(epoch))).first())
        if row is None:
            raise UnexpectedPair(f"run {run_id} has no result for {scenario_key} × {model} epoch {epoch}")
        fields = dict(run_id=run_id, scenario_key=scenario_key, model=model, epoch=int(epoch),
                      scenario_digest=row.scenario_digest, output_digest=output_digest(row.output),
                      verdict=verdict, score=value, comment=text, reviewer=who, created_at=_now())
        _upsert(fields)
    return _info(Label(**fields))


def _upsert(fields: dict[str, Any]) -> None:
    (Label.insert(**fields)
     .on_conflict(conflict_target=[Label.run_id, Label.scenario_key, Label.model, Label.epoch],
                  preserve=[Label.scenario_digest, Label.output_digest, Label.verdict, Label.score,
                            Label.comment, Label.reviewer, Label.created_at])
     .as_rowcount().execute())


@_reconnecting
def labels_for_run(run_id: str) -> dict[tuple[str, str, int], LabelInfo]:
    """Each labelled pair of the run → its label: one given in this run, else the newest label of the same
    answer (scenario digest, model, normalised output) given in another run ("reviewed in RUN")."""
    with _connection():
        _get_row(run_id)
        if not Label.select(Label.id).limit(1).exists():  # a database nobody reviewed in: no reading answers
            return {}
        own = {(r.scenario_key, r.model, r.epoch): _info(r)
               for r in Label.select().where(Label.run_id == run_id)}
        query = (ResultRow.select(ResultRow.scenario_key, ResultRow.model, ResultRow.epoch,
                                  ResultRow.scenario_digest, ResultRow.output)
                 .where(ResultRow.run == run_id).tuples())
        rows = cast("list[tuple[str, str, int, str | None, str]]", list(query))
        wanted: dict[tuple[str, str, str], list[tuple[str, str, int]]] = {}
        for key, model, epoch, digest, output in rows:
            if (key, model, epoch) not in own and digest:
                wanted.setdefault((digest, model, output_digest(output)), []).append((key, model, epoch))
        found: dict[tuple[str, str, str], LabelInfo] = {}
        digests = sorted({d for d, _, _ in wanted})
        for start in range(0, len(digests), 200):  # bounded IN lists; the index serves each
            chunk = digests[start:start + 200]
            others = (Label.select().where(Label.scenario_digest.in_(chunk) & (Label.run_id != run_id))
                      .order_by(Label.created_at))
            for label in others:
                ident = (label.scenario_digest, label.model, label.output_digest)
                if ident in wanted:
                    found[ident] = _info(label)  # ordered by time: the newest wins
    carried = {pair: found[ident] for ident, pairs in wanted.items() if ident in found for pair in pairs}
    return {**carried, **own}


@_reconnecting
def labelled_runs() -> list[str]:
    """The runs (still in the database) that labels were given in, oldest first."""
    with _connection():
        ids = {row.run_id for row in Label.select(Label.run_id).distinct()}
        return [row.id for row in Run.select(Run.id).where(Run.id.in_(sorted(ids))).order_by(Run.created_at)]


def judged_labels(run_id: str) -> list[dict[str, Any]]:
    """The run's results that a judge scored and a reviewer labelled, as the fields of
    ``reports.agreement.Judged``; the rubric is the scenario's, from the run's catalog snapshot."""
    labels = labels_for_run(run_id)
    if not labels:
        return []
    info = get_run(run_id)
    rubrics = {s.key: s.expect.judge for s in load_snapshot(info.digest).scenarios}
    items = []
    for r in list_results(run_id):
        judge, label = r.details.get("judge"), labels.get(r.ident)
        if label is None or not isinstance(judge, dict) or not isinstance(judge.get("passed"), bool):
            continue
        score, threshold = judge.get("score"), judge.get("threshold")
        items.append(dict(judge_model=str(judge.get("model") or "?"),
                            rubric=rubrics.get(r.scenario_key) or "(rubric not in the snapshot)",
                            score=float(score) if isinstance(score, (int, float)) else None,
                            threshold=float(threshold) if isinstance(threshold, (int, float)) else None,
                            judge_passed=judge["passed"], human_passed=label.passed,
                            gate=bool(judge.get("gate", True))))
    return items


@_reconnecting
def export_labels(run_ids: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Every label (or those given in ``run_ids``) as plain dicts (``FIELDS``), oldest first."""
    ids = list(run_ids)
    query = Label.select().order_by(Label.created_at, Label.id)
    if ids:
        query = query.where(Label.run_id.in_(ids))
    with _connection():
        return [_info(row).as_dict() for row in query]


@_reconnecting
def import_labels(items: Iterable[tuple[str, dict[str, Any]]]) -> int:
    """Keep labels read from an export: ``(where, dict)`` pairs, ``where`` naming the line for an error.

    A label's run need not exist here (labels travel between databases: they carry forward by the
    answer's digest). A label for the same pair replaces the one kept. Returns how many were kept.
    """
    rows = []
    for where, item in items:
        try:
            missing = [f for f in ("run_id", "scenario_key", "model", "output_digest", "verdict", "reviewer")
                       if not isinstance(item.get(f), str) or not item.get(f)]
            if missing:
                raise BadLabel(f"missing {', '.join(missing)}")
            score, comment, reviewer = _checked(item["verdict"], item.get("score"), item.get("comment"),
                                                item["reviewer"])
            epoch = item.get("epoch", 0)
            if not isinstance(epoch, int) or epoch < 0:
                raise BadLabel(f"epoch {epoch!r} is not a whole number ≥ 0")
            created = _datetime(item["created_at"]) if item.get("created_at") else None
        except (BadLabel, ValueError, TypeError) as exc:
            raise BadLabel(f"{where}: {exc}: fix the line or export it again") from None
        rows.append(dict(run_id=item["run_id"][:32], scenario_key=item["scenario_key"], model=item["model"],
                         epoch=epoch, scenario_digest=item.get("scenario_digest") or None,
                         output_digest=item["output_digest"], verdict=item["verdict"], score=score,
                         comment=comment, reviewer=reviewer,
                         created_at=(created.replace(tzinfo=None) if created else _now())))
    with _transaction():
        for fields in rows:
            _upsert(fields)
    return len(rows)


__all__ = ["VERDICTS", "FIELDS", "BadLabel", "LabelInfo", "output_digest", "record_label", "labels_for_run",
           "labelled_runs", "judged_labels", "export_labels", "import_labels"]
