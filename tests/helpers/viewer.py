"""``evaljobs view`` as a real process on a free loopback port, for the viewer's tests and benchmark."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from helpers.paths import CHILD_PYTHONPATH
from helpers.servers import free_port
from helpers.workers import ROOT


class Viewer:
    """``evaljobs view`` as a process, on a free loopback port."""

    def __init__(self, db_url: str, broker: str, log: Path, *, extra: list[str] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, PYTHONPATH=CHILD_PYTHONPATH,
                   EVALJOBS_HEARTBEAT_TIMEOUT_MS="3000")
        self.log = log
        self._out = open(log, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "evaljobs",
                "view",
                "--db",
                db_url,
                "--broker",
                broker,
                "--port",
                str(self.port),
                *extra,
            ],
            env=env,
            cwd=ROOT,
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while b"evaljobs view: http://" not in log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"evaljobs view did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        finally:
            self._out.close()


def finished_run(catalog, models: list[str], results) -> str:
    """A run of ``catalog`` × ``models`` holding ``results`` (Result objects), finalized with its report."""
    from evaljobs import store
    from evaljobs.reports.build import build_report

    run = store.create_run(catalog, models, strategy="sequential")
    store.mark_running(run.id)
    for result in results:
        store.record_result(run.id, result)
    store.finalize(run.id, build_report)
    return run.id


@contextmanager
def viewer_and_browser(chromium: str, folder: Path, db_url: str, *, broker: str = "memory",
                       extra: list[str] = ()):
    """``evaljobs view`` over ``db_url`` and a headless Chromium, both stopped on the way out."""
    from helpers.browser import Browser

    viewer = Viewer(db_url, broker, folder / "view.log", extra=extra)
    browser = Browser(chromium, folder / "profile")
    try:
        yield viewer, browser
    finally:
        browser.close()
        viewer.close()
