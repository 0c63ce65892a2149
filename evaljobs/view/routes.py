"""The viewer's pages: request parameters in, a template out (the data comes from :mod:`.queries`).

Handlers are plain functions, so Starlette runs them in its thread pool: the store's
reads are synchronous and short, and the event loop stays free for the live streams.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.templating import Jinja2Templates

from evaljobs import store
from evaljobs.reports import cache_note, signed_money
from evaljobs.store import pages as store_pages
from evaljobs.view import charts, queries, search
from evaljobs.view.config import HERE, ViewConfig
from evaljobs.view.exports import csv_text, jsonl_text
from evaljobs.view.live import fleet_status
from evaljobs.view.markdown import render as markdown
from evaljobs.view.transcript import diff_page, transcript_page


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def _money(value: float | None) -> str:
    if value is None:
        return "unknown"  # an unknown price is never shown as $0 or as a blank
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def _cost_of(block: Any) -> str:
    """A model row's, run's or run list item's cost as the reports say it: ``$X``, ``≥ $X (N unknown)``,
    ``unknown``."""
    cost, unknown, total = block.cost, getattr(block, "cost_unknown", 0), getattr(block, "results", None)
    if cost is None or (unknown and total is not None and unknown >= total):
        return "unknown"
    return f"≥ {_money(cost)} ({unknown} unknown)" if unknown else _money(cost)


def _ms(value: int | float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{int(value)} ms"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "–"


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 90:
        return f"{value:.1f} s"
    if value < 5400:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def environment() -> Environment:
    """The templates' Jinja environment: autoescaping on for every template, whatever its name."""
    env = Environment(
        loader=FileSystemLoader(str(HERE / "templates")),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        pct=_pct,
        money=_money,
        cost_of=_cost_of,
        signed_money=signed_money,
        cache_note=lambda block: cache_note(block, lead=""),
        ms=_ms,
        when=_when,
        seconds=_seconds,
        pretty=_pretty,
        first_line=queries.first_line,
        markdown=markdown,
    )
    return env


def _date(request: Request, name: str) -> datetime | None:
    text = request.query_params.get(name) or ""
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        raise HTTPException(400, f"{name}={text!r} is not a date: use YYYY-MM-DD") from None


def _int(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise HTTPException(400, f"{name}={text!r} is not a number") from None


class Pages:
    def __init__(self, config: ViewConfig):
        self.config = config
        self.templates = Jinja2Templates(env=environment())

    def _render(self, request: Request, name: str, code: int = 200, **context: Any) -> HTMLResponse:
        response = self.templates.TemplateResponse(request, name, context, status_code=code)
        response.headers["cache-control"] = "no-store"
        return response

    def not_found(self, request: Request, exc: Exception) -> HTMLResponse | PlainTextResponse:
        status = getattr(exc, "status_code", 404)
        detail = getattr(exc, "detail", None) or "not found"
        return self._render(request, "error.html", code=status, message=detail)

    def runs(self, request: Request) -> HTMLResponse:
        store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
        statuses = [s for s in request.query_params.getlist("status") if s]
        bad = [s for s in statuses if s not in store.RUN_STATUSES]
        if bad:
            raise HTTPException(400, f"status={bad[0]!r} is not one of {', '.join(store.RUN_STATUSES)}")
        since, until = _date(request, "since"), _date(request, "until")
        until_next = until + timedelta(days=1) if until else None
        catalog = request.query_params.get("catalog") or ""
        model = request.query_params.get("model") or ""
        items = queries.run_list(
            statuses=statuses, catalog=catalog, model=model, since=since, until=until_next
        )
        return self._render(request, "runs.html", items=items, statuses=store.RUN_STATUSES, chosen=statuses,
                            catalogs=queries.store_pages.catalogs(), catalog=catalog, model=model,
                            since=request.query_params.get("since") or "",
                            until=request.query_params.get("until") or "",
                            running=[i.run.id for i in items if i.run.status not in store.FINISHED_STATUSES])

    def run(self, request: Request) -> HTMLResponse:
        store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
        p = request.query_params
        sort = p.get("sort") or "catalog"  # as the catalog lists its scenarios
        try:
            page = queries.run_page(
                request.path_params["run_id"],
                statuses=p.getlist("status"),
                fault=p.get("fault") or None,
                model=p.get("model") or None,
                tag=p.get("tag") or None,
                group=p.get("group") or None,
                q=p.get("q") or None,
                sort=sort,
                descending=p.get("dir") == "desc",
                page=_int(request, "page", 1),
                regex=p.get("regex") == "1",
                differ=p.get("differ") == "1",
            )
        except queries.NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        except search.BadPattern as exc:
            raise HTTPException(400, str(exc)) from None
        params = [(k, v) for k, v in p.multi_items() if k not in ("page", "sort", "dir") and v]
        return self._render(
            request,
            "run.html",
            p=page,
            params=params,
            sort=sort,
            dir=p.get("dir") or "asc",
            chosen=p.getlist("status"),
            fault=p.get("fault") or "",
            model=p.get("model") or "",
            tag=p.get("tag") or "",
            group=p.get("group") or "",
            q=p.get("q") or "",
            regex=p.get("regex") == "1",
            differ=p.get("differ") == "1",
            pass_chart=charts.pass_rates(page.models),
            cost_chart=charts.cost_vs_pass_rate(page.models),
            latency_chart=charts.latency(page.models),
            pair_statuses=queries.PAIR_STATUSES,
            live=not page.state.finished,
            # a run stopped before its report (cancelled, interrupted): what is missing, how to resume it
            partial=store.unfinished(page.run.id),
        )

    def scenario(self, request: Request) -> HTMLResponse:
        store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
        baseline = request.query_params.get("baseline") or None
        try:
            page = queries.scenario_page(request.path_params["run_id"], request.path_params["key"],
                                         baseline=baseline)
        except queries.NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        return self._render(request, "scenario.html", p=page)

    def transcript(self, request: Request) -> HTMLResponse:
        store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
        # start-up time: the transcript pages only
        p = request.query_params
        key, model = p.get("key") or "", p.get("model") or ""
        if not key or not model:
            raise HTTPException(
                400, "a transcript needs ?key=SCENARIO&model=MODEL (and &epoch=N with epochs)"
            )
        epoch = _int(request, "epoch", -1)
        try:
            page = transcript_page(request.path_params["run_id"], key, model, None if epoch < 0 else epoch)
        except queries.NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        return self._render(request, "transcript.html", p=page)

    def diff(self, request: Request) -> HTMLResponse:
        store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
        # start-up time: the transcript pages only
        p = request.query_params
        key, left, right = p.get("key") or "", p.get("a") or "", p.get("b") or ""
        if not key or not left or not right:
            raise HTTPException(400, "a diff needs ?key=SCENARIO&a=MODEL&b=MODEL")
        try:
            page = diff_page(request.path_params["run_id"], key, left, right, _int(request, "epoch", 0))
        except queries.NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        return self._render(request, "diff.html", p=page)

    def export(self, request: Request) -> Response:
        """``/runs/RUN/results.csv`` or ``.jsonl``: every result of the run, as a download."""
        store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
        # start-up time: the downloads only
        run_id, fmt = request.path_params["run_id"], request.path_params["fmt"]
        if fmt not in ("csv", "jsonl"):
            raise HTTPException(404, f"no export as .{fmt}: results.csv or results.jsonl")
        try:
            store_pages.run(run_id)
        except store.UnknownRun as exc:
            raise HTTPException(404, str(exc)) from None
        results, labels = store.list_results(run_id), store.labels_for_run(run_id)
        text, media = (
            (csv_text(results, labels), "text/csv") if fmt == "csv"
            else (jsonl_text(results, labels), "application/jsonl")
        )
        return Response(
            text,
            media_type=f"{media}; charset=utf-8",
            headers={
                "content-disposition": f'attachment; filename="{run_id}-results.{fmt}"',
                "cache-control": "no-store",
            },
        )

    def compare(self, request: Request) -> HTMLResponse:
        store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
        a, b = request.query_params.get("a") or "", request.query_params.get("b") or ""
        recent = queries.store_pages.runs(limit=100)
        page = None
        if a and b:
            try:
                page = queries.compare_page(a, b)
            except queries.NotFound as exc:
                raise HTTPException(404, str(exc)) from None
        return self._render(
            request, "compare.html", p=page, a=a, b=b, recent=recent, kinds=queries.FLIP_KINDS
        )

    def fleet(self, request: Request) -> HTMLResponse:
        store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
        # start-up time: the fleet page only
        return self._render(request, "fleet.html", status=fleet_status(self.config),
                            broker=store.redact(self.config.broker) if self.config.broker else "memory")
