"""SIGINT/SIGTERM during ``evaljobs run``: no new pairs, what finished is kept, the run is ``interrupted``.

A real ``evaljobs run`` in a subprocess (in-process broker, two worker threads, the simulated
provider over loopback). Two quick pairs land, four slow ones are still sleeping when the test
signals — the signal is sent once the quick ones are in the database (a condition the test
reads, not a clock). The process exits 130 with one line saying how to resume; ``watch``
understands the status (it stops and says the same); ``recover`` finishes the run.

A ``Session`` that stays open gives up the lease of a run as soon as the run ended in it — interrupted,
raised out of the call, or finished — so ``recover`` elsewhere is not refused (its ``run_lease`` row).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.errors import Interrupted
from helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
QUICK = ("a1", "a2")
SLOW = ("s1", "s2", "s3", "s4")


def _catalog(tmp_path: Path) -> Path:
    lines = ["name: interrupt", "scenarios:"]
    for key in QUICK:
        lines += [f"  - key: {key}", f'    prompt: "[sim: say {key}]"', f"    expect: {{contains: [{key}]}}"]
    for key in SLOW:  # past the pair's time limit (--time-limit 5): errored when they end, never quick
        lines += [
            f"  - key: {key}",
            f'    prompt: "[sim: sleep 60] [sim: say {key}]"',
            f"    expect: {{contains: [{key}]}}",
        ]
    path = tmp_path / "interrupt.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


#: Restore SIGINT's default disposition, then become ``python ARGS...`` (exec keeps a default
#: disposition, so the new interpreter installs its KeyboardInterrupt handler).
_DEFAULT_SIGINT_THEN_EXEC = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable] + sys.argv[1:])"
)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_keeps_what_finished_marks_the_run_interrupted_and_says_how_to_resume(
    cli, tmp_path, sqlite_url, simulated_provider, signum
):
    sim = simulated_provider(latency=0.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALJOBS_SIM_URL": sim.url}
    # SIGINT's handling as in a terminal, whatever this process inherited: a shell that starts a
    # command in the background without job control (`cmd &` in a script, nohup'd CI runners)
    # leaves SIGINT ignored, and Python keeps an ignored SIGINT ignored in the process it starts
    command = [
        sys.executable,
        "-c",
        _DEFAULT_SIGINT_THEN_EXEC,
        "-m",
        "evaljobs",
        "run",
        str(_catalog(tmp_path)),
        "-m",
        "sim/a",
        "--db",
        sqlite_url,
        "--broker",
        "memory",
        "--width",
        "2",
        "--time-limit",
        "5",
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        store.connect(sqlite_url)

        def quick_ones_landed() -> bool:
            runs = store.list_runs()
            return bool(runs) and store.progress(runs[0].id).get("persisted", 0) >= len(QUICK)

        assert wait_until(lambda: _safe(quick_ones_landed), timeout=120), process.stderr.read()
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    (run,) = store.list_runs()
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert process.returncode == 130, stderr
    assert lines[-1] == (
        f"error: interrupted: run {run.id} kept {run.persisted}/6 pairs; resume it with "
        f"`evaljobs recover {run.id}` (same --db and --broker)"
    ), stderr
    assert "Traceback" not in stderr and "Aborted!" not in stderr
    assert run.status == store.INTERRUPTED and len(QUICK) <= run.persisted < 6
    assert {r.scenario_key for r in store.list_results(run.id)} >= set(QUICK)

    watched = cli("watch", run.id, "--db", sqlite_url)
    assert watched.exit_code == 130  # watch stops at once on an interrupted run and says how to resume
    assert f"resume it with `evaljobs recover {run.id}`" in watched.output

    with Session(db=sqlite_url) as session:  # `evaljobs status` lists it among the runs with work left
        assert [(r.id, r.status) for r in session.status().runs] == [(run.id, "interrupted")]

    if signum == signal.SIGINT:  # resumed: what was kept stays, the rest is evaluated, one report
        kept = {(r.scenario_key, r.model, r.epoch): r.created_at for r in _rows(run.id)}
        recovered = cli("recover", run.id, "--db", sqlite_url, "--broker", "memory")
        assert recovered.exit_code == 0, recovered.output
        assert f"{run.id}: resuming the interrupted run" in recovered.output
        done = store.get_run(run.id)
        assert done.report is not None and done.persisted == 6 and done.status == "partial"
        after = {(r.scenario_key, r.model, r.epoch): r.created_at for r in _rows(run.id)}
        assert all(after[pair] == created for pair, created in kept.items())  # the kept rows, untouched


def _safe(predicate) -> bool:
    try:
        return predicate()
    except store.StoreError:  # the run's process has not created its tables yet
        return False


def _rows(run_id: str) -> list:
    with store.connection():
        return list(store.ResultRow.select().where(store.ResultRow.run == run_id))


def _interrupt(info) -> None:
    raise KeyboardInterrupt  # what SIGINT raises in the main thread, right after the run exists


def test_interrupting_a_run_followed_on_redis_leaves_it_to_the_workers(redis_url, sqlite_url):
    catalog = _catalog_text()
    with Session(db=sqlite_url, broker=redis_url) as session:
        with pytest.raises(Interrupted) as caught:
            session.run(catalog, ["sim/a"], strategy="fanout", wait=True, on_submit=_interrupt)
        (run,) = session.runs()
    assert str(caught.value) == (
        f"stopped following run {run.id} (0/6 pairs so far); its workers go on: `evaljobs watch {run.id}`"
    )
    assert (
        caught.value.exit_code == 130 and run.status != store.INTERRUPTED
    )  # nobody here was doing its pairs


def test_interrupting_an_in_process_run_marks_it_interrupted(sqlite_url, simulated_provider):
    simulated_provider(latency=0.0)
    with Session(db=sqlite_url, broker="memory", width=2) as session:  # every pair sleeps past its 2 s limit
        with pytest.raises(Interrupted, match=r"^interrupted: run r_\w+ kept 0/6 pairs; resume it with "):
            session.run(
                _catalog_text(sleep=True), ["sim/a"], strategy="fanout", time_limit=2, on_submit=_interrupt
            )
        (run,) = session.runs()
    assert run.status == store.INTERRUPTED


def _leased(run_id: str) -> bool:
    """Whether a process holds ``run_id``'s lease (its row: what `recover` in another shell reads)."""
    with store.connection():
        return store.leases.RunLeaseRow.get_or_none(store.leases.RunLeaseRow.run_id == run_id) is not None


def test_an_interrupted_run_is_given_up_while_its_session_stays_open(sqlite_url, simulated_provider):
    """A library's session outlives the interrupt: `recover` elsewhere (which the line names) must not be
    refused for a run nobody evaluates any more, nor a thread keep renewing its lease."""
    simulated_provider(latency=0.0)
    with Session(db=sqlite_url, broker="memory", width=2) as session:
        with pytest.raises(Interrupted, match="resume it with"):
            session.run(_catalog_text(sleep=True), ["sim/a"], strategy="fanout", time_limit=2,
                        on_submit=_interrupt)
        (run,) = session.runs()
        assert run.status == store.INTERRUPTED and not _leased(run.id)


@pytest.mark.parametrize("call,strategy", [("run", "sequential"), ("run", "fanout"), ("submit", "threads")])
def test_a_finished_run_is_given_up_before_its_session_closes(sqlite_url, simulated_provider, call, strategy):
    simulated_provider(latency=0.0)
    with Session(db=sqlite_url, broker="memory", width=2) as session:
        info = getattr(session, call)(_catalog_text(), ["sim/a"], strategy=strategy)
        assert info.status == "complete" and not _leased(info.id)
        again = session.rerun(info.id, ["all"])  # a rerun is started like a run (Session.start)
        assert again.status == "complete" and not _leased(again.id)


def test_an_in_process_run_that_raises_out_of_its_call_is_given_up(sqlite_url, simulated_provider):
    """A listener's ``sys.exit`` ends a sequential run mid-way inside ``run``: nothing of it is left in this
    process, so `recover` may resume it while the session stays open."""
    simulated_provider(latency=0.0)

    def leave(event) -> None:
        raise SystemExit(3)

    with Session(db=sqlite_url, broker="memory", width=2) as session:
        with pytest.raises(SystemExit):
            session.run(_catalog_text(), ["sim/a"], strategy="sequential", on_event=leave)
        (run,) = session.runs()
        assert run.report is None and not _leased(run.id)


def _catalog_text(sleep: bool = False):
    lines = ["name: interrupt", "scenarios:"]
    for key in QUICK + SLOW:
        wait = "[sim: sleep 5] " if sleep else ""
        lines += [
            f"  - key: {key}",
            f'    prompt: "{wait}[sim: say {key}]"',
            f"    expect: {{contains: [{key}]}}",
        ]
    return loads_catalog("\n".join(lines) + "\n", source="interrupt.yaml")
