"""The review page and the one write the viewer takes: a reviewer's label on a pair (issue 43).

``/runs/RUN/review`` lists the run's pairs as a queue, the ones worth a human look first: the judge and
the other criteria disagree, the epochs of the pair disagree (flaky), the judge's score sat near its
threshold, the pair failed and nobody has labelled it. Every pair shows its label when it has one — given
in this run, or carried forward from another run that gave the same answer ("reviewed in RUN").

``POST /runs/RUN/labels`` keeps a label. The guard (:mod:`evaljobs.view.app`) lets a POST through only for
a session holding the write token, with its CSRF token and no foreign origin; this handler checks the
body (JSON, bounded) and the pair, and answers in JSON.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse

from evaljobs import store
from evaljobs.catalog.criteria import judged_names
from evaljobs.errors import UsageError
from evaljobs.evaluation.result import PASSED, Result
from evaljobs.reports.agreement import Agreement, Judged, agreements
from evaljobs.view.config import ViewConfig

#: The largest label body taken (a comment is capped at store.labels.MAX_COMMENT characters anyway).
MAX_BODY = 32_768
#: How near its threshold a judge's score counts as a low-confidence verdict.
NEAR_THRESHOLD = 0.15
#: The most pairs one review page lists (the queue's head: the rest wait for the next page load).
QUEUE_LIMIT = 500
#: Why a pair is in the queue, most worth a look first.
REASONS = ("judge and criteria disagree", "flaky epochs", "judge unsure", "unlabelled failure")


@dataclass
class ReviewItem:
    result: Result
    label: Any  # store.LabelInfo | None
    reasons: list[str] = field(default_factory=list)
    judge_score: float | None = None

    @property
    def machine(self) -> str:
        return "pass" if self.result.status == PASSED else "fail"

    @property
    def carried(self) -> bool:
        return self.label is not None and self.label.run_id != self.run_id

    run_id: str = ""


@dataclass
class ReviewPage:
    run: Any
    items: list[ReviewItem]
    total: int
    labelled: int
    disagree: int
    #: How far each judge agrees with this run's labels, per rubric (``evaljobs judge-agreement``).
    agreements: list[Agreement] = field(default_factory=list)


def _judge(r: Result) -> dict[str, Any] | None:
    judge = r.details.get("judge") if isinstance(r.details, dict) else None
    return judge if isinstance(judge, dict) else None


def reasons_of(r: Result, epochs: list[Result]) -> list[str]:
    """Why ``r`` is worth a human look (``REASONS``), given every epoch of its pair."""
    found = []
    judge = _judge(r)
    judged = judged_names()
    others = {k: v for k, v in (r.scores or {}).items() if k not in judged}
    if judge and isinstance(judge.get("passed"), bool) and others:
        if judge["passed"] != all(v >= 1.0 for v in others.values()):
            found.append(REASONS[0])
    if len({e.status for e in epochs}) > 1:
        found.append(REASONS[1])
    score, threshold = (judge.get("score"), judge.get("threshold")) if judge else (None, None)
    if isinstance(score, (int, float)) and isinstance(threshold, (int, float)):
        if abs(float(score) - float(threshold)) <= NEAR_THRESHOLD:
            found.append(REASONS[2])
    if r.status != PASSED:
        found.append(REASONS[3])
    return found


def review_page(run_id: str) -> ReviewPage:
    """The run's pairs, those worth a look and not yet labelled first (in the catalog's order within)."""
    info = store.get_run(run_id)
    results = store.list_results(run_id)
    labels = store.labels_for_run(run_id)
    order = {key: i for i, key in enumerate(info.scenario_order or [])}
    by_pair: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        by_pair.setdefault(r.pair, []).append(r)
    items = []
    for r in results:
        judge = _judge(r)
        score = judge.get("score") if judge else None
        items.append(ReviewItem(result=r, label=labels.get(r.ident), reasons=reasons_of(r, by_pair[r.pair]),
                                judge_score=score if isinstance(score, (int, float)) else None,
                                run_id=run_id))

    def rank(item: ReviewItem) -> tuple[int, int, int, str, str, int]:
        first = min((REASONS.index(x) for x in item.reasons), default=len(REASONS))
        r = item.result
        return (item.label is not None, first, order.get(r.scenario_key, len(order)), r.scenario_key, r.model,
                r.epoch)

    items.sort(key=rank)
    labelled = [i for i in items if i.label is not None]
    judged = [Judged(**item) for item in store.judged_labels(run_id)] if labelled else []
    return ReviewPage(run=info, items=items[:QUEUE_LIMIT], total=len(items), labelled=len(labelled),
                      disagree=sum(1 for i in labelled if i.label.verdict != i.machine),
                      agreements=agreements(judged))


def _keep(config: ViewConfig, run_id: str, body: dict[str, Any]) -> Any:
    store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
    key, model, epoch = body.get("scenario_key"), body.get("model"), body.get("epoch", 0)
    if not isinstance(key, str) or not isinstance(model, str) or not isinstance(epoch, int):
        raise store.BadLabel("a label needs scenario_key and model (text) and epoch (a whole number)")
    reviewer = str(body.get("reviewer") or "")
    comment = body.get("comment") if isinstance(body.get("comment"), str) else None
    return store.record_label(store.resolve_run_id(run_id), key, model, epoch,
                              verdict=str(body.get("verdict")), score=body.get("score"), comment=comment,
                              reviewer=reviewer.strip() or config.reviewer)


class Review:
    """The review page (GET) and the label write (POST) of one viewer."""

    def __init__(self, config: ViewConfig, render):
        self.config = config
        self.render = render

    def page(self, request: Request) -> HTMLResponse:
        store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
        try:
            run_id = store.resolve_run_id(request.path_params["run_id"])
            page = review_page(run_id)
        except (store.UnknownRun, UsageError) as exc:
            raise HTTPException(404, str(exc)) from None
        return self.render(request, "review.html", p=page, reasons=REASONS,
                           can_write=bool(getattr(request.state, "can_write", False)),
                           read_only=self.config.read_only)

    async def label(self, request: Request) -> JSONResponse:
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return JSONResponse({"error": "send the label as application/json"}, status_code=415)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return JSONResponse({"error": f"a label is at most {MAX_BODY} bytes"}, status_code=413)
        try:
            data = json.loads(body or b"null")
        except ValueError:
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        if not isinstance(data, dict):
            return JSONResponse({"error": "the body is not a JSON object"}, status_code=400)
        try:
            info = await run_in_threadpool(_keep, self.config, request.path_params["run_id"], data)
        except store.UnknownRun as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        except (store.BadLabel, store.UnexpectedPair, UsageError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        response = JSONResponse(info.as_dict())
        response.headers["cache-control"] = "no-store"
        return response


__all__ = ["REASONS", "ReviewItem", "ReviewPage", "Review", "reasons_of", "review_page"]
