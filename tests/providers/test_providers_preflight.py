"""Pre-flight checks, `evaljobs providers list/check`, `rerun --providers`, unknown costs and TTFT in results.

Everything runs against the simulated provider over real loopback HTTP and a
real SQLite/PostgreSQL store; a provider that must fail points at a port where
nothing listens.
"""
from __future__ import annotations

import json

import pytest
from playhouse.migrate import PostgresqlMigrator, SqliteMigrator, migrate

from evaljobs import store
from evaljobs.api import Session, UsageError, check_providers
from evaljobs.catalog import loads_catalog
from evaljobs.catalog.modelspec import load_providers
from evaljobs.providers.client import close_clients
from evaljobs.providers.preflight import problems
from evaljobs.reports.build import build_report, render_markdown, render_table
from evaljobs.evaluation.result import Result
from helpers import ROOT, free_port, utc_now

SUPPORT = str(ROOT / "examples/catalogs/support.yaml")
SECRET = "sk-preflight-secret-123"


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(stream_interval=0.002)


@pytest.fixture
def env(tmp_path, sim, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/pf.db")
    monkeypatch.setenv("EVALJOBS_MAX_RETRIES", "0")
    monkeypatch.delenv("EVALJOBS_BROKER_URL", raising=False)
    monkeypatch.delenv("EVALJOBS_PROVIDERS", raising=False)
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PF_KEY"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
    close_clients()




def providers_file(path, text: str) -> str:
    target = path / f"providers-{abs(hash(text))}.yaml"
    target.write_text(text)
    return str(target)


# -- the checks ---------------------------------------------------------------------------------


def test_problems_one_line_each_and_shared_problems_once(env, sim):
    path = providers_file(env, f"""
providers:
  files: {{base_url: "file:///etc/passwd"}}
  keyed: {{base_url: "{sim.url}", api_key_env: PF_KEY}}
  classic: {{api: azure, base_url: "https://res.openai.azure.com", api_version: null}}
  v1: {{api: azure, base_url: "https://res.openai.azure.com/openai/v1", api_key_env: null}}
  nohost: {{base_url: "http:///v1"}}
""")
    config = load_providers(path)
    found = problems(config, ["openai/gpt-4o-mini", "openai/gpt-4o", "files/m", "keyed/m", "classic/dep",
                              "v1/dep", "nohost/m", "nosuch/m", "sim/fast", "azure/dep"])
    assert all("\n" not in line for line in found)
    text = "\n".join(found)
    assert ("openai/gpt-4o-mini, openai/gpt-4o: provider 'openai' needs its API key in $OPENAI_API_KEY, "
            "which is not set") in text  # one line for both models of the provider
    assert "files/m: provider 'files' base_url 'file:///etc/passwd' must be an http:// or https:// URL, " \
           "not 'file://'" in text
    assert "keyed/m: provider 'keyed' needs its API key in $PF_KEY" in text
    assert "classic/dep: provider 'classic' is a classic Azure deployment URL without an api-version" in text
    assert "nohost/m: provider 'nohost' base_url 'http:///v1' has no host" in text
    assert "unknown provider 'nosuch'" in text
    assert "azure/dep: provider 'azure' has no base_url" in text
    assert not any(line.startswith(("v1/dep", "sim/fast")) for line in found)
    assert len(found) == 8


def test_api_check_providers_raises_usage_error_with_problems(env, monkeypatch):
    with pytest.raises(UsageError) as info:
        check_providers(["openai/gpt-4o-mini", "sim/fast"])
    assert info.value.problems == ["openai/gpt-4o-mini: provider 'openai' needs its API key in "
                                   "$OPENAI_API_KEY, which is not set; export it, or name another variable "
                                   "with api_key_env in a providers file (--providers FILE)"]
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    check_providers(["openai/gpt-4o-mini", "sim/fast"])  # nothing to say


def test_run_with_unusable_providers_exits_2_one_line_each_and_creates_no_run(cli, env):
    path = providers_file(env, 'providers:\n  files: {base_url: "file:///tmp/x"}\n')
    result = cli("run", SUPPORT, "-m", "openai/gpt-4o-mini", "-m", "files/m", "-m", "sim/fast",
                 "--providers", path, "--strategy", "sequential")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2 and "$OPENAI_API_KEY" in errors[0] and "'file://'" in errors[1]
    store.connect(f"sqlite:///{env}/pf.db")
    assert store.list_runs() == []


def test_a_judge_model_named_only_by_the_providers_file_is_checked_too(cli, env):
    # The judge is called by evaljobs whatever the adapter; its provider must be usable before a run exists.
    path = providers_file(
        env,
        "judge_model: keyed/judge-1\n"
        "providers:\n  keyed: {base_url: http://127.0.0.1:9/v1, api_key_env: PF_KEY}\n",
    )
    catalog = env / "judged.yaml"
    catalog.write_text("name: judged\nscenarios:\n  - key: a\n    prompt: hi\n"
                       "    expect: {judge: The answer is polite.}\n")
    result = cli("run", str(catalog), "-m", "sim/fast", "--providers", path, "--strategy", "sequential")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "keyed" in errors[0] and "$PF_KEY" in errors[0], result.output
    store.connect(f"sqlite:///{env}/pf.db")
    assert store.list_runs() == []


def test_bench_checks_providers_before_any_cell(cli, env):
    result = cli("bench", SUPPORT, "-m", "anthropic/claude-haiku-4-5", "--widths", "1", "--repeat", "1",
                 "--out", str(env / "bench"))
    assert result.exit_code == 2, result.output
    assert "error: anthropic/claude-haiku-4-5: provider 'anthropic' needs its API key in $ANTHROPIC_API_KEY" \
        in result.output
    assert not (env / "bench" / "bench.json").exists()


# -- providers list / check ------------------------------------------------------------------------


def test_providers_list_shows_presets_and_file_entries_never_the_key(cli, env, sim, monkeypatch):
    monkeypatch.setenv("PF_KEY", SECRET)
    path = providers_file(env, f'providers:\n  mine: {{base_url: "{sim.url}", api_key_env: PF_KEY, '
                               f'api: anthropic}}\n')
    table = cli("providers", "list", "--providers", path)
    assert table.exit_code == 0 and SECRET not in table.output
    rows = {line.split()[0]: line.split() for line in table.output.splitlines()[1:] if line.strip()}
    for preset in ("openai", "anthropic", "azure", "gemini", "openrouter", "groq", "together", "deepseek",
                   "mistral", "fireworks", "ollama", "vllm", "sim"):
        assert preset in rows
    assert rows["mine"][1:6] == ["anthropic", sim.url, "PF_KEY", "set", "no"]
    assert rows["openai"][3:5] == ["OPENAI_API_KEY", "missing"]
    listed = [
        json.loads(line)
        for line in cli("providers", "list", "--providers", path, "--json").output.splitlines()
        if line.startswith("{")
    ]
    mine = next(row for row in listed if row["name"] == "mine")
    assert mine["ready"] is True and mine["origin"] == "file" and SECRET not in json.dumps(listed)


def test_providers_check_reports_latency_or_the_exact_error(cli, env, sim, monkeypatch):
    monkeypatch.setenv("PF_KEY", SECRET)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    path = providers_file(env, f"""
providers:
  ant: {{api: anthropic, base_url: "{sim.url}", api_key_env: PF_KEY, stream: true}}
  dead: {{base_url: "{dead}"}}
""")
    result = cli("providers", "check", "--providers", path, "-m", "ant/sim", "-m", "sim/fast", "-m", "dead/m",
                 "-m", "openai/gpt-4o-mini", "--timeout", "5")
    assert result.exit_code == 1, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines() if "  " in line}
    assert lines["ant/sim"].startswith("ant/sim  ok  ") and "first token" in lines["ant/sim"]
    assert lines["sim/fast"].startswith("sim/fast  ok  ")
    assert lines["dead/m"].startswith(f"dead/m  FAIL  TransientError: cannot connect to {dead}")
    assert "needs its API key in $OPENAI_API_KEY" in lines["openai/gpt-4o-mini"]
    assert "3 of 4" not in result.output and "2 of 4 models failed" in result.output
    assert SECRET not in result.output
    unknown = cli("providers", "check", "-m", "nosuch/m")
    assert unknown.exit_code == 2 and "unknown provider 'nosuch'" in unknown.output


# -- rerun --providers, and its exit code ---------------------------------------------------------------


def test_rerun_takes_providers_and_exits_1_when_every_pair_errored(cli, env, sim):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    broken = providers_file(env, f'providers:\n  flaky: {{base_url: "{dead}"}}\n')
    fixed = providers_file(env, f'providers:\n  flaky: {{base_url: "{sim.url}"}}\n')
    first = cli("run", SUPPORT, "-m", "flaky/smart", "--providers", broken, "--strategy", "sequential")
    assert first.exit_code == 1 and "failed: all 14 pairs errored" in first.output, first.output
    run_id = next(
        line.split()[1].rstrip(":") for line in first.output.splitlines() if line.startswith("run r_")
    )

    again = cli("rerun", run_id, "--errored", "--providers", broken)
    assert again.exit_code == 1 and "failed: all 14 pairs errored" in again.output, again.output

    healed = cli("rerun", run_id, "--errored", "--providers", fixed)
    assert healed.exit_code == 0, healed.output
    new_id = next(
        line.split()[1].rstrip(":") for line in healed.output.splitlines() if line.startswith("run r_")
    )
    store.connect(f"sqlite:///{env}/pf.db")
    assert {r.status for r in store.list_results(new_id)} <= {"passed", "failed"}

    missing_key = providers_file(
        env, f'providers:\n  flaky: {{base_url: "{sim.url}", api_key_env: PF_KEY}}\n'
    )
    refused = cli("rerun", run_id, "--errored", "--providers", missing_key)
    assert refused.exit_code == 2 and "needs its API key in $PF_KEY" in refused.output
    assert len(store.list_runs()) == 3  # the refused rerun created nothing


# -- unknown costs and time to first token, end to end ------------------------------------------------


CATALOG = """
name: costs
scenarios:
  - key: hello
    prompt: "say hi [sim: say hi there]"
    expect: {contains: [hi]}
  - key: tool
    prompt: 'look it up [sim: call search {"q": "x"}] [sim: say found it]'
    tools:
      - name: search
        returns: {hits: 1}
    expect: {contains: [found]}
"""


def test_unknown_price_is_unknown_and_streamed_calls_record_ttft(env, sim):
    path = providers_file(env, f"""
providers:
  priced: {{base_url: "{sim.url}", prices: {{"*": [1.0, 2.0]}}, stream: true}}
  unpriced: {{api: anthropic, base_url: "{sim.url}", stream: true}}
  plain: {{base_url: "{sim.url}", prices: {{"*": [1.0, 2.0]}}, stream: false}}
""")
    with Session(db=f"sqlite:///{env}/pf.db", broker="memory", providers=path) as session:
        info = session.submit(loads_catalog(CATALOG, source="costs.yaml"),
                              ["priced/a", "unpriced/b", "plain/c"], strategy="sequential")
    results = {r.pair: r for r in store.list_results(info.id)}
    assert all(r.status == "passed" for r in results.values()), [r.error for r in results.values()]
    assert results[("hello", "unpriced/b")].cost is None and results[("tool", "unpriced/b")].cost is None
    assert results[("hello", "priced/a")].cost > 0
    # Streamed calls record the time to the first token; every call records its latency.
    for model in ("priced/a", "unpriced/b"):
        for key in ("hello", "tool"):
            r = results[(key, model)]
            assert r.ttft_ms is not None and 0 < r.ttft_ms <= r.latency_ms
    assert results[("hello", "plain/c")].ttft_ms is None and results[("hello", "plain/c")].latency_ms > 0

    report = info.report
    assert report["summary"]["cost_unknown"] == 2
    assert report["summary"]["cost"] == pytest.approx(
        sum(r.cost for r in results.values() if r.cost is not None)
    )
    blocks = {m["model"]: m for m in report["models"]}
    assert blocks["unpriced/b"]["cost_unknown"] == 2 and blocks["priced/a"]["cost_unknown"] == 0
    assert blocks["priced/a"]["ttft_p50_ms"] is not None and blocks["plain/c"]["ttft_p50_ms"] is None
    assert blocks["plain/c"]["latency_p95_ms"] is not None
    table = render_table(report)
    assert "cost unknown for 2 pairs" in table and "≥ $" in table
    assert "cost unknown for 2 pairs" in render_markdown(report)
    pair = next(p for p in report["results"] if p["model"] == "unpriced/b")
    assert pair["cost"] is None


def test_report_of_known_costs_has_no_lower_bound(env):
    run = {"id": "r_x", "expected": 1, "models": ["a/b"]}
    report = build_report(run, [Result("s", "a/b", "passed", cost=0.5, ttft_ms=120.0, latency_ms=300.0)])
    assert report["summary"]["cost_unknown"] == 0
    assert "≥" not in render_table(report) and "$0.5000" in render_table(report)
    assert report["models"][0]["ttft_p50_ms"] == 120 and report["models"][0]["latency_p95_ms"] == 300


def test_a_schema_2_database_learns_unknown_costs_and_ttft(db_url, tmp_path):
    store.connect(db_url)
    db = store.database.obj
    with db.connection_context():  # make it what schema 2 created: cost NOT NULL, no ttft/latency columns
        migrator = PostgresqlMigrator(db) if "postgres" in db_url else SqliteMigrator(db)
        migrate(migrator.drop_column("result", "ttft_ms"), migrator.drop_column("result", "latency_ms"),
                migrator.add_not_null("result", "cost"))
        store.SchemaVersion.delete().execute()
        store.SchemaVersion.create(version=2, applied_at=utc_now(), description="schema 2")
    store.connect(f"sqlite:///{tmp_path}/other.db")  # forget the open database, as a new process would
    store.connect(db_url)
    assert store.upgrade() == ["added column result.ttft_ms", "added column result.latency_ms",
                               "result.cost may be NULL", f"recorded schema version {store.SCHEMA_VERSION}"]
    run = store.create_run(loads_catalog(CATALOG, source="costs.yaml"), ["x/y"], strategy="sequential")
    store.record_result(run.id, Result("hello", "x/y", "passed", cost=None, ttft_ms=12.5, latency_ms=40.0))
    (back,) = store.list_results(run.id)
    assert (back.cost, back.ttft_ms, back.latency_ms) == (None, 12.5, 40.0)
    assert store.upgrade() == []


def test_every_readme_providers_example_loads_and_needs_only_its_key(env, tmp_path, monkeypatch):
    readme = (ROOT / "docs" / "providers.md").read_text()  # moved from the README
    section = readme[readme.index("## Providers"):readme.index("## The simulated provider")]
    blocks = [block.split("```", 1)[0] for block in section.split("```yaml\n")[1:]]
    assert len(blocks) == 6
    monkeypatch.setenv("AZURE_KEY", "azure-doc-key-123")  # the example with its key in a header
    for number, block in enumerate(blocks):
        config = load_providers(providers_file(tmp_path, block))
        (name,) = [n for n in config.names if config.get(n).origin != "preset"]  # the file's one entry
        entry = config.get(name)
        model = next(iter(entry.prices))
        found = problems(config, [f"{name}/{model}"])
        if "${AZURE_KEY}" in block:  # the header carries the credential: nothing else is needed
            assert entry.header_credential == "api-key" and found == [], (number, found)
            continue
        assert [line.split(": ", 1)[1] for line in found] == [
            f"provider '{name}' needs its API key in ${entry.api_key_env}, which is not set; export it, or "
            f"name another variable with api_key_env in {config.source}"
        ], (number, found)


def test_viewer_models_count_unknown_costs_instead_of_adding_zero():
    from evaljobs.store.pages import Cell
    from evaljobs.view.queries import model_rows

    def cell(i: int, model: str, cost: float | None) -> Cell:
        return Cell(i, f"s{i}", model, "passed", None, 1.0, cost, 10, 5, 5, False, "", None)

    rows = {m.model: m for m in model_rows(["a/x", "b/y"], [cell(1, "a/x", 0.5), cell(2, "a/x", None),
                                                          cell(3, "b/y", 0.25)])}
    assert (rows["a/x"].cost, rows["a/x"].cost_unknown) == (0.5, 1)
    assert (rows["b/y"].cost, rows["b/y"].cost_unknown) == (0.25, 0)
