"""An `evaljobs` process collects garbage less often, and not at all at exit (issue 42).

Why: a width-16 first run spent 0.2-0.3 s in 130 collections while importing, and finalization
collected its whole heap (~65,000 objects) again before the process could end: 0.2-1 s of its wall
clock on a loaded machine (evaljobs/cli/_options.py, tune_gc). The probe is an exit handler
registered before the command starts, so it runs after the command's own (LIFO): it sees the
heap frozen and the young generation's threshold raised, and the run it follows is complete and
readable from a new process. A caller embedding the CLI keeps its own threshold. A one-scenario run
collects nothing at all once its command line is read (session 13: the threshold's 100,000 is above all
it allocates; at 10,000 it collected 5 times, 2 % of its instructions, BENCHMARKS.md).
"""
from __future__ import annotations

import gc
import os
import sqlite3
import subprocess
import sys
from pathlib import Path


from evaljobs.cli._options import GC_YOUNG

PROBE = """
import atexit, gc, sys
atexit.register(lambda: print(f"frozen at exit: {gc.get_freeze_count()}; young threshold "
                              f"{gc.get_threshold()[0]}", flush=True))
from evaljobs.cli import main
sys.argv = ["evaljobs", *sys.argv[1:]]
main()
"""


#: Counts the collections started once the command raised the threshold (Python's own is 700).
COUNTING_PROBE = """
import atexit, gc, sys
after = []
gc.callbacks.append(lambda phase, info: after.append(info["generation"])
                    if phase == "start" and gc.get_threshold()[0] > 700 else None)
atexit.register(lambda: print(f"collections after the command line: {len(after)}", flush=True))
from evaljobs.cli import main
sys.argv = ["evaljobs", *sys.argv[1:]]
main()
"""


def _one_scenario_run(tmp_path: Path, probe: str) -> tuple[subprocess.CompletedProcess, Path]:
    catalog = tmp_path / "one.yaml"
    catalog.write_text('name: one\nscenarios:\n  - key: hello\n    prompt: "Say hi [sim: say hi there]"\n'
                       '    expect: {contains: ["hi"]}\n', encoding="utf-8")
    db = tmp_path / "runs.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    env.update(EVALJOBS_SIM_LATENCY="0", EVALJOBS_SIM_JITTER="0")
    command = [sys.executable, "-c", probe, "run", str(catalog), "-m", "sim/fast", "--db", f"sqlite:///{db}"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done, db


def test_a_run_exits_with_its_heap_frozen_and_its_results_stored(tmp_path: Path) -> None:
    done, db = _one_scenario_run(tmp_path, PROBE)
    last = done.stdout.strip().splitlines()[-1]
    frozen, threshold = last.removeprefix("frozen at exit: ").split("; young threshold ")
    assert int(frozen) > 0 and int(threshold) == GC_YOUNG, done.stdout
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status, persisted, report IS NOT NULL FROM run").fetchall() == [
            ("complete", 1, 1)]


def test_a_one_scenario_run_collects_nothing_once_its_command_line_is_read(tmp_path: Path) -> None:
    done, _ = _one_scenario_run(tmp_path, COUNTING_PROBE)
    assert done.stdout.strip().splitlines()[-1] == "collections after the command line: 0", done.stdout


def test_a_caller_embedding_the_cli_keeps_its_threshold(cli) -> None:
    before = gc.get_threshold()
    assert cli("--version", catch_exceptions=True).exit_code == 0
    assert gc.get_threshold() == before
