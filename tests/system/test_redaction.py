"""One redaction for every configured secret (issue 29 item 4), against a provider that echoes them.

A real HTTP provider on loopback answers every call with HTTP 400 and an error body that repeats
the request's headers back — raw, URL-encoded and base64, as gateways and proxies do in their
error pages. The providers file gives it an API key (``api_key_env``) and a gateway header from
``${GW_TOKEN}``. ``evaljobs run`` evaluates a catalog against it in a real process; then every
place a secret could reach is searched for every form of both values: the database file, ``run``'s
output, ``show`` and every ``report`` format (in a fresh process that never read the secrets, so
only what was stored is shown), and the viewer's pages.
"""
from __future__ import annotations

import base64
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, quote_plus

import httpx
import pytest
from helpers import ROOT, Viewer

from evaljobs import redact

CATALOG = """\
name: echoes
scenarios:
  - key: one
    prompt: hello
    expect: {contains: [hi]}
  - key: two
    prompt: hello again
    expect: {contains: [hi]}
"""


class HeaderEcho:
    """Answers 400 with every request header in the error message, in three encodings."""

    def __init__(self) -> None:
        seen: list[dict[str, str]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {name: self.headers.get(name, "") for name in ("X-Gateway-Token", "Authorization")}
                seen.append(headers)
                echoed = "; ".join(
                    f"{k}={v} (as written: {', '.join(written(v)[1:])})" for k, v in headers.items()
                )
                data = json.dumps({"error": {"message": f"bad request, you sent: {echoed}",
                                             "type": "invalid_request_error"}}).encode()
                self.send_response(400)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.seen = seen
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def written(value: str) -> list[str]:
    """How the value is written where it could leak: raw, URL-encoded two ways, base64 alone and
    inside a Basic credential."""
    return [value, quote(value, safe=""), quote_plus(value), base64.b64encode(value.encode()).decode(),
            base64.b64encode(f"user:{value}".encode()).decode()]


def forms(value: str) -> list[str]:
    """What to search for: each written form, the Basic one cut to the characters that only the
    value's bits make ('user:' is 5 bytes: characters 7 up to (5 + length) * 8 // 6)."""
    *plain, basic = written(value)
    return plain + [basic[7:(5 + len(value.encode())) * 8 // 6]]


def leaks(values: list[str], places: dict[str, str | bytes]) -> list[tuple[str, str]]:
    found = []
    for value in values:
        for form in forms(value):
            for name, content in places.items():
                if (form.encode() in content) if isinstance(content, bytes) else (form in content):
                    found.append((name, form))
    return found


def evaljobs(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("EVALJOBS_") and k not in ("GW_TOKEN", "GW_KEY")
    }
    full.update(PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-m", "evaljobs", *args], env=full, cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.fixture
def echo():
    server = HeaderEcho()
    yield server
    server.close()


def test_redact_scrubs_a_registered_secret_in_every_form():
    value = "gw-" + secrets.token_urlsafe(18) + " ;+/="
    redact.register_secret(value)
    text = " | ".join(written(value) + [json.dumps({"k": value})])
    scrubbed = redact.redact_text(text)
    assert all(form not in scrubbed for form in forms(value)), scrubbed
    assert redact.redact_value({"a": [text], "n": 1}) == {"a": [scrubbed], "n": 1}
    assert redact.redact_text("short abc stays") == "short abc stays"


def test_a_provider_echoing_its_headers_leaks_no_secret_anywhere(echo, tmp_path):
    token = "gwtok-" + secrets.token_urlsafe(24) + ";x y"  # characters that encode differently
    key = "sk-echo-" + secrets.token_hex(16)
    (tmp_path / "catalog.yaml").write_text(CATALOG, encoding="utf-8")
    (tmp_path / "providers.yaml").write_text(
        "providers:\n  gw:\n    api: openai\n"
        f"    base_url: {echo.url}\n    api_key_env: GW_KEY\n"
        "    headers: {X-Gateway-Token: \"${GW_TOKEN}\"}\n", encoding="utf-8")
    db = f"sqlite:///{tmp_path}/runs.db"
    env = {"GW_TOKEN": token, "GW_KEY": key, "EVALJOBS_MAX_RETRIES": "0", "EVALJOBS_GOVERNOR": "off"}
    ran = evaljobs("run", "catalog.yaml", "-m", "gw/m", "--providers", "providers.yaml", "--db", db,
                   "--strategy", "sequential", "--json", env=env, cwd=tmp_path)
    # The secrets were really sent (so they could leak), and really echoed back.
    assert any(
        h.get("X-Gateway-Token") == token and h.get("Authorization") == f"Bearer {key}" for h in echo.seen
    )
    run = json.loads(ran.stdout)["run"]
    places: dict[str, str | bytes] = {"run stdout": ran.stdout, "run stderr": ran.stderr}

    with sqlite3.connect(f"{tmp_path}/runs.db") as conn:
        errors = [row[0] for row in conn.execute("select error from result")]
        places["database dump"] = "\n".join(conn.iterdump())
    assert len(errors) == 2 and all("you sent: X-Gateway-Token=*** (as written: ***" in e for e in errors), (
        errors
    )
    for path in tmp_path.glob("runs.db*"):
        places[f"file {path.name}"] = path.read_bytes()

    fresh = {}  # a process that never read GW_TOKEN or GW_KEY: it shows what was stored
    for args in (["show", run["id"]], ["show", run["id"], "--json"], ["runs", "--json"]):
        out = evaljobs(*args, "--db", db, env=fresh, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        places[" ".join(args[:1] + args[2:])] = out.stdout + out.stderr
    for fmt in ("json", "md", "html", "junit", "table"):
        out = evaljobs("report", run["id"], "--format", fmt, "--db", db, env=fresh, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        places[f"report {fmt}"] = out.stdout

    viewer = Viewer(db, "memory", tmp_path / "view.log")
    try:
        with httpx.Client(base_url=viewer.url) as client:
            for path in ("/", f"/runs/{run['id']}", f"/runs/{run['id']}/scenarios/one"):
                page = client.get(path)
                assert page.status_code == 200, path
                places[f"viewer {path}"] = page.text
    finally:
        viewer.close()
    assert "X-Gateway-Token=***" in str(places[f"viewer /runs/{run['id']}/scenarios/one"])
    assert leaks([token, key], places) == []
