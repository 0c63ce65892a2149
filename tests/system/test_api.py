"""The Python API covers what the CLI does: rerun, recover, report rendering, pools' settings.

On the in-process broker with real worker threads and the simulated provider
over loopback; the CLI commands are checked to be the same calls.
"""
from __future__ import annotations

import json
import os

import pytest

from evaljobs import api, config, store
from evaljobs.api import REPORT_FORMATS, Session
from evaljobs.catalog import loads_catalog
from evaljobs.errors import UsageError
from evaljobs.pipeline import runtime
from helpers import abc_catalog_yaml, free_port

CATALOG = abc_catalog_yaml("api", failing="b")


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.0)


def test_recover_on_the_memory_broker_evaluates_the_lost_pairs_and_waits(session, sqlite_url):
    lost = store.create_run(loads_catalog(CATALOG, source="api.yaml"), ["sim/a", "sim/b"], strategy="fanout")
    assert store.get_run(lost.id).status == "pending"  # start_run never sent: every message is lost
    done = session.recover(lost.id)
    assert done.actions == [f"{lost.id}: re-enqueued 6 of 6 missing pairs"]
    (info,) = done.runs
    assert info.id == lost.id and info.report is not None and info.persisted == 6
    assert session.recover(lost.id).actions == []  # nothing left to do


def test_recover_command_on_the_memory_broker_finishes_the_run(cli, sqlite_url, sim, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    store.connect(sqlite_url)
    lost = store.create_run(loads_catalog(CATALOG, source="api.yaml"), ["sim/a"], strategy="fanout")
    result = cli("recover", lost.id, "--db", sqlite_url, "--broker", "memory")
    assert result.exit_code == 0, result.output
    assert f"{lost.id}: re-enqueued 3 of 3 missing pairs" in result.output
    assert f"{lost.id}: complete, 3/3 pairs, report ready" in result.output
    assert store.get_run(lost.id).report is not None


def test_rerun_makes_a_new_run_over_the_failed_pairs(session):
    first = session.wait(session.submit(loads_catalog(CATALOG, source="api.yaml"), ["sim/a"]).id, timeout=60)
    assert first.report["summary"]["failed"] == 1
    again = session.wait(session.rerun(first.id, ["failed"]).id, timeout=60)
    assert again.id != first.id and again.expected == 1 and again.options["rerun_of"] == first.id
    assert [(r.scenario_key, r.status) for r in session.results(again.id)] == [("b", "failed")]
    inline = session.rerun(first.id, ["all"])  # fanout again: queued, evaluated by this session's workers
    assert session.wait(inline.id, timeout=60).persisted == 3
    with pytest.raises(UsageError, match="has no errored pairs"):
        session.rerun(first.id, ["errored"])


def test_report_renders_every_format_and_refuses_what_cannot_be(session):
    first = session.wait(session.submit(loads_catalog(CATALOG, source="api.yaml"), ["sim/a"]).id, timeout=60)
    second = session.wait(session.submit(loads_catalog(CATALOG, source="api.yaml"), ["sim/a"]).id, timeout=60)
    texts = {fmt: session.report(second.id, fmt) for fmt in REPORT_FORMATS}
    assert json.loads(texts["json"])["summary"]["results"] == 3
    assert texts["md"].startswith("### evaljobs · api — `sim/a`: 66.7% (2/3 passed")
    assert "<testsuites" in texts["junit"] and texts["html"].lstrip().lower().startswith("<!doctype html")
    assert "verdict: 1. sim/a (66.7%)" in texts["table"]
    against = json.loads(session.report(second.id, "json", baseline=first.id))
    assert against["comparison"]["run_a"] == first.id
    with pytest.raises(UsageError, match="does not apply to --format junit"):
        session.report(second.id, "junit", baseline=first.id)
    with pytest.raises(UsageError, match="unknown report format 'pdf'"):
        session.report(second.id, "pdf")
    assert session.compare(first.id, second.id).regressed == []


def test_a_providers_file_is_the_sessions_setting_and_never_written_to_the_environment(sqlite_url, tmp_path):
    providers = tmp_path / "providers.yaml"
    providers.write_text("providers:\n  acme:\n    base_url: http://127.0.0.1:9/v1\n")
    environ = dict(os.environ)
    with Session(db=sqlite_url, providers=str(providers)):
        assert config.settings().providers_path == str(providers)
        assert "acme" in runtime.providers().names  # what the in-process workers read
    configured = config.settings()
    assert configured.providers_path == str(providers)  # the process's setting, as the variable was
    with Session(db=sqlite_url, providers=str(providers)):
        assert config.settings() is configured  # unchanged: the worker context (and governor) is kept
    with pytest.raises(UsageError):
        Session(db=sqlite_url, providers=str(tmp_path / "missing.yaml"))
    assert config.settings() is configured  # a session that never opened changes nothing
    assert dict(os.environ) == environ


def test_run_follows_inline_and_queued_runs_alike_and_tells_each_event(session):
    catalog = loads_catalog(CATALOG, source="api.yaml")
    for strategy in ("sequential", "fanout"):
        heard, submitted = [], []
        info = session.run(catalog, ["sim/a"], strategy=strategy, on_event=heard.append,
                           on_submit=submitted.append, timeout=60)
        assert [s.id for s in submitted] == [info.id]  # told once, as soon as the run existed
        assert info.report is not None and info.persisted == 3, strategy
        done = [e for e in heard if e.get("type") == "result"]
        assert len(done) == 3, (strategy, heard)


def test_the_gate_decides_the_exit_a_cli_only_maps(session):
    catalog = loads_catalog(CATALOG, source="api.yaml")
    info = session.run(catalog, ["sim/a"], strategy="sequential")  # 2 of 3 pass
    assert info.gate() == info.gate(None, "ci") and info.gate().passed and info.gate().exit_code == 0
    ok = info.gate(0.6)
    assert ok.passed and ok.lines == ("OK: pass rate 66.7% meets --fail-under 60.0%",)
    low = info.gate(0.9)
    assert (low.passed, low.exit_code) == (False, 1)
    assert low.lines == ("FAIL: pass rate 66.7% is under --fail-under 90.0%",)
    ci = info.gate(0.5, "ci")  # 2/3 has a 95% Wilson lower bound near 21%
    assert not ci.passed and ci.lines[0].startswith("FAIL: sim/a: 95% CI lower bound 20.8%")
    broken = loads_catalog("name: api\nscenarios:\n  - key: a\n"
                           "    prompt: \"[sim: status 400 no such thing]\"\n"
                           "    expect: {contains: [x]}\n", source="broken.yaml")
    failed = session.run(broken, ["sim/a"], strategy="sequential")
    assert failed.status == "failed"
    verdict = failed.gate()  # every pair errored: nothing was evaluated, whatever the threshold
    assert verdict.exit_code == 1 and verdict.lines[0].startswith(
        f"error: run {failed.id} failed: all 1 pairs errored (first: ")
    assert "no such thing" in verdict.lines[0]
    pending = store.create_run(catalog, ["sim/a"], strategy="fanout")
    assert store.get_run(pending.id).gate().passed
    assert store.get_run(pending.id).gate(0.5).lines == (
        f"FAIL: run {pending.id} has no report to hold to --fail-under 50.0%",)


def test_check_catalog_clear_cache_and_status_are_library_calls(session, sqlite_url, tmp_path):
    path = tmp_path / "api.yaml"
    path.write_text(CATALOG)
    checked = api.check_catalog(path)  # no database, no broker
    assert (checked.format, checked.name, checked.scenarios, checked.excluded) == ("native", "api", 3, 0)
    assert checked.digest == loads_catalog(CATALOG, source=str(path)).digest
    assert checked.to_dict()["digest"] == checked.digest
    with pytest.raises(UsageError, match="does not exist"):
        api.check_catalog(tmp_path / "nowhere.yaml")
    for key in ("k1", "k2"):
        store.cache.put(key, "answer", provider="sim", model="a")
    assert session.clear_cache(3600.0) == 0  # both were written just now
    assert session.clear_cache() == 2 and session.clear_cache() == 0
    status = session.status()
    assert status.verdict() == status.verdict() and status.verdict().passed
    assert any("in-process broker" in note for note in status.notes)
    with Session(db=sqlite_url, broker=f"redis://127.0.0.1:{free_port()}/0") as unreachable:
        # the database half is still read; the exit says Redis is out
        verdict = unreachable.status().verdict()
    assert verdict.exit_code == 2 and verdict.lines[0].startswith("error: cannot read redis://127.0.0.1:")
