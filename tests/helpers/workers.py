"""Real evaljobs processes for integration tests: ``evaljobs worker`` (→ Dramatiq's CLI) and the command
line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from helpers.paths import CHILD_PYTHONPATH

ROOT = Path(__file__).resolve().parents[2]  # the repository (tests/helpers/workers.py)


class WorkerProcess:
    """``evaljobs worker`` in its own process group, so a test can SIGKILL the whole worker."""

    def __init__(self, broker_url: str, db_url: str, *, threads: int = 4, processes: int = 1,
                 env: dict[str, str] | None = None, log: Path | None = None, verbose: bool = False,
                 prefix: list[str] | None = None):
        """``prefix`` runs the worker through a command, e.g. ``ip netns exec NS`` (``Machine.command()``):
        it must exec the worker in the same process, so that killing its group kills the worker."""
        self.env = dict(os.environ)
        self.env.update({
            "EVALJOBS_BROKER_URL": broker_url,
            "EVALJOBS_DATABASE_URL": db_url,
            "EVALJOBS_HEARTBEAT_TIMEOUT_MS": "2500",
            "PYTHONPATH": CHILD_PYTHONPATH,
        })
        self.env.update(env or {})
        self.args = [*(prefix or []), sys.executable, "-m", "evaljobs", "worker", "--threads", str(threads),
                     "--processes", str(processes)] + (["--verbose"] if verbose else [])
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> "WorkerProcess":
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.args, env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self

    def kill(self) -> None:
        """SIGKILL the worker and its children: nothing gets to ack or clean up."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM: Dramatiq's graceful stop (finish current messages, requeue the rest)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else None

    def __enter__(self) -> "WorkerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.terminate(10)


class CommandProcess(WorkerProcess):
    """Another ``evaljobs`` command (``run --wait``, ``recover``) with a worker's environment, in its
    own process group: a test kills it (SIGKILL) as it kills a worker."""

    def __init__(self, broker_url: str, db_url: str, *args: str, env: dict[str, str] | None = None,
                 log: Path | None = None):
        super().__init__(broker_url, db_url, env=env, log=log)
        self.args = [sys.executable, "-m", "evaljobs", *args]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def wait_until(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def one_result_on(worker: WorkerProcess, db_url: str, *args: str, env: dict[str, str] | None = None,
                  timeout: float = 120) -> Any:
    """``evaljobs run ARGS --db DB_URL --wait --json`` (a submitter) while ``worker`` runs; the one result
    of the one run the database then holds."""
    from evaljobs import store  # the benchmark scripts import this module without a database

    with worker:
        ran = evaljobs_cli("run", *args, "--db", db_url, "--wait", "--json", env=env, timeout=timeout)
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr
    store.connect(db_url)
    (run,) = store.list_runs()
    (result,) = store.list_results(run.id)
    return result


def evaljobs_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """The real command line, in a subprocess (as an operator would run it)."""
    full_env = dict(os.environ, PYTHONPATH=CHILD_PYTHONPATH)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "evaljobs", *args], env=full_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@contextmanager
def pool_thread(broker: str, db: str, **options: Any) -> Iterator[None]:
    """An elastic pool (``run_pool``: 1 to 2 workers on the bulk lane) in a thread of this process, with
    ``options`` (its ``health_port``, ``metrics_port``); stopped and joined at the end."""
    from evaljobs.workers.serve import run_pool

    stop = threading.Event()
    arguments = {"min": 1, "max": 2, "idle_seconds": 5, "lane": "bulk", "broker": broker, "db": db,
                 "stop": stop, **options}
    pool = threading.Thread(target=run_pool, kwargs=arguments, daemon=True)
    pool.start()
    try:
        yield
    finally:
        stop.set()
        pool.join(30)
