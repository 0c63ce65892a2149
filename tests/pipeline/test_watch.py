"""Live progress: every result reported exactly once, "complete" only once the report is committed.

Checked on the in-process broker (worker threads, in-process events) and on
real Redis pub/sub with `evaljobs worker` processes; plus the Progress
arithmetic that merges events with the slow database poll, and `evaljobs watch`.
"""
from __future__ import annotations

import io
import re
import threading
from collections import Counter

import pytest

from evaljobs.pipeline import broker, events
from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.cli import Group
from evaljobs.cli.ops import watch
from evaljobs.pipeline.progress import Progress, follow
from evaljobs.evaluation.result import Result
from evaljobs.testing import ManualClock
from evaljobs.reports.build import build_report
from helpers import WorkerProcess, plugin_broker

MODELS = ["sim/a", "sim/b"]


def catalog(n: int, name: str = "watched", fail_every: int = 0):
    lines = [f"name: {name}", "scenarios:"]
    for i in range(n):
        want = "nothing-like-this" if fail_every and i % fail_every == 0 else f"answer {i}"
        lines += [f"  - key: s{i:02d}", f'    prompt: "[sim: say answer {i}]"',
                  f"    expect: {{contains: ['{want}']}}"]
    return loads_catalog("\n".join(lines) + "\n", source=f"{name}.yaml")


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.02, jitter=0.02)


@pytest.fixture
def memory(sim, monkeypatch, request):
    """SQLite + the in-process broker with real worker threads (the evaljobs.testing plugin's)."""
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    return plugin_broker(request)


class Recorder:
    """Follows one run's events on a thread; on "complete" it reads the report at once."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.events: list[dict] = []
        self.report_on_complete: list[bool] = []
        self.subscription = events.Subscription(run_id)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            event = self.subscription.get(0.1)
            if event is None:
                continue
            if event.get("type") == "complete":
                self.report_on_complete.append(store.get_run(self.run_id).report is not None)
            self.events.append(event)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.subscription.close()


def assert_stream(run_id: str, recorder: Recorder, lines: str, expected_pairs: set) -> None:
    results = [(e["scenario"], e["model"]) for e in recorder.events if e["type"] == "result"]
    assert Counter(results) == Counter({pair: 1 for pair in expected_pairs}), "each result exactly once"
    assert [e["type"] for e in recorder.events].count("complete") == 1
    assert recorder.report_on_complete == [True], "a waiter reading the report on complete finds it"
    assert sorted(e["persisted"] for e in recorder.events if e["type"] == "result") == \
        list(range(1, len(expected_pairs) + 1))
    # The Progress fed by follow() printed one line per pair, each pair once, ending at N/N.
    printed = re.findall(r"^\[\s*(\d+)/(\d+)\] (\w+)\s+(\S+) × (\S+)", lines, re.M)
    assert Counter((key, model) for _, _, _, key, model in printed) == \
        Counter({pair: 1 for pair in expected_pairs}), lines
    assert max(int(done) for done, *_ in printed) == len(expected_pairs)


def test_memory_broker_stream_reports_each_result_once_and_complete_after_the_report(memory):
    cat = catalog(12, fail_every=4)
    run = store.create_run(cat, MODELS, strategy="fanout")
    recorder = Recorder(run.id)
    out = io.StringIO()
    progress = Progress(run.expected, stream=out, tty=False)
    memory.actors.start_run.send(run.id)
    info = follow(run.id, progress=progress, poll=5.0, timeout=60)
    memory.broker.join(memory.queue, fail_fast=False)
    recorder.close()
    assert info.report is not None and info.persisted == 24
    assert_stream(run.id, recorder, out.getvalue(), {(k, m) for k in cat.keys for m in MODELS})
    assert progress.counts == {"passed": 18, "failed": 6, "errored": 0} and progress.done == 24


@pytest.mark.redis
def test_redis_stream_from_worker_processes_reports_each_result_once(redis_url, sqlite_url, sim, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    store.connect(sqlite_url)
    binding = broker.configure(redis_url)  # binds events to Redis pub/sub
    try:
        cat = catalog(15, "redis-watched")
        run = store.create_run(cat, MODELS, strategy="fanout")
        recorder = Recorder(run.id)
        out = io.StringIO()
        progress = Progress(run.expected, stream=out, tty=False)
        worker = WorkerProcess(redis_url, sqlite_url, threads=4, log=tmp_path / "worker.log").start()
        try:
            binding.actors.start_run.send(run.id)
            info = follow(run.id, progress=progress, poll=5.0, timeout=90)
            deadline_ok = info.report is not None
        finally:
            worker.kill()  # the run is over (or the test failed): no need for a graceful stop
        recorder.close()
        assert deadline_ok, (tmp_path / "worker.log").read_text()[-3000:]
        assert_stream(run.id, recorder, out.getvalue(), {(k, m) for k in cat.keys for m in MODELS})
        assert progress.done == 30
    finally:
        binding.broker.close()
        events.bind_redis(None)


# -- Progress: events and polls merged without double counting ---------------------------------


def result_event(key: str, model: str, status: str, persisted: int | None) -> dict:
    event = {"type": "result", "scenario": key, "model": model, "status": status, "score": 1.0, "fault": None}
    if persisted is not None:
        event["persisted"] = persisted
    return event


def poll(persisted: int, passed: int = 0, failed: int = 0, errored: int = 0, expected: int = 6) -> dict:
    return {"expected": expected, "persisted": persisted, "passed": passed, "failed": failed,
            "errored": errored}


def test_progress_counts_each_pair_once_across_events_and_polls():
    out = io.StringIO()
    p = Progress(6, stream=out, tty=False)
    p(result_event("a", "m", "passed", 1))
    p(result_event("a", "m", "passed", 1))  # the same event twice (local queue and Redis)
    assert (p.done, p.counts["passed"]) == (1, 1)
    p.update(poll(3, passed=2, failed=1))  # the poll saw pairs 2 and 3, whose events were missed
    assert (p.done, p.counts) == (3, {"passed": 2, "failed": 1, "errored": 0})
    p(result_event("b", "m", "failed", 3))  # a late event for a pair the poll already counted
    assert (p.done, p.counts) == (3, {"passed": 2, "failed": 1, "errored": 0})
    p(result_event("c", "m", "errored", 5))  # newer than the poll: counted
    p(result_event("d", "m", "passed", 4))
    assert (p.done, p.counts) == (5, {"passed": 3, "failed": 1, "errored": 1})
    p.update(poll(4, passed=3, failed=1))  # an older read than the events: events above it stay counted
    assert (p.done, p.counts) == (5, {"passed": 3, "failed": 1, "errored": 1})
    p.update(poll(2, passed=1, failed=1))  # a stale read never goes backwards
    assert p.done == 5
    p.update(poll(6, passed=4, failed=1, errored=1))
    assert (p.done, p.counts) == (6, {"passed": 4, "failed": 1, "errored": 1})
    lines = out.getvalue().splitlines()
    assert sum(" a × m " in line for line in lines) == 1
    assert "[3/6] 2 more result(s) read from the database" in lines
    assert lines[-1].startswith("[6/6]")


def test_progress_on_a_terminal_draws_one_bar_and_ends_it_once():
    out = io.StringIO()
    p = Progress(2, stream=out, tty=True)
    p(result_event("a", "m", "passed", 1))
    p(result_event("b", "m", "failed", 2))
    p({"type": "complete"})
    p.update(poll(2, passed=1, failed=1, expected=2))
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "2/2" in text and "✓1 ✗1 !0" in text and "\r[" in text


def test_follow_catches_up_by_polling_when_no_event_arrives(tmp_path):
    """Results recorded without events (a disconnected subscriber): the poll counts them, once."""
    store.connect(f"sqlite:///{tmp_path}/quiet.db")
    cat = catalog(3, "quiet")
    run = store.create_run(cat, ["sim/a"], strategy="fanout")
    out = io.StringIO()
    progress = Progress(run.expected, stream=out, tty=False)

    def behind_the_scenes():
        for i, key in enumerate(cat.keys):
            store.record_result(run.id, Result(key, "sim/a", "passed" if i else "errored", score=1.0))
        store.finalize(run.id, build_report)  # no `complete` event either

    timer = threading.Timer(0.2, behind_the_scenes)
    timer.start()
    info = follow(run.id, progress=progress, poll=0.1, timeout=20)
    timer.join()
    assert info.report is not None
    assert progress.done == 3 and progress.counts == {"passed": 2, "failed": 0, "errored": 1}


def test_follow_returns_on_timeout_and_on_cancel(tmp_path):
    store.connect(f"sqlite:///{tmp_path}/cancel.db")
    run = store.create_run(catalog(2, "cancelled"), ["sim/a"], strategy="fanout")
    assert follow(run.id, poll=0.05, timeout=0.2).report is None
    store.cancel(run.id)
    assert follow(run.id, poll=10, timeout=30).status == "cancelled"


# -- evaljobs watch ------------------------------------------------------------------------------


@pytest.fixture
def cli(cli, monkeypatch, tmp_path):
    """The shared ``cli`` (tests/conftest.py) running ``watch`` in a group of its own, on ``watch.db``."""
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/watch.db")
    group = Group(commands={"watch": watch})  # as the lead registers it on `evaljobs`
    return lambda *args: cli(*args, command=group)


def finished_run(pass_rate_of: int, total: int = 4) -> store.RunInfo:
    cat = catalog(total, f"done{pass_rate_of}")
    run = store.create_run(cat, ["sim/a"], strategy="fanout")
    for i, key in enumerate(cat.keys):
        store.record_result(run.id, Result(key, "sim/a", "passed" if i < pass_rate_of else "failed"))
    store.finalize(run.id, build_report)
    return run


def test_watch_a_finished_run_prints_the_table_and_applies_the_gate(cli, tmp_path):
    store.connect(f"sqlite:///{tmp_path}/watch.db")
    run = finished_run(3)
    ok = cli("watch", run.id, "--fail-under", "70%")
    assert ok.exit_code == 0, ok.output
    assert f"run {run.id}" in ok.output and "verdict: 1. sim/a (75.0%)" in ok.output
    assert "OK: pass rate 75.0% meets --fail-under 70.0%" in ok.output
    failing = cli("watch", run.id, "--fail-under", "0.8")
    assert failing.exit_code == 1 and "FAIL: pass rate 75.0% is under --fail-under 80.0%" in failing.output
    bad = cli("watch", run.id, "--fail-under", "lots")
    assert bad.exit_code == 2 and "'lots' is not a pass rate" in bad.output
    unknown = cli("watch", "r_nope")
    assert unknown.exit_code == 2 and "unknown run 'r_nope'" in unknown.output
    assert "Traceback" not in unknown.output


def test_watch_follows_a_live_run_line_per_result_then_the_table(memory, cli, tmp_path, monkeypatch):
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", store.database.obj.evaljobs_url)
    cat = catalog(5, "live", fail_every=5)
    run = store.create_run(cat, MODELS, strategy="fanout")
    memory.actors.start_run.send(run.id)
    result = cli("watch", run.id, "--broker", "memory", "--fail-under", "0.5")
    assert result.exit_code == 0, result.output
    printed = re.findall(r"^\[\s*\d+/10\] \w+\s+(\S+) × (\S+)", result.output, re.M)
    assert printed and len(set(printed)) == len(printed), result.output  # a pair is never listed twice
    counts = [int(n) for n in re.findall(r"^\[\s*(\d+)/10\]", result.output, re.M)]
    assert counts == sorted(counts) and counts[-1] == 10, result.output
    assert "verdict:" in result.output and "OK: pass rate 80.0%" in result.output


def test_watch_a_cancelled_run_says_so_and_fails_a_gate(cli, tmp_path):
    store.connect(f"sqlite:///{tmp_path}/watch.db")
    run = store.create_run(catalog(2, "stopped"), ["sim/a"], strategy="fanout")
    store.cancel(run.id)
    plain = cli("watch", run.id)
    assert plain.exit_code == 0 and "is cancelled with 0/2 pairs; no report" in plain.output
    gated = cli("watch", run.id, "--fail-under", "0.1")
    assert gated.exit_code == 1 and "has no report" in gated.output


def test_progress_without_a_first_result_shows_no_eta():
    """0/28 with nothing finished has no rate: it says it is waiting, never "ETA 0.0s"."""
    out = io.StringIO()
    p = Progress(28, stream=out, tty=True)
    p.update(poll(0, expected=28))
    assert "waiting for the first result" in out.getvalue() and "ETA" not in out.getvalue()
    out2 = io.StringIO()
    clock = ManualClock()
    moving = Progress(28, stream=out2, tty=True, clock=clock)
    clock.advance(2.0)
    moving(result_event("a", "m", "passed", 1))
    assert re.search(r"1/28 .* 2\.0s  ETA 54\.0s", out2.getvalue()), out2.getvalue()  # 2 s a pair, 27 left


def test_the_eta_is_the_rate_since_watching_began_times_what_is_left():
    """Pairs already done when watching began (``done=``) are not part of the rate; the bar is
    redrawn at most every 50 ms of the clock, except for the last pair."""
    out = io.StringIO()
    clock = ManualClock()
    p = Progress(10, stream=out, tty=True, done=4, clock=clock)
    clock.advance(3.0)
    p(result_event("a", "m", "passed", 5))
    p(result_event("b", "m", "passed", 6))  # the same instant: not redrawn
    assert out.getvalue().count("\r") == 1 and re.search(r"5/10 .*  3\.0s  ETA 15\.0s", out.getvalue())
    clock.advance(1.0)
    p(result_event("c", "m", "failed", 7))  # 3 fresh pairs in 4 s: 4/3 s a pair, 3 left
    assert re.search(r"7/10 .*  4\.0s  ETA  4\.0s $", out.getvalue()), out.getvalue()
    for key, n in (("d", 8), ("e", 9), ("f", 10)):
        p(result_event(key, "m", "passed", n))
    assert out.getvalue().endswith("10/10  ✓5 ✗1 !0    4.0s  done \n"), out.getvalue()


def test_progress_says_once_when_the_database_is_ahead_of_the_events():
    out = io.StringIO()
    p = Progress(3, stream=out, tty=False)
    p.catchup_note = "no events here"
    p(result_event("a", "m", "passed", 1))
    assert "note:" not in out.getvalue()  # events and reads agree
    p.update(poll(2, passed=2, expected=3))
    p.update(poll(3, passed=3, expected=3))
    assert out.getvalue().count("note: no events here") == 1


@pytest.mark.redis
def test_watch_says_when_no_worker_consumes_the_queue(cli, redis_url, tmp_path):
    """A run enqueued on Redis with no worker: watch names the queue and how to start a worker."""
    store.connect(f"sqlite:///{tmp_path}/watch.db")
    binding = broker.configure(redis_url)
    try:
        run = store.create_run(catalog(2, "unworked"), ["sim/a"], strategy="fanout")
        binding.actors.start_run.send(run.id)
        result = cli("watch", run.id, "--broker", redis_url, "--timeout", "1", "--poll", "0.2")
    finally:
        binding.broker.close()
        events.bind_redis(None)  # the broker and watch bound events to this Redis: later tests know none
    assert result.exit_code == 0, result.output
    assert result.output.count("note: no worker is consuming queue 'agents': 1 message(s) ready, none taken; "
                               "start one with `evaljobs worker --broker redis://") == 1, result.output
    assert "ETA 0.0s" not in result.output and "no report yet" in result.output


def test_watch_json_prints_the_report_as_json(cli, tmp_path):
    import json

    store.connect(f"sqlite:///{tmp_path}/watch.db")
    run = finished_run(2)
    result = cli("watch", run.id, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # stdout alone: the JSON, nothing else
    assert report["summary"]["pass_rate"] == 0.5


def test_watch_without_redis_says_once_that_progress_moves_on_database_reads(cli, tmp_path, monkeypatch):
    """Workers elsewhere, watch on --broker memory: no event reaches it, and it says so when a read catches
    up."""
    store.connect(f"sqlite:///{tmp_path}/watch.db")
    cat = catalog(2, "elsewhere")
    run = store.create_run(cat, ["sim/a"], strategy="fanout")
    first_read = threading.Event()
    real_progress = store.progress

    def spied(run_id):
        numbers = real_progress(run_id)
        first_read.set()
        return numbers

    monkeypatch.setattr(store, "progress", spied)

    def worker_elsewhere():  # records results without publishing events, as a worker in another process would
        assert first_read.wait(30)
        for key in cat.keys:
            store.record_result(run.id, Result(key, "sim/a", "passed"))
        store.finalize(run.id, build_report)

    thread = threading.Thread(target=worker_elsewhere)
    thread.start()
    try:
        result = cli("watch", run.id, "--poll", "0.1", "--timeout", "60")
    finally:
        thread.join()
    assert result.exit_code == 0, result.output
    assert (
        result.output.count(
            "note: with --broker memory this process sees no events from workers elsewhere: "
            "progress moves on database reads every 0.1 s"
        )
        == 1
    ), result.output
    assert "verdict: 1. sim/a (100.0%)" in result.output
