"""Provider API keys live in the environment only: after a run, the key is found nowhere else.

A recognizable fake key (``sk-evaljobs-FAKE-…``) is exported for two provider entries: the
simulated provider, and a provider that *echoes the key back* in its error messages, as real
ones do ("Incorrect API key provided: sk-…"). A real worker process evaluates a run through
Redis; then every place the key could leak to is searched: the database (a dump of every
table, and the SQLite files byte for byte), the Redis keyspace (every key, and an uncompressed
RDB snapshot) and the messages seen in the queues during the run, every event published, every
report format, every command's output, the worker's log and every error text.
"""
from __future__ import annotations

import json
import logging
import secrets
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.cli import main
from evaljobs.reports.build import render_json, render_markdown, render_table
from helpers import Events, Fleet, assert_every_pair_once, observe, postgres_rows

pytestmark = [pytest.mark.redis]

KEY_ENV = "EVALJOBS_TEST_API_KEY"

CATALOG = """
name: secrets
scenarios:
  - key: passes
    prompt: "[sim: say all good]"
    expect: {contains: [all good]}
  - key: fails
    prompt: "[sim: say nope]"
    expect: {contains: ["yes"]}
  - key: uses-a-tool
    prompt: '[sim: call lookup {"id": "7"}] [sim: say found it]'
    tools:
      - {name: lookup, parameters: {type: object, properties: {id: {type: string}}}, returns: {ok: true}}
    expect: {contains: [found], tools: [lookup]}
  - key: flaky
    prompt: "[sim: fail-first 1 500] [sim: say recovered]"
    expect: {contains: [recovered]}
  - key: broken
    prompt: "[sim: status 503 down]"
"""


class Echoer:
    """A provider that answers 401 with the caller's key in the message (and 500 for 'retry' prompts)."""

    def __init__(self):
        seen: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                auth = self.headers.get("authorization", "")
                seen.append(auth)
                token = auth.removeprefix("Bearer ").strip()
                retry = "retry" in json.dumps(body.get("messages"))
                status = 500 if retry else 401
                message = (f"upstream failed for key {token}" if retry
                           else f"Incorrect API key provided: {token}. Find your key at https://example.invalid")
                data = json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep the test output quiet
                pass

        self.seen = seen
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "Echoer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def leaks(key: str, places: dict[str, bytes | str]) -> list[str]:
    """The names of the places that contain ``key`` (bytes or text)."""
    found = []
    raw = key.encode()
    for name, content in places.items():
        if (raw in content) if isinstance(content, bytes) else (key in content):
            found.append(name)
    return found


def test_the_leak_search_finds_a_planted_key():
    """The search below is only worth something if it would find a leak."""
    key = "sk-evaljobs-FAKE-" + secrets.token_hex(8)
    assert leaks(
        key,
        {
            "clean": "nothing here",
            "text": f"error: bad key {key}!",
            "bytes": b"..." + key.encode(),
            "also clean": b"sk-evaljobs-FAKE-",
        },
    ) == ["text", "bytes"]


# -- where the key could go --------------------------------------------------------------------------------


def database_dump(db_url: str) -> dict[str, bytes | str]:
    """Every row of every table as text, plus (SQLite) the database files byte for byte."""
    places: dict[str, bytes | str] = {}
    if db_url.startswith("sqlite:///"):
        import sqlite3

        path = Path(db_url[len("sqlite:///"):])
        connection = sqlite3.connect(path)
        try:
            places["sqlite dump"] = "\n".join(connection.iterdump())
        finally:
            connection.close()
        for file in path.parent.glob(path.name + "*"):
            places[f"file {file.name}"] = file.read_bytes()
        return places
    places.update(postgres_rows(db_url))
    return places


def redis_dump(redis_url: str, tmp_path: Path) -> dict[str, bytes | str]:
    """Every key's value (the test may scan: it owns this Redis) and an uncompressed RDB snapshot."""
    import redis as redis_lib

    client = redis_lib.Redis.from_url(redis_url)
    places: dict[str, bytes | str] = {}
    try:
        for key in client.scan_iter(count=1000):
            kind = client.type(key).decode()
            if kind == "string":
                value = [client.get(key)]
            elif kind == "hash":
                value = [part for item in client.hgetall(key).items() for part in item]
            elif kind == "list":
                value = client.lrange(key, 0, -1)
            elif kind == "set":
                value = list(client.smembers(key))
            elif kind == "zset":
                value = [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
            else:
                value = [client.dump(key) or b""]
            places[f"redis {key.decode()}"] = key + b"\n" + b"\n".join(value)
        client.config_set("rdbcompression", "no")
    finally:
        client.close()
    rdb = tmp_path / "dump.rdb"
    host_port = redis_url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    subprocess.run(["redis-cli", "-h", host, "-p", port, "--rdb", str(rdb)], check=True, capture_output=True,
                   timeout=30)
    places["redis rdb snapshot"] = rdb.read_bytes()
    return places


class QueueWatcher:
    """Copies every message body that passes through the queues while the run goes on."""

    def __init__(self, redis_url: str, queue: str):
        import redis as redis_lib

        self.client = redis_lib.Redis.from_url(redis_url)
        self.hashes = [f"dramatiq:{queue}.msgs", f"dramatiq:{queue}.DQ.msgs", f"dramatiq:{queue}.XQ.msgs"]
        self.bodies: dict[bytes, bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            for name in self.hashes:
                self.bodies.update(self.client.hgetall(name))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.client.close()


def command_outputs(cli, run_id: str, db_url: str) -> dict[str, str]:
    """What `evaljobs show/runs/report` print, in every format `report` offers."""
    outputs = {}
    report_command = main.commands["report"]
    formats = next(p for p in report_command.params if p.name == "fmt").type.choices
    for fmt in formats:
        result = cli("report", run_id, "--format", fmt, "--db", db_url)
        assert result.exit_code == 0, result.output
        outputs[f"report --format {fmt}"] = result.output
    for args in (["show", run_id, "--json"], ["show", run_id], ["runs", "--json"]):
        result = cli(*args, "--db", db_url)
        assert result.exit_code == 0, result.output
        outputs[" ".join(args[:1] + args[2:])] = result.output
    return outputs


def renderings(run_id: str) -> dict[str, str]:
    """The report in every renderer the package has (html and junit when present)."""
    info = store.get_run(run_id)
    results = store.list_results(run_id)
    out = {"render_json": render_json(info.report), "render_markdown": render_markdown(info.report),
           "render_table": render_table(info.report)}
    try:
        from evaljobs.reports.junit import render_junit

        out["render_junit"] = render_junit(info.report, results)
    except ImportError:
        pass
    try:
        from evaljobs.reports.html import render_html

        out["render_html"] = render_html(info.report, results)
    except ImportError:
        pass
    return out


# -- the run ----------------------------------------------------------------------------------------------


@pytest.fixture
def providers(tmp_path, monkeypatch, simulated_provider):
    key = "sk-evaljobs-FAKE-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, key)
    sim = simulated_provider(latency=0.02, export=False)
    with Echoer() as echoer:
        path = tmp_path / "providers.yaml"
        path.write_text("providers:\n"
                        f"  keyed:\n    base_url: {sim.url}\n    api_key_env: {KEY_ENV}\n"
                        f"  echoer:\n    base_url: {echoer.url}\n    api_key_env: {KEY_ENV}\n")
        monkeypatch.setenv("EVALJOBS_PROVIDERS", str(path))
        for name, value in {"EVALJOBS_MAX_RETRIES": "2", "EVALJOBS_MIN_BACKOFF": "0.05",
                            "EVALJOBS_MAX_BACKOFF": "0.2"}.items():
            monkeypatch.setenv(name, value)
        yield key, echoer


def secrets_catalog():
    text = CATALOG + ("  - key: rejected-key\n    prompt: 'hello'\n"
                      "  - key: retry-echo\n    prompt: 'please retry'\n")
    return loads_catalog(text, source="secrets.yaml")


def test_the_api_key_appears_nowhere_after_a_run(cli, redis_url, db_url, providers, tmp_path, caplog):
    key, echoer = providers
    catalog, models = secrets_catalog(), ["keyed/m", "echoer/m"]
    fleet = Fleet(redis_url, db_url, tmp_path / "logs", count=1, threads=4)
    with Session(db=db_url, broker=redis_url) as session:
        binding = session.binding()
        run = store.create_run(catalog, models, strategy="fanout")
        seen = Events(redis_url, run.id)
        watcher = QueueWatcher(redis_url, binding.queue)
        fleet.start()
        try:
            binding.actors.start_run.send(run.id)
            session.wait(run.id, timeout=120, poll=0.5)
        finally:
            fleet.stop()
            watcher.close()
        observed = assert_every_pair_once(run.id, catalog, models, seen, log=fleet.log_text())
        seen.close()

        # The same catalog in this process (the sequential strategy), with every log record captured.
        with caplog.at_level(logging.DEBUG):
            inline = session.submit(catalog, models, strategy="sequential")
        assert inline.report is not None

    # The key was really sent (so it could have leaked), and the echoing provider really echoed it.
    assert f"Bearer {key}" in echoer.seen
    results = {r.scenario_key + " × " + r.model: r for r in store.list_results(run.id)}
    rejected = results["rejected-key × echoer/m"]
    assert rejected.status == "errored" and rejected.error.startswith(
        "HTTP 401 from provider: Incorrect API key provided: ***"
    ), rejected.error
    assert results["retry-echo × echoer/m"].error.startswith(
        "HTTP 500 from provider: upstream failed for key ***"
    )
    assert results["flaky × keyed/m"].status == "passed"

    places: dict[str, bytes | str] = {}
    places.update(database_dump(db_url))
    places.update(redis_dump(redis_url, tmp_path))
    places.update({f"queued message {i}": body for i, body in enumerate(watcher.bodies.values())})
    places.update({f"event {i}": data for i, data in enumerate(seen.raw)})
    places.update(renderings(run.id))
    places.update(renderings(inline.id))
    places.update(command_outputs(cli, run.id, db_url))
    places.update({f"log {path.name}": path.read_bytes() for path in (tmp_path / "logs").glob("*.log")})
    places["this process's log"] = caplog.text
    for run_id in (run.id, inline.id):
        places.update(
            {f"error {r.scenario_key} × {r.model}": r.error or "" for r in store.list_results(run_id)}
        )
    assert watcher.bodies, "the watcher saw no message: the queue search proves nothing"
    assert any(b"traceback" in body for body in watcher.bodies.values()), \
        "no retried message was seen (Dramatiq stores the exception text in it)"
    assert leaks(key, places) == []
    observe("secret-search", places=len(places), leaks=0, db=db_url.split(":", 1)[0], **observed)
