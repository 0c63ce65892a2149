"""The run commands' library calls: each of ``rerun``, ``recover``, ``watch``, ``runs``, ``show``,
``cancel``, ``compare``, ``report`` and ``demo`` is one :class:`Session` method returning a typed
result, so the CLI only prints it and maps its verdict (issue 28).

On real SQLite (and Redis where events travel through it), the in-process broker with real worker
threads, and the simulated provider over loopback.
"""
from __future__ import annotations

import json

import pytest

from evaljobs import store
from evaljobs.api import (Cancellation, DemoRun, RenderedReport, RunDetail, Selection, Session, render_run,
                          rerun_selection)
from evaljobs.catalog import loads_catalog
from evaljobs.errors import EvaljobsError, UsageError, user_line, user_lines
from evaljobs.pipeline import events
from evaljobs.redact import register_secret
from evaljobs.reports.compare import render_comparison
from helpers import abc_catalog_yaml

CATALOG = abc_catalog_yaml("apiruns", failing="b")
SIM_OPTIONS = dict(latency=0.0)


def _catalog():
    return loads_catalog(CATALOG, source="apiruns.yaml")


def _finished(session: Session, strategy: str = "fanout") -> store.RunInfo:
    return session.run(_catalog(), ["sim/a"], strategy=strategy, timeout=60)


def test_show_resolves_a_prefix_and_reads_results_and_missing_pairs(session):
    pending = store.create_run(_catalog(), ["sim/a"], strategy="fanout")  # nothing evaluated
    detail = session.show("latest")
    assert isinstance(detail, RunDetail) and detail.run.id == pending.id
    assert detail.results == [] and sorted(detail.missing) == [("a", "sim/a", 0), ("b", "sim/a", 0),
                                                               ("c", "sim/a", 0)]
    done = _finished(session)
    detail = session.show(done.id[:-2])  # a unique prefix names it
    assert detail.run.id == done.id and detail.missing == []
    assert sorted((r.scenario_key, r.status) for r in detail.results) == [
        ("a", "passed"), ("b", "failed"), ("c", "passed")]
    with pytest.raises(EvaljobsError, match="unknown run 'r_no_such_run'"):
        session.show("r_no_such_run")


def test_rerun_checks_what_to_rerun_before_anything_is_created(session):
    first = _finished(session)
    before = len(session.runs(limit=100))
    with pytest.raises(UsageError, match="say what to rerun: --errored, --failed"):
        session.rerun(first.id, [])
    with pytest.raises(UsageError, match="--all already includes every pair: give it alone"):
        session.rerun(first.id, ["all", "failed"])
    assert len(session.runs(limit=100)) == before
    assert rerun_selection(["failed", "errored", "failed"]) == ["failed", "errored"]


def test_rerun_of_a_queued_run_is_followed_to_its_report_and_says_what_it_created(session):
    first = _finished(session)
    notes: list[str] = []
    again = session.rerun("latest", ["failed"], on_note=notes.append, timeout=60)
    assert again.id != first.id and again.report is not None and again.persisted == 1  # followed
    assert notes == [f"run {again.id}: rerun of {first.id} (failed), 1 pairs (fanout, broker memory)"]
    assert session.follows(again.strategy, None) and not again.detached  # memory broker: followed
    assert again.gate().passed and not again.gate(0.5).passed  # 0 of 1 pass


def test_rerun_of_an_inline_run_finishes_inside_the_call_and_its_events_are_heard(session):
    first = _finished(session, strategy="sequential")
    notes: list[str] = []
    heard: list[dict] = []
    again = session.rerun(first.id, ["all"], on_note=notes.append, on_event=heard.append)
    assert again.report is not None and again.persisted == 3 and again.strategy == "sequential"
    assert notes == [f"run {again.id}: rerun of {first.id} (all), 3 pairs (sequential, broker none)"]
    assert len([e for e in heard if e.get("type") == "result"]) == 3


def test_a_rerun_on_redis_without_wait_is_only_started(sqlite_url, redis_url, sim, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    with Session(db=sqlite_url, broker="memory", width=2) as local:
        first = _finished(local)
    with Session(db=sqlite_url, broker=redis_url) as remote:
        notes: list[str] = []
        started = remote.rerun(first.id, ["failed"], on_note=notes.append)
        assert not remote.follows(started.strategy, None)  # workers elsewhere evaluate it
        assert not remote.get(started.id).detached  # read back, a run is only what was stored
    assert started.detached  # what `evaljobs rerun` prints as the run id alone
    assert started.report is None and started.persisted == 0 and started.status in ("pending", "running")
    assert notes[0].startswith(f"run {started.id}: rerun of {first.id} (failed), 1 pairs "
                               "(fanout, broker redis://")


def test_watch_returns_a_finished_or_cancelled_run_as_it_is(session):
    done = _finished(session)
    assert session.watch(done.id[:-1]).id == done.id
    pending = store.create_run(_catalog(), ["sim/a"], strategy="fanout")
    cancelled = session.cancel(pending.id)
    assert isinstance(cancelled, Cancellation)
    assert cancelled.run.status == "cancelled" and cancelled.batches == 0
    watched = session.watch(pending.id, timeout=60)  # would wait forever were it not cancelled
    assert watched.status == "cancelled" and watched.report is None


def test_watch_follows_a_run_others_evaluate_to_its_report(session, sqlite_url):
    queued = session.submit(_catalog(), ["sim/a"], strategy="fanout")  # this session's workers take it
    with Session(db=sqlite_url) as watcher:  # another session, no broker: it evaluates nothing
        info = watcher.watch(queued.id, timeout=60, poll=0.05)
    assert info.id == queued.id and info.report is not None and info.persisted == 3


def test_watch_on_redis_takes_the_runs_events_from_redis_and_starts_no_worker(sqlite_url, redis_url):
    store.connect(sqlite_url)
    pending = store.create_run(_catalog(), ["sim/a"], strategy="fanout")  # nobody will evaluate it
    try:
        with Session(db=sqlite_url, broker=redis_url) as watcher:
            info = watcher.watch(pending.id, timeout=0.2, poll=0.05)  # gives up at its deadline
            assert events.redis_url() == redis_url
            assert watcher._binding is None  # nothing bound: no worker here evaluates its pairs
    finally:
        events.bind_redis(None)
    assert info.report is None and store.get_run(pending.id).persisted == 0


def test_render_report_resolves_its_runs_and_is_a_gate_only_when_asked(session):
    first = _finished(session)
    second = _finished(session)
    rendered = session.render_report("latest", "md", baseline=first.id[:-1])
    assert isinstance(rendered, RenderedReport) and rendered.run.id == second.id
    assert rendered.text.startswith("### evaljobs · apiruns — `sim/a`: 66.7% (2/3 passed")
    assert rendered.verdict().passed and rendered.verdict(None, "ci").exit_code == 0
    failed = rendered.verdict(0.9)
    assert (failed.passed, failed.exit_code) == (False, 1)
    assert failed.lines == ("FAIL: pass rate 66.7% is under --fail-under 90.0%",)
    assert session.render_report(second.id, "json").text == render_run(second, "json")
    assert json.loads(render_run(second, "json"))["summary"]["results"] == 3
    flaky = session.render_report(second.id, flaky=True)
    assert flaky.run.id == second.id and isinstance(flaky.text, str)
    # --baseline with junit is refused before any run is looked up
    with pytest.raises(UsageError, match="does not apply to --format junit"):
        session.render_report("r_no_such_run", "junit", baseline="r_nor_this")
    pending = store.create_run(_catalog(), ["sim/a"], strategy="fanout")
    with pytest.raises(UsageError, match=f"run {pending.id} has no report yet \\(pending\\): wait for it"):
        session.render_report(pending.id, flaky=True)
    with pytest.raises(UsageError, match="has no report yet"):
        render_run(store.get_run(pending.id))


def test_compare_resolves_its_runs_and_renders_itself(session):
    first = _finished(session)
    second = _finished(session)
    comparison = session.compare(first.id[:-1], "latest")
    assert (comparison.run_a, comparison.run_b) == (first.id, second.id)
    assert comparison.render() == render_comparison(comparison)
    assert comparison.verdict(fail_on_regression=True).passed  # the same answers: nothing regressed


def test_recover_resolves_its_run_and_says_what_it_did_as_json(session):
    lost = store.create_run(_catalog(), ["sim/a"], strategy="fanout")  # start_run never sent
    done = session.recover(lost.id[:-1])
    assert done.to_dict() == {"actions": [f"{lost.id}: re-enqueued 3 of 3 missing pairs"],
                              "runs": [{"id": lost.id, "status": "complete", "persisted": 3, "expected": 3,
                                        "report": True}]}


def test_run_tells_its_notes_and_shows_a_bar_when_asked(session, tmp_path, capsys):
    path = tmp_path / "apiruns.yaml"
    path.write_text(CATALOG)
    notes: list[str] = []
    info = session.run(str(path), ["sim/a"], strategy="sequential", progress=True, on_note=notes.append,
                       selection=Selection(filters=("a",)))
    assert info.report is not None and info.expected == 1
    assert notes == ["selected 1 of 3 scenarios (filter: a)",
                     f"run {info.id}: 1 scenarios × 1 models = 1 pairs (sequential, broker none)"]
    assert "1/1" in capsys.readouterr().err  # the bar, on stderr
    with pytest.raises(UsageError):  # an empty selection: nothing is created
        session.run(str(path), ["sim/a"], strategy="sequential", on_note=notes.append,
                    selection=Selection(filters=("zzz",)))
    assert [r.id for r in session.runs(limit=5)] == [info.id]


def test_a_run_keeps_one_sqlite_connection_on_the_callers_thread(session, monkeypatch):
    """Issue 42 (start-up): the caller's store calls during a run share one SQLite connection instead of
    opening and closing one each (each close of the last connection checkpoints the WAL), and it is
    closed when the run returns."""
    import sqlite3
    import threading

    import peewee

    opened: list[sqlite3.Connection] = []
    connect = sqlite3.connect

    def counting_connect(*args, **kwargs):
        conn = connect(*args, **kwargs)
        if threading.current_thread() is threading.main_thread():
            opened.append(conn)
        return conn

    monkeypatch.setattr(peewee.sqlite3, "connect", counting_connect)
    info = _finished(session)
    assert info.report is not None and info.expected == 3
    assert len(opened) == 1
    assert store.database.obj.is_closed()  # the caller's connection, closed when the run returned


def test_demo_runs_the_bundled_catalog_and_writes_its_html(session, tmp_path):
    notes: list[str] = []
    done = session.demo(html=tmp_path / "out" / "demo.html", on_note=notes.append)
    assert isinstance(done, DemoRun) and done.run.report is not None and done.run.status == "complete"
    assert done.run.models == ["sim/fast", "sim/smart"]
    assert done.html_path == (tmp_path / "out" / "demo.html").resolve()
    assert done.html_path.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    assert done.text == render_run(done.run, "table")
    (note,) = notes
    assert note.startswith(f"run {done.run.id}: ") and note.endswith(
        "scenarios × 2 simulated models, fan-out over 4 in-process workers")


def test_an_errors_line_masks_secrets_and_a_catalogs_problems_are_one_line_each():
    register_secret("s3cr3t-token-value")
    assert user_line(RuntimeError("cannot reach redis://:hunter2@host:6379/0")) == (
        "cannot reach redis://:***@host:6379/0")
    assert user_line(RuntimeError("key s3cr3t-token-value\nrefused")) == "key *** refused"
    assert user_line(KeyError()) == "KeyError"

    class Problems(UsageError):
        problems = ["a.yaml:3: bad s3cr3t-token-value", "a.yaml:9: worse"]

    assert user_lines(Problems("two problems")) == ["a.yaml:3: bad ***", "a.yaml:9: worse"]
