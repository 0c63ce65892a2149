"""``evaljobs recover`` never takes the pairs of a run its own live ``evaljobs run`` is evaluating.

An in-process run keeps its messages in its process's memory: ``recover`` from another shell took
every missing pair for lost and evaluated it again (26 provider calls for 20 pairs, issue 40.15).
The run's process holds a lease on it (``evaljobs/store/leases.py``) while it lives. A counting
provider the test wrote holds every request at a gate, so the run is alive, mid-way, for as long as
the test needs; the calls it counted are the figure.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evaljobs import store
from helpers.paths import CHILD_PYTHONPATH
from helpers import send_json, wait_until

ROOT = Path(__file__).resolve().parents[2]
PAIRS = 20


class GatedProvider:
    """An OpenAI-compatible chat endpoint answering ``ok`` once its gate is open; counts requests."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.calls = 0
        lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                with lock:
                    owner.calls += 1
                owner.gate.wait(120)
                send_json(self, 200, {"id": "c", "object": "chat.completion", "model": "m", "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gated(tmp_path):
    provider = GatedProvider()
    yield provider
    provider.close()


def _setup(tmp_path: Path, provider: GatedProvider) -> tuple[Path, Path, str, dict[str, str]]:
    catalog = tmp_path / "twenty.yaml"
    lines = ["name: twenty", "scenarios:"]
    for i in range(PAIRS):
        lines += [f"  - key: s{i:02d}", f'    prompt: "question {i}"', "    expect: {contains: [ok]}"]
    catalog.write_text("\n".join(lines) + "\n")
    providers = tmp_path / "providers.yaml"
    providers.write_text(f"providers:\n  counting:\n    base_url: {provider.url}\n")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    env.update(PYTHONPATH=CHILD_PYTHONPATH, EVALJOBS_GOVERNOR="off")
    return catalog, providers, db, env


def _evaljobs(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evaljobs", *args], env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _the_run(db: str) -> store.RunInfo | None:
    store.connect(db)
    try:
        runs = store.list_runs(limit=1)
    except store.StoreError:
        return None
    return runs[0] if runs else None


def test_recover_refuses_a_run_its_live_process_is_evaluating(tmp_path, gated):
    catalog, providers, db, env = _setup(tmp_path, gated)
    run = _evaljobs(["run", str(catalog), "-m", "counting/m", "--db", db, "--providers", str(providers),
                     "--width", "4"], env, tmp_path)
    recover = None
    try:
        assert wait_until(lambda: gated.calls >= 4, 60), run.stderr and run.poll()
        info = _the_run(db)
        assert info is not None and info.persisted == 0
        in_flight = gated.calls
        recover = _evaljobs(["recover", info.id, "--db", db, "--providers", str(providers)], env, tmp_path)
        # It ends at once (refused), or starts calling the provider itself (the bug): either ends the wait.
        wait_until(lambda: recover.poll() is not None or gated.calls > in_flight, 60)
        gated.gate.set()
        _, recover_err = recover.communicate(timeout=120)
        _, run_err = run.communicate(timeout=120)
    finally:
        gated.gate.set()
        for process in (run, recover):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert recover.returncode == 2, recover_err
    errors = [line for line in recover_err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in recover_err, recover_err
    assert f"run {info.id} is being evaluated by process {run.pid} on " in errors[0], errors[0]
    assert run.returncode == 0, run_err
    assert gated.calls == PAIRS  # each pair once: the counting provider's own figure
    assert _the_run(db).status == "complete"


def test_recover_takes_over_once_the_runs_process_is_dead(tmp_path, gated):
    """A ``kill -9``-ed run is resumed at once: its pid is gone, whatever its lease's age."""
    catalog, providers, db, env = _setup(tmp_path, gated)
    run = _evaljobs(["run", str(catalog), "-m", "counting/m", "--db", db, "--providers", str(providers),
                     "--width", "4"], env, tmp_path)
    try:
        assert wait_until(lambda: gated.calls >= 4, 60)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate(timeout=60)
    info = _the_run(db)
    assert info is not None and info.status == "running"
    gated.gate.set()
    recover = _evaljobs(["recover", info.id, "--db", db, "--providers", str(providers)], env, tmp_path)
    out, err = recover.communicate(timeout=180)
    assert recover.returncode == 0, err
    assert f"{info.id}: re-enqueued {PAIRS} of {PAIRS} missing pairs" in out + err
    assert _the_run(db).status == "complete"
