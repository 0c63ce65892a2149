"""``store.finalize`` pauses the cyclic garbage collector while it builds the report, and always restores it.

The pause is process-wide, so what matters is that it ends: after a finalize that writes the report,
returns an existing one, or raises (an incomplete run), the collector is as the caller left it.
"""
from __future__ import annotations

import gc

import pytest

from evaljobs import store
from evaljobs.catalog import parse_catalog
from evaljobs.evaluation.result import Result
from evaljobs.store import results as store_results


def _catalog(keys):
    return parse_catalog({"name": "gc", "scenarios": [
        {"key": k, "messages": [{"role": "user", "content": f"ask {k}"}]} for k in keys]}, source="gc.yaml")


@pytest.fixture
def url(sqlite_url):
    store.connect(sqlite_url)
    return sqlite_url


@pytest.fixture
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_is_paused_while_the_report_is_built_and_enabled_after(url, collector_enabled, monkeypatch):
    seen = []
    build = store_results.build_report

    def watched(run, results):
        seen.append(gc.isenabled())
        return build(run, results)

    monkeypatch.setattr(store_results, "build_report", watched)
    run = store.create_run(_catalog(["s1", "s2"]), ["m1"], strategy="fanout", epochs=2)
    for key, model, epoch in store.missing_pairs(run.id):
        store.record_result(run.id, Result(key, model, "passed", score=1.0, epoch=epoch))
    assert store.finalize(run.id).created
    assert seen == [False] and gc.isenabled()
    assert not store.finalize(run.id).created  # the stored report, returned as is
    assert seen == [False] and gc.isenabled()


def test_the_collector_is_enabled_again_after_a_finalize_that_raises(url, collector_enabled):
    run = store.create_run(_catalog(["s1", "s2"]), ["m1"], strategy="fanout")
    store.record_result(run.id, Result("s1", "m1", "passed", score=1.0))
    with pytest.raises(store.Incomplete, match=rf"^run {run.id} has 1 of 2 pairs; missing: s2 × m1$"):
        store.finalize(run.id)
    assert gc.isenabled()
    with pytest.raises(store.UnknownRun):
        store.finalize("r_no_such_run")
    assert gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled(url, collector_enabled):
    run = store.create_run(_catalog(["s1"]), ["m1"], strategy="fanout")
    store.record_result(run.id, Result("s1", "m1", "passed", score=1.0))
    gc.disable()
    assert store.finalize(run.id).created
    assert not gc.isenabled()
