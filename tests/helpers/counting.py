"""A provider evaljobs did not write, as a process: ``counting_provider.py`` on a free loopback port.

Tests compare evaljobs' figures (requests, 429s, error rate) with what this server counted itself,
never with the simulated provider's own counters.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from helpers.servers import free_port

SERVER = Path(__file__).parent / "counting_provider.py"


class CountingServer:
    """The counting provider (``cap`` requests at once, 429 beyond; ``announce``: OpenAI's
    ``x-ratelimit-*`` headers) as a process of its own."""

    def __init__(self, *, cap: int, latency: float, announce: bool = False, host: str = "127.0.0.1"):
        self.host = host  # a loopback address: another network namespace's worker routes to it
        self.port = free_port()
        args = [sys.executable, str(SERVER), "--port", str(self.port), "--cap", str(cap),
                "--latency", str(latency), "--host", host]
        self.proc = subprocess.Popen(args + (["--announce"] if announce else []), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:  # ready once it answers (a condition, not a sleep)
            try:
                self.counts()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the counting provider did not start") from None
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def counts(self) -> dict[str, int]:
        """``requests``, ``rate_limited``, ``answered`` and ``max_in_flight``, as the server counted them."""
        with urllib.request.urlopen(f"http://{self.host}:{self.port}/counts", timeout=5) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def counting_files(folder: Path, server: CountingServer, *, scenarios: int,
                   provider: str = "counted") -> tuple[Path, Path]:
    """A catalog of ``scenarios`` one-turn scenarios the server passes ("ok"), and a providers file naming
    the server ``provider`` (OpenAI wire format, no key, not streamed)."""
    catalog = folder / "counted.yaml"
    catalog.write_text("name: counted\ndefaults: {max_turns: 1}\nscenarios:\n" + "".join(
        f"  - key: s{i:02d}\n    prompt: \"question {i}\"\n    expect: {{contains: ['ok']}}\n"
        for i in range(scenarios)))
    providers = folder / "providers.yaml"
    providers.write_text(f'providers:\n  {provider}: {{api: openai, base_url: "{server.url}", '
                         f'api_key_env: null, stream: false}}\n')
    return catalog, providers
