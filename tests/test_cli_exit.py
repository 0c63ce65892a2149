"""A command's exit leaves the heap out of the interpreter's last garbage collections (issue 42).

Why: finalization collected the whole heap of a run (~65,000 objects) more than once before the
process could end — 0.2-1 s of a first run's wall clock on a loaded machine. The probe is an exit
handler registered before the command starts, so it runs after the command's own (LIFO): it sees
the heap frozen, and the run it follows is complete and readable from a new process.
"""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

PROBE = """
import atexit, gc, sys
atexit.register(lambda: print(f"frozen at exit: {gc.get_freeze_count()}", flush=True))
from evaljobs.cli import main
sys.argv = ["evaljobs", *sys.argv[1:]]
main()
"""


def test_a_run_exits_with_its_heap_frozen_and_its_results_stored(tmp_path: Path) -> None:
    catalog = tmp_path / "one.yaml"
    catalog.write_text('name: one\nscenarios:\n  - key: hello\n    prompt: "Say hi [sim: say hi there]"\n'
                       '    expect: {contains: ["hi"]}\n', encoding="utf-8")
    db = tmp_path / "runs.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    env.update(EVALJOBS_SIM_LATENCY="0", EVALJOBS_SIM_JITTER="0")
    command = [sys.executable, "-c", PROBE, "run", str(catalog), "-m", "sim/fast", "--db", f"sqlite:///{db}"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("frozen at exit: ") and int(last.split(": ")[1]) > 0, done.stdout
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status, persisted, report IS NOT NULL FROM run").fetchall() == [
            ("complete", 1, 1)]
