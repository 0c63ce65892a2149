"""Cost as the provider bills it under prompt caching, against a server we did not write (issue 39).

The server here is a few lines of ``http.server`` in this file (not the built-in simulator): it answers
the OpenAI chat-completions and the Anthropic Messages API with the usage each API reports when its
prompt cache is used — OpenAI's ``prompt_tokens_details.cached_tokens`` counted inside
``prompt_tokens``, Anthropic's ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` beside
``input_tokens`` — and the model version that answered. The presets' published prices (not a price
written by the test) must give exactly what the price pages say for that usage:

* gpt-4o-mini ($0.15/M input, $0.075/M cached input, $0.60/M output): 12,000 prompt tokens of which
  10,240 cached, 300 output = 1,760 × 0.15 + 10,240 × 0.075 + 300 × 0.60 = $0.001212
  (without caching $0.001980: saved $0.000768).
* claude-3-5-haiku ($0.80/M input, $1/M 5-minute cache write, $0.08/M cache hit, $4/M output): 50 input,
  2,000 written, 10,000 read, 300 output = 40 + 2,000 + 800 + 1,200 millionths = $0.004040
  (without caching $0.010840: saved $0.006800).

Before: both were priced as if every prompt token paid the full input price ($0.001980, $0.010840).
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from helpers import Viewer

from evaljobs import store
from evaljobs.catalog.modelspec import load_providers
from evaljobs.catalog.pricing import Usage
from evaljobs.providers.client import close_clients
from helpers.database import utc_now

OPENAI_USAGE = {"prompt_tokens": 12_000, "completion_tokens": 300, "total_tokens": 12_300,
                "prompt_tokens_details": {"cached_tokens": 10_240},
                "completion_tokens_details": {"reasoning_tokens": 0}}
ANTHROPIC_USAGE = {"input_tokens": 50, "cache_creation_input_tokens": 2_000,
                   "cache_read_input_tokens": 10_000, "output_tokens": 300}
OPENAI_COST, OPENAI_SAVED = 0.001212, 0.000768
ANTHROPIC_COST, ANTHROPIC_SAVED = 0.004040, 0.006800

CATALOG = """
name: cached
scenarios:
  - key: greet
    system: "A long system prompt and tool definitions the provider caches."
    prompt: "Say ok."
    expect: {contains: [ok]}
"""


class BillingServer:
    """Answers both APIs with cached-token usage; ``fingerprint`` is the OpenAI backend that answers."""

    def __init__(self) -> None:
        self.fingerprint = "fp_aaaa1111"
        self.paths: list[str] = []
        self.bodies: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                server.paths.append(self.path)
                server.bodies.append(body)
                if self.path.endswith("/messages"):
                    answer = {"id": "msg_1", "type": "message", "role": "assistant",
                              "model": "claude-3-5-haiku-20241022",
                              "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                              "stop_sequence": None, "usage": ANTHROPIC_USAGE}
                else:
                    answer = {"id": "c1", "object": "chat.completion", "model": f"{body['model']}-2024-07-18",
                              "system_fingerprint": server.fingerprint,
                              "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                           "finish_reason": "stop"}],
                              "usage": OPENAI_USAGE}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def billing():
    server = BillingServer()
    yield server
    server.close()


@pytest.fixture
def env(tmp_path, billing, monkeypatch):
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/cache.db")
    monkeypatch.setenv("EVALJOBS_MAX_RETRIES", "0")
    monkeypatch.delenv("EVALJOBS_BROKER_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai-cache")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-anthropic-cache")
    providers = tmp_path / "providers.yaml"
    # Only where to call: the prices are the presets' published ones. `lab` has prices without cache
    # prices: its cached tokens make an unknown cost.
    providers.write_text(f"""providers:
  openai: {{base_url: "{billing.url}", stream: false}}
  anthropic: {{base_url: "{billing.url}", stream: false}}
  lab: {{api: openai, base_url: "{billing.url}", api_key_env: null, stream: false,
        prices: {{"*": [0.15, 0.60]}}}}
""")
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(providers))
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    yield tmp_path
    close_clients()


def run(cli, env, *models: str) -> str:
    args = ["run", str(env / "catalog.yaml"), "--broker", "memory", "--strategy", "sequential"]
    for model in models:
        args += ["-m", model]
    cli.ok(*args)
    return store.list_runs()[0].id


def test_cached_pairs_cost_what_the_price_pages_say_and_reports_show_the_saving(cli, env, billing):
    run_id = run(cli, env, "openai/gpt-4o-mini", "anthropic/claude-3-5-haiku-20241022")
    assert sorted(billing.paths) == ["/v1/chat/completions", "/v1/messages"]
    rows = {r.model: r for r in store.list_results(run_id)}
    gpt, claude = rows["openai/gpt-4o-mini"], rows["anthropic/claude-3-5-haiku-20241022"]
    assert gpt.status == claude.status == "passed"
    assert gpt.cost == pytest.approx(OPENAI_COST, abs=1e-12)
    assert claude.cost == pytest.approx(ANTHROPIC_COST, abs=1e-12)
    assert (gpt.input_tokens, gpt.cache_read_tokens, gpt.cache_write_tokens, gpt.reasoning_tokens) == (
        12_000, 10_240, 0, 0)
    assert (claude.input_tokens, claude.cache_read_tokens, claude.cache_write_tokens) == (
        12_050, 10_000, 2_000)
    assert gpt.cache_saving == pytest.approx(OPENAI_SAVED, abs=1e-12)
    assert claude.cache_saving == pytest.approx(ANTHROPIC_SAVED, abs=1e-12)
    # What answered, as the provider said it.
    assert gpt.answered_by == "gpt-4o-mini-2024-07-18 (fp_aaaa1111)"
    assert claude.answered_by == "claude-3-5-haiku-20241022"

    report = json.loads(cli.ok("report", run_id, "--format", "json").output)
    models = {m["model"]: m for m in report["models"]}
    assert models["openai/gpt-4o-mini"]["cache"] == {
        "pairs": 1, "input_tokens": 12_000, "read_tokens": 10_240, "write_tokens": 0,
        "saved": OPENAI_SAVED, "saving_unknown": 0}
    assert models["anthropic/claude-3-5-haiku-20241022"]["cache"]["saved"] == ANTHROPIC_SAVED
    assert report["summary"]["cache"]["read_tokens"] == 20_240
    assert report["summary"]["cache"]["saved"] == pytest.approx(OPENAI_SAVED + ANTHROPIC_SAVED)
    assert report["summary"]["cost"] == pytest.approx(OPENAI_COST + ANTHROPIC_COST)
    note = "prompt cache: 20,240 of 24,050 input tokens read, 2,000 written; saved $0.0076"
    for fmt in ("table", "md", "html"):
        assert note in cli.ok("report", run_id, "--format", fmt).output, fmt
    junit = cli.ok("report", run_id, "--format", "junit").output
    assert ('<property name="prompt_cache" value="prompt cache: 10,240 of 12,000 input tokens read; '
            'saved $0.0008" />') in junit


def test_cached_tokens_without_a_cache_price_are_an_unknown_cost(cli, env):
    run_id = run(cli, env, "lab/gpt-4o-mini")
    (row,) = store.list_results(run_id)
    assert row.cache_read_tokens == 10_240 and row.cost is None and row.cache_saving is None
    table = cli.ok("report", run_id, "--format", "table").output
    assert "saving unknown (no cache price known)" in table and "cost unknown for 1 pair" in table


def test_compare_shows_the_cache_and_a_changed_model_version(cli, env, billing):
    before = run(cli, env, "openai/gpt-4o-mini")
    billing.fingerprint = "fp_bbbb2222"  # the provider moved the model to another backend
    after = run(cli, env, "openai/gpt-4o-mini")
    text = cli.ok("compare", before, after).output
    assert ("model version changed: openai/gpt-4o-mini answered as gpt-4o-mini-2024-07-18 (fp_aaaa1111) in "
            f"{before}, as gpt-4o-mini-2024-07-18 (fp_bbbb2222) in {after}") in text
    assert f"{after}: prompt cache: 10,240 of 12,000 input tokens read; saved $0.0008" in text
    data = json.loads(cli.ok("compare", before, after, "--json").output)
    assert data["model_versions"] == [{"model": "openai/gpt-4o-mini",
                                       "a": ["gpt-4o-mini-2024-07-18 (fp_aaaa1111)"],
                                       "b": ["gpt-4o-mini-2024-07-18 (fp_bbbb2222)"]}]
    assert data["summary"]["cache_b"]["saved"] == OPENAI_SAVED
    same = json.loads(cli.ok("compare", after, after, "--json").output)
    assert "model_versions" not in same

    # The viewer says the same: the cache and its saving, who answered, the version change.
    viewer = Viewer(f"sqlite:///{env}/cache.db", "memory", env / "view.log")
    try:
        page = httpx.get(f"{viewer.url}/runs/{after}", timeout=30).text
        assert "prompt cache: 10,240 of 12,000 input tokens read; saved $0.0008" in page
        scenario = httpx.get(f"{viewer.url}/runs/{after}/scenarios/greet", timeout=30).text
        answered = "gpt-4o-mini-2024-07-18 (fp_bbbb2222)"
        assert f'answered by <span class="answered-by">{answered}</span>' in scenario
        assert "10240 cache read, 0 cache written; saved $0.0008" in scenario
        compared = httpx.get(f"{viewer.url}/compare?a={before}&b={after}", timeout=30).text
        assert ("Model version changed: openai/gpt-4o-mini answered as gpt-4o-mini-2024-07-18 (fp_aaaa1111) "
                "in A, as gpt-4o-mini-2024-07-18 (fp_bbbb2222) in B.") in compared
        assert f"{after}: prompt cache: 10,240 of 12,000 input tokens read; saved $0.0008" in compared
    finally:
        viewer.close()


def test_batch_prices_compose_with_cache_prices():
    """A batch answer is billed at half of each price, cache reads and writes included (no batch price)."""
    anthropic = load_providers().get("anthropic")
    usage = Usage(12_050, 300, cache_read_tokens=10_000, cache_write_tokens=2_000)
    haiku = "claude-3-5-haiku-20241022"
    assert anthropic.cost(haiku, usage, batch=True) == pytest.approx(ANTHROPIC_COST / 2)
    assert anthropic.cache_saving(haiku, usage, batch=True) == pytest.approx(
        ANTHROPIC_SAVED / 2)
    # A 1-hour cache write has its own price ($1.6/M for claude-3-5-haiku).
    hour = Usage(2_000, 0, cache_write_tokens=2_000, cache_write_1h_tokens=2_000)
    assert anthropic.cost("claude-3-5-haiku-20241022", hour) == pytest.approx(0.0032)


def test_a_schema_5_database_learns_the_cache_columns_and_reads_old_rows_back(db_url, tmp_path):
    """A database made before schema 6 gets the new columns; its rows read back with no caching (saving 0,
    not unknown) and no answering version, and new rows store both."""
    from evaljobs.catalog import parse_catalog
    from evaljobs.evaluation.result import Result

    store.connect(db_url)
    catalog = parse_catalog({"name": "old", "scenarios": [{"key": "s1", "prompt": "hi"}]}, source="old.yaml")
    old = store.create_run(catalog, ["m1"], strategy="fanout")
    store.record_result(old.id, Result("s1", "m1", "passed", score=1.0, cost=0.5))
    db = store.database.obj
    with db.connection_context():
        for column in ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "cache_saving",
                       "answered_by"):
            db.execute_sql(f'ALTER TABLE "result" DROP COLUMN "{column}"')
        store.SchemaVersion.delete().execute()
        store.SchemaVersion.create(version=5, applied_at=utc_now(), description="schema 5")
    store.connect(f"sqlite:///{tmp_path}/other.db")  # forget the open database, as a new process would
    store.connect(db_url)
    done = store.upgrade()
    assert [line for line in done if "cache" in line or "answered" in line or "reasoning" in line] == [
        "added column result.cache_read_tokens", "added column result.cache_write_tokens",
        "added column result.reasoning_tokens", "added column result.cache_saving",
        "added column result.answered_by"]
    (row,) = store.list_results(old.id)
    assert (row.cost, row.cache_read_tokens, row.cache_saving, row.answered_by, row.reasoning_tokens) == (
        0.5, 0, 0.0, None, None)
    new = store.create_run(catalog, ["m1"], strategy="fanout")
    store.record_result(new.id, Result("s1", "m1", "passed", score=1.0, cost=None, cache_read_tokens=7,
                                       cache_saving=None, answered_by="m1-2025 (fp_1)", reasoning_tokens=3))
    (row,) = store.list_results(new.id)
    assert (row.cost, row.cache_read_tokens, row.cache_saving, row.answered_by, row.reasoning_tokens) == (
        None, 7, None, "m1-2025 (fp_1)", 3)


def test_a_catalog_seed_is_sent_where_the_api_takes_one_and_noted_where_not(cli, env, billing):
    (env / "catalog.yaml").write_text(CATALOG.replace("scenarios:", "defaults: {seed: 42}\nscenarios:"))
    run_id = run(cli, env, "openai/gpt-4o-mini", "anthropic/claude-3-5-haiku-20241022")
    sent = {("messages" if "max_tokens" in body else "chat"): body for body in billing.bodies}
    assert sent["chat"]["seed"] == 42 and "seed" not in sent["messages"]
    rows = {r.model: r for r in store.list_results(run_id)}
    assert "seed" not in (rows["openai/gpt-4o-mini"].details.get("meta") or {})
    assert rows["anthropic/claude-3-5-haiku-20241022"].details["meta"]["seed"] == {
        "value": 42, "sent": False, "reason": "the Anthropic Messages API takes no seed"}


def test_a_providers_file_sets_cache_prices_and_a_bad_one_is_one_line(tmp_path):
    from evaljobs.catalog.modelspec import ModelSpecError

    path = tmp_path / "providers.yaml"
    head = "providers:\n  gw:\n    base_url: http://127.0.0.1:9/v1\n    prices:\n"
    path.write_text(head + "      m: {input: 1.0, output: 2.0, cached_input: 0.1, cache_write: 1.25}\n"
                    "      old: [1, 2]\n")
    gw = load_providers(path).get("gw")
    usage = Usage(1_000_000, 1_000_000, cache_read_tokens=500_000, cache_write_tokens=100_000)
    assert gw.cost("m", usage) == pytest.approx(0.4 + 0.05 + 0.125 + 2.0)
    assert gw.cost("old", usage) is None  # cached tokens, no cache price: unknown, not full or zero price
    assert gw.cost("old", Usage(1_000_000, 0)) == pytest.approx(1.0)
    path.write_text(head + "      m: {input: 1.0, output: 2.0, cached: 0.1}\n")
    with pytest.raises(ModelSpecError) as info:
        load_providers(path)
    message = str(info.value)
    assert "price for 'm'" in message and "'cached'" in message and "\n" not in message
