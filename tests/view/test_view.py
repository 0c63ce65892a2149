"""``evaljobs view`` without a browser: its reads use indexes only, the guard (token, host, read-only,
security headers) holds over real HTTP, the command fails closed, stays out of ``evaljobs --help``'s
imports, and a run page's live stream follows a run from the database alone (no broker).
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading

import httpx
import pytest

from evaljobs import store
from evaljobs.store import pages as store_pages
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.view import queries
from evaljobs.reports.build import build_report
from helpers import ROOT, Viewer, assert_no_full_scans, populate, utc_now


def test_viewer_reads_use_indexes_only(db_url):
    db = store.connect(db_url)
    ids, rerun_id = populate()
    running, done = ids[0], ids[50]
    since = utc_now().replace(year=2000)
    calls = {
        "runs": lambda: store_pages.runs(limit=50),
        "runs by status": lambda: store_pages.runs(limit=50, statuses=("pending", "running")),
        "runs by catalog, model and date": lambda: store_pages.runs(
            limit=50, catalog="big", model="m2", since=since
        ),
        "run": lambda: store_pages.run(running),
        "model tallies": lambda: store_pages.model_tallies(ids[:10]),
        "report models": lambda: store_pages.report_models(ids[10:20]),
        "cells": lambda: store_pages.cells(done),
        "cells after": lambda: store_pages.cells_after(done, 10),
        "search": lambda: store_pages.search(done, "s0"),
        "scenario results": lambda: store_pages.scenario_results(done, "s03"),
        "state": lambda: store_pages.state(running),
        "catalogs": lambda: store_pages.catalogs(),
        "run page": lambda: queries.run_page(done, statuses=["failed"], q="s1"),
        "runs list": lambda: queries.run_list(statuses=["running", "complete"]),
        "compare page": lambda: queries.compare_page(ids[1], ids[2]),
        "scenario page": lambda: queries.scenario_page(done, "s03", baseline=ids[51]),
    }
    results = assert_no_full_scans(db, calls)
    assert len(results["runs"]) == 50 and len(results["runs by status"]) == 11
    assert len(results["runs by catalog, model and date"]) == 50
    assert len(results["cells"]) == 50 and results["state"].persisted == 49
    assert results["search"] == {(f"s{i:02d}", m) for i in range(10) for m in ("m1", "m2")}
    assert [r.model for r in results["scenario results"]] == ["m1", "m2"]
    page = results["run page"]
    assert page.matched == len(page.rows) > 0
    assert all(any(c and c.status == "failed" for _, c in row.cells) and "s1" in row.key for row in page.rows)


def test_a_run_page_filters_sorts_and_pages(tmp_path):
    store.connect(f"sqlite:///{tmp_path}/v.db")
    body = "name: paged\nscenarios:\n" + "".join(
        f'  - key: k{i:03d}\n    prompt: "question {i}"\n    tags: [{"even" if i % 2 == 0 else "odd"}]\n'
        for i in range(120))
    catalog = loads_catalog(body, source="paged.yaml")
    run = store.create_run(catalog, ["m1", "m2"], strategy="sequential")
    for i in range(120):
        for model in ("m1", "m2"):
            failed = model == "m2" and i % 3 == 0
            store.record_result(
                run.id,
                Result(
                    f"k{i:03d}",
                    model,
                    "failed" if failed else "passed",
                    0.0 if failed else 1.0,
                    fault="missing_content" if failed else None,
                    output=f"answer {i} from {model}\nsecond line",
                    duration_ms=i,
                    ttft_ms=float(i) if model == "m1" else None,
                ),
            )
    page = queries.run_page(run.id)
    assert page.matched == 120 and page.pages == 3 and len(page.rows) == 50 and page.rows[0].key == "k000"
    assert page.rows[0].cells[0][1].preview.startswith("answer 0 from m1")
    last = queries.run_page(run.id, page=9)
    assert last.page == 3 and len(last.rows) == 20
    failed = queries.run_page(run.id, statuses=["failed"], fault="missing_content", page_size=1000)
    assert [r.key for r in failed.rows] == [f"k{i:03d}" for i in range(0, 120, 3)]
    odd = queries.run_page(run.id, tag="odd", sort="latency", descending=True, page_size=5)
    assert [r.key for r in odd.rows] == ["k119", "k117", "k115", "k113", "k111"]
    found = queries.run_page(run.id, q="ANSWER 7 FROM M2", model="m2")
    assert [r.key for r in found.rows] == ["k007"] and found.columns == ["m2"]
    by_model = queries.run_page(run.id, sort="m:m2", page_size=3)
    assert [r.cells[1][1].status for r in by_model.rows] == ["failed"] * 3
    m2 = next(m for m in page.models if m.model == "m2")
    assert (m2.results, m2.passed, m2.failed) == (120, 80, 40) and m2.p50_ms == 59
    m1 = next(m for m in page.models if m.model == "m1")
    # time to first token where recorded (m1's calls streamed), nothing invented where it was not (m2)
    assert (m1.ttft_p50_ms, m1.ttft_p95_ms) == (m1.p50_ms, m1.p95_ms) and m1.ttft_p50_ms is not None
    assert (m2.ttft_p50_ms, m2.ttft_p95_ms) == (None, None)
    low, high = m2.interval
    assert low < 80 / 120 < high


@pytest.fixture
def viewed(tmp_path):
    db_url = f"sqlite:///{tmp_path}/evaljobs.db"
    store.connect(db_url)
    return db_url


def test_the_guard_checks_the_token_host_and_method_on_every_request(viewed, tmp_path):
    viewer = Viewer(viewed, "memory", tmp_path / "view.log", extra=["--token", "s3cret-token"])
    try:
        with httpx.Client(base_url=viewer.url, follow_redirects=False) as client:
            assert client.get("/").status_code == 401
            assert client.get("/static/view.css").status_code == 401
            assert client.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
            assert client.get("/", headers={"cookie": "evaljobs_view=wrong"}).status_code == 401
            first = client.get("/compare?a=x&token=s3cret-token")
            assert first.status_code == 303 and first.headers["location"] == "/compare?a=x"
            assert (
                "HttpOnly" in first.headers["set-cookie"] and "SameSite=Strict" in first.headers["set-cookie"]
            )
            ok = client.get("/", headers={"cookie": first.headers["set-cookie"].split(";")[0]})
            assert ok.status_code == 200 and "Runs" in ok.text
            bearer = client.get("/", headers={"authorization": "Bearer s3cret-token"})
            assert bearer.status_code == 200
            csp = bearer.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
            assert bearer.headers["x-content-type-options"] == "nosniff"
            assert client.post("/", headers={"authorization": "Bearer s3cret-token"}).status_code == 405
        assert "s3cret-token" not in viewer.log.read_text()  # never printed, though the address is
    finally:
        viewer.close()
    open_viewer = Viewer(viewed, "memory", tmp_path / "view2.log")
    try:
        with httpx.Client(base_url=open_viewer.url) as client:
            assert client.get("/").status_code == 200
            assert client.get("/", headers={"host": "attacker.example"}).status_code == 421
            assert client.delete("/runs/x").status_code == 405
            assert client.get("/runs/nope").status_code == 404
            assert client.get("/?since=yesterday").status_code == 400
    finally:
        open_viewer.close()


def test_the_command_fails_closed_with_one_line(cli, viewed, monkeypatch):
    beyond = cli("view", "--db", viewed, "--host", "0.0.0.0")
    assert beyond.exit_code == 2
    assert beyond.output.strip().count("\n") == 0 and "--token" in beyond.output
    empty = cli("view", "--db", viewed, "--host", "0.0.0.0", "--token", "  ")
    assert empty.exit_code == 2 and "token is empty" in empty.output
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a)
    )
    missing = cli("view", "--db", viewed)
    assert missing.exit_code == 2 and "pip install 'evaljobs[view]'" in missing.output


def test_help_does_not_import_the_web_stack():
    code = ("import sys\nfrom click.testing import CliRunner\nfrom evaljobs.cli import main\n"
            "out = CliRunner().invoke(main, ['--help']).output\nassert 'view' in out, out\n"
            "print(sorted(m for m in ('starlette', 'uvicorn', 'jinja2') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _events(response, stop):
    """Parsed SSE events (name, data) from a streaming httpx response."""
    name, data = None, []
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and name:
            event = (name, json.loads("".join(data)))
            name, data = None, []
            yield event
            if stop(event):
                return


def test_the_live_stream_follows_a_run_from_the_database_without_a_broker(viewed, tmp_path):
    catalog = loads_catalog("name: polled\nscenarios:\n" + "".join(
        f'  - key: p{i}\n    prompt: "q{i}"\n' for i in range(6)), source="polled.yaml")
    run = store.create_run(catalog, ["m"], strategy="sequential")
    store.mark_running(run.id)
    store.record_result(run.id, Result("p0", "m", "passed", 1.0, output="already there"))
    cursor = store_pages.state(run.id).last_id
    viewer = Viewer(viewed, "memory", tmp_path / "view.log")
    seen: list = []
    try:
        with httpx.Client(base_url=viewer.url, timeout=30) as client:
            with client.stream("GET", f"/live/runs/{run.id}?after={cursor}") as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                stream = _events(response, lambda e: e[0] == "done")
                first = next(stream)
                assert first[0] == "update" and first[1]["state"]["persisted"] == 1 and first[1]["rows"] == []

                def write() -> None:
                    for i in range(1, 6):
                        store.record_result(run.id, Result(f"p{i}", "m", "failed" if i == 3 else "passed",
                                                           output=f"line one {i}\nline two"))
                    store.finalize(run.id, build_report)

                writer = threading.Thread(target=write)
                writer.start()
                seen = list(stream)
                writer.join(30)
    finally:
        viewer.close()
    rows = [row for name, data in seen if name == "update" for row in data["rows"]]
    assert [r["key"] for r in rows] == ["p1", "p2", "p3", "p4", "p5"]
    assert rows[2]["status"] == "failed" and rows[0]["line"] == "line one 1"
    assert seen[-1][0] == "done"
    last_state = [data["state"] for name, data in seen if name == "update"][-1]
    assert last_state["persisted"] == 6 and last_state["failed"] == 1


def test_the_runs_list_stream_moves_running_runs_and_ends_when_they_finish(viewed, tmp_path):
    catalog = loads_catalog(
        "name: listed\nscenarios:\n  - key: a\n    prompt: q\n  - key: b\n    prompt: q\n",
        source="listed.yaml",
    )
    run = store.create_run(catalog, ["m"], strategy="sequential")
    store.mark_running(run.id)
    viewer = Viewer(viewed, "memory", tmp_path / "view.log")
    try:
        with httpx.Client(base_url=viewer.url, timeout=30) as client:
            page = client.get("/")
            assert f'data-live="{run.id}"' in page.text and "<progress" in page.text
            with client.stream("GET", f"/live/runs?id={run.id}") as response:
                stream = _events(response, lambda e: e[0] == "done")
                first = next(stream)
                assert first == ("runs", {run.id: {**first[1][run.id], "persisted": 0, "status": "running"}})
                store.record_result(run.id, Result("a", "m", "passed"))
                store.record_result(run.id, Result("b", "m", "failed"))
                store.finalize(run.id, build_report)
                rest = list(stream)
    finally:
        viewer.close()
    states = [data[run.id] for name, data in rest if name == "runs"]
    assert states[-1]["persisted"] == 2 and states[-1]["finished"] and states[-1]["status"] == "complete"
    assert states[-1]["failed"] == 1
    assert rest[-1][0] == "done"
