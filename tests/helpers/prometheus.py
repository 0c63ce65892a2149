"""A real Prometheus server (Debian's ``prometheus`` package) scraping targets on loopback, and PromQL.

Its configuration and its storage live in a temp folder; it listens on a free loopback port and
scrapes every ``interval`` seconds. ``scripts/test`` installs the package like redis-server.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers.servers import ServerError, free_port

STARTUP_SECONDS = 60.0


class PrometheusServer:
    def __init__(self, targets: list[str], *, interval: float = 0.5,
                 authorization: str | None = None, metrics_path: str = "/metrics") -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise ServerError("prometheus not found on PATH: install it (scripts/test does: "
                              "apt-get install -y prometheus)")
        self.dir = Path(tempfile.mkdtemp(prefix="evaljobs-prometheus-"))
        self.port = free_port()
        auth = f"    authorization: {{credentials: {json.dumps(authorization)}}}\n" if authorization else ""
        every = f"{int(interval * 1000)}ms"
        config = (f"global:\n  scrape_interval: {every}\n  scrape_timeout: {every}\n"
                  f"scrape_configs:\n  - job_name: evaljobs\n    metrics_path: {metrics_path}\n{auth}"
                  f"    static_configs:\n      - targets: {json.dumps(targets)}\n")
        (self.dir / "prometheus.yml").write_text(config)
        self.log = self.dir / "prometheus.log"
        self.process = subprocess.Popen(
            [binary, f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=self.log.open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"prometheus exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise ServerError(f"prometheus did not become ready within {STARTUP_SECONDS}s:\n{self.log_tail()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return ""

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector ``promql`` evaluates to now (the HTTP API's ``/api/v1/query``)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def value(self, promql: str) -> float | None:
        """The single value of ``promql`` (None: no series)."""
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, promql: str, condition: Callable[[list[dict[str, Any]]], bool],
                 timeout: float = 120.0) -> list[dict[str, Any]]:
        """Poll ``promql`` until ``condition(result)`` holds; the last result either way."""
        deadline = time.monotonic() + timeout
        result = self.query(promql)
        while not condition(result) and time.monotonic() < deadline:
            time.sleep(0.25)
            result = self.query(promql)
        return result

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
