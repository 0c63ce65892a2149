"""A provider's or a catalog's terminal control sequences never reach a terminal raw (issue 40.16).

A provider the test wrote answers every request 400 with an error text carrying a window title
(OSC 0), a clipboard write (OSC 52), a screen clear, a green "ALL PAIRS PASSED" and a one-byte CSI
(0x9b); the catalog's name carries a title sequence. ``run``, ``show``, ``runs``, ``report`` in every
format and ``compare`` are real ``evaljobs`` processes: their output holds no control character but
newline and tab, the sequences are shown as ``\\u001b…``, the stored error is the provider's text
as sent, and a JSON report still decodes to it.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from evaljobs.printable import printable
from helpers import send_json, serving, url_of

ROOT = Path(__file__).resolve().parents[2]
EVIL = ("boom \x1b]0;pwned-title\x07 \x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[H\x1b[32mALL PAIRS PASSED\x1b[0m "
        "\x9b31m \u202egnp.exe")
#: What a terminal acts on: C0 but newline and tab, DEL, C1, bidirectional overrides.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def evil_provider():
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            send_json(self, 400, {"error": {"message": EVIL, "type": "invalid_request_error"}})

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as server:
        yield url_of(server)


def _evaljobs(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    env.update(PYTHONPATH=str(ROOT), EVALJOBS_DATABASE_URL=f"sqlite:///{cwd / 'runs.db'}",
               EVALJOBS_PROVIDERS=str(cwd / "providers.yaml"))
    return subprocess.run([sys.executable, "-m", "evaljobs", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_control_sequences_from_a_provider_and_a_catalog_are_shown_escaped(tmp_path, evil_provider):
    (tmp_path / "providers.yaml").write_text(f"providers:\n  evil:\n    base_url: {evil_provider}\n")
    (tmp_path / "ctl.yaml").write_text('name: "ctl\\e]0;catalog-title\\a"\nscenarios:\n'
                                      "  - key: a\n    prompt: hi\n    expect: {contains: [ok]}\n")
    outputs, stdouts = {}, {}
    for name in ("first", "second"):
        done = _evaljobs("run", "ctl.yaml", "-m", "evil/m", cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        outputs[f"run {name}"] = done.stdout + done.stderr
    # Each command once, a process each (every start costs CPU: issue 42 item 6); `runs` first, for the ids
    # `compare` takes, and the JSON outputs are decoded from the same runs below.
    commands = [["runs"], ["show", "latest"], ["show", "latest", "--json"], ["compare"],
                *(["report", "latest", "--format", f] for f in ("table", "md", "json", "junit", "html"))]
    for command in commands:
        if command == ["compare"]:
            command = ["compare", *(line.split()[0] for line in stdouts["runs"].splitlines()[1:])]
            assert len(command) == 3, stdouts["runs"]
        done = _evaljobs(*command, cwd=tmp_path)
        assert done.returncode in (0, 1), (command, done.stderr)
        outputs[" ".join(command)] = done.stdout + done.stderr
        stdouts[" ".join(command)] = done.stdout
    for command, text in outputs.items():
        assert not RAW.findall(text), (command, sorted(set(RAW.findall(text))))
    shown = printable(EVIL)
    assert "\\u001b]52;c;ZXZpbA==\\u0007" in shown and "\\u009b31m" in shown
    assert shown[:60] in outputs["show latest"] and shown in outputs["run first"]
    # the data is kept as the provider sent it, and JSON still decodes to it
    with sqlite3.connect(tmp_path / "runs.db") as connection:
        stored = {row[0] for row in connection.execute("SELECT error FROM result")}
    assert stored == {f"HTTP 400 from provider: {EVIL}"}
    report = json.loads(stdouts["report latest --format json"])
    assert report["results"][0]["error"] == f"HTTP 400 from provider: {EVIL}"
    detail = json.loads(stdouts["show latest --json"])
    assert detail["results"][0]["error"] == f"HTTP 400 from provider: {EVIL}"


def test_printable_keeps_text_and_json_whole():
    plain = "plain text\n\twith a tab, ümlauts and 漢字"
    assert printable(plain) == plain
    text = json.dumps({"e": "a\x9bb\u202ec"}, ensure_ascii=False)
    assert json.loads(printable(text)) == {"e": "a\x9bb\u202ec"}
