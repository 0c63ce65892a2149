"""Epochs (``--epochs N``): each (scenario, model, epoch) is a pair of its own.

Its own row (the unique key and the barrier's expected count include the epoch), its own
message, its own cache entries; the schema 3 → 4 upgrade keeps existing rows as epoch 0.
Against SQLite and PostgreSQL (``db_url``), and end to end on the in-process broker.
"""
from __future__ import annotations

import re

import dramatiq
import pytest

from evaljobs import store
from evaljobs.catalog import CatalogError, loads_catalog, parse_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report
from evaljobs.pipeline import broker
from evaljobs.pipeline.rerun import select_pairs
from evaljobs.providers.cache import cache_key, for_epoch
from helpers import counted_completes
from helpers.database import utc_now


def make_catalog(keys, name="ep", epochs=None):
    body = {"name": name, "scenarios": [{"key": k, "messages": [{"role": "user", "content": f"ask {k}"}]}
                                        for k in keys]}
    if epochs is not None:
        body["defaults"] = {"epochs": epochs}
    return parse_catalog(body, source=f"{name}.yaml")


@pytest.fixture
def url(db_url):
    store.connect(db_url)
    return db_url


def test_every_epoch_is_a_pair_of_its_own(url):
    run = store.create_run(make_catalog(["s1", "s2"]), ["m1", "m2"], strategy="fanout", epochs=3)
    assert run.epochs == 3 and run.expected == 2 * 2 * 3
    missing = store.missing_pairs(run.id)
    assert len(missing) == 12 and len(set(missing)) == 12
    # epoch-major: the whole first epoch goes out before the second
    assert missing[:4] == [("s1", "m1", 0), ("s1", "m2", 0), ("s2", "m1", 0), ("s2", "m2", 0)]
    assert missing == store.expected_pairs(run.id)
    outcomes = []
    for key, model, epoch in missing:
        outcomes.append(store.record_result(run.id, Result(key, model, "passed", score=1.0, epoch=epoch)))
        # the same (scenario, model, epoch) again is a no-op, not a second row
        again = store.record_result(run.id, Result(key, model, "failed", epoch=epoch))
        assert not again.inserted and not again.completed
    assert [o.persisted for o in outcomes] == list(range(1, 13))
    assert [o.completed for o in outcomes] == [False] * 11 + [True]
    assert store.is_recorded(run.id, "s2", "m2", 2) and store.missing_pairs(run.id) == []
    rows = store.list_results(run.id)
    assert [r.ident for r in rows][:3] == [("s1", "m1", 0), ("s1", "m1", 1), ("s1", "m1", 2)]
    assert all(r.status == "passed" for r in rows)
    report = store.finalize(run.id, build_report).report
    assert report["summary"]["expected"] == 12 and report["summary"]["results"] == 12
    assert store.finalize(run.id, build_report).created is False


def test_an_epoch_outside_the_run_is_rejected_in_one_line(url):
    run = store.create_run(make_catalog(["s1"]), ["m1"], strategy="fanout", epochs=2)
    for epoch in (2, -1):
        with pytest.raises(store.UnexpectedPair) as caught:
            store.record_result(run.id, Result("s1", "m1", "passed", epoch=epoch))
        assert "\n" not in str(caught.value) and "the run has 2 epoch(s), 0-1" in str(caught.value)
    assert store.list_results(run.id) == []
    with pytest.raises(ValueError, match="epochs must be a whole number of 1 or more, not 0"):
        store.create_run(make_catalog(["s1"]), ["m1"], strategy="fanout", epochs=0)


def test_missing_and_finalize_name_the_epoch(url):
    run = store.create_run(make_catalog(["s1"]), ["m1"], strategy="fanout", epochs=2)
    store.record_result(run.id, Result("s1", "m1", "passed", epoch=1))
    assert store.missing_pairs(run.id) == [("s1", "m1", 0)]
    with pytest.raises(store.Incomplete, match=rf"^run {run.id} has 1 of 2 pairs; missing: s1 × m1 #0$"):
        store.finalize(run.id, build_report)


def test_a_rerun_selects_and_expects_epochs(url):
    run = store.create_run(make_catalog(["s1", "s2"]), ["m1"], strategy="fanout", epochs=2)
    statuses = {("s1", "m1", 0): "passed", ("s1", "m1", 1): "errored", ("s2", "m1", 0): "errored",
                ("s2", "m1", 1): "passed"}
    for (key, model, epoch), status in statuses.items():
        store.record_result(run.id, Result(key, model, status, epoch=epoch))
    assert select_pairs(run.id, ["errored"]) == [("s2", "m1", 0), ("s1", "m1", 1)]
    rerun = store.create_run(make_catalog(["s1", "s2"]), ["m1"], strategy="fanout", epochs=2,
                             pairs=select_pairs(run.id, ["errored"]))
    assert rerun.expected == 2 and rerun.pairs == [("s2", "m1", 0), ("s1", "m1", 1)]
    with pytest.raises(store.UnexpectedPair, match="epoch 0: the run covers only 2 chosen pairs"):
        store.record_result(rerun.id, Result("s1", "m1", "passed", epoch=0))
    with pytest.raises(
        ValueError, match=re.escape("pair s1 × m1 #5: epoch 5 is not one of the run's 2 epochs")
    ):
        store.create_run(make_catalog(["s1"]), ["m1"], strategy="fanout", epochs=2, pairs=[("s1", "m1", 5)])


def test_a_schema_3_database_is_upgraded_to_epochs(url, tmp_path):
    """Make the database what schema 3 created (no epoch columns, the unique index on
    (run, scenario, model)), with a run and a row in it, then open it with this evaljobs."""
    db = store.database.obj
    old = store.create_run(make_catalog(["s1"]), ["m1"], strategy="fanout")
    store.record_result(old.id, Result("s1", "m1", "passed", score=1.0))
    with db.connection_context():
        db.execute_sql('DROP INDEX "resultrow_run_id_scenario_key_model_epoch"')
        db.execute_sql('ALTER TABLE "result" DROP COLUMN "epoch"')
        db.execute_sql('ALTER TABLE "result" DROP COLUMN "reused_from"')
        db.execute_sql('ALTER TABLE "run" DROP COLUMN "epochs"')
        db.execute_sql('ALTER TABLE "run" DROP COLUMN "scenario_order"')  # schema 5's (compare, order)
        db.execute_sql('ALTER TABLE "result" DROP COLUMN "scenario_digest"')
        db.execute_sql('CREATE UNIQUE INDEX "resultrow_run_id_scenario_key_model" '
                       'ON "result" ("run_id", "scenario_key", "model")')
        store.SchemaVersion.delete().execute()
        store.SchemaVersion.create(version=3, applied_at=utc_now(), description="schema 3")
    store.connect(f"sqlite:///{tmp_path}/other.db")  # forget the open database, as a new process would
    store.connect(url)
    assert store.upgrade() == [
        "added column run.epochs",
        "added column run.scenario_order",
        "added column result.epoch",
        "added column result.reused_from",
        "added column result.scenario_digest",
        "unique index of result is (run_id, scenario_key, model, epoch)",
        f"recorded schema version {store.SCHEMA_VERSION}",
    ]
    assert store.SCHEMA_VERSION >= 5  # later versions add their own columns on top
    with db.connection_context():
        indexes = {i.name: (i.columns, i.unique) for i in db.get_indexes("result")}
    assert "resultrow_run_id_scenario_key_model" not in indexes
    assert indexes["resultrow_run_id_scenario_key_model_epoch"] == (
        ["run_id", "scenario_key", "model", "epoch"],
        True,
    )
    before = store.get_run(old.id)
    assert before.epochs == 1 and [r.ident for r in store.list_results(old.id)] == [("s1", "m1", 0)]
    assert store.finalize(old.id, build_report).report["summary"]["passed"] == 1
    # the upgraded table takes a second epoch of the same pair, and still refuses a duplicate
    run = store.create_run(make_catalog(["s1"]), ["m1"], strategy="fanout", epochs=2)
    assert store.record_result(run.id, Result("s1", "m1", "passed", epoch=0)).inserted
    assert store.record_result(run.id, Result("s1", "m1", "passed", epoch=1)).completed
    assert not store.record_result(run.id, Result("s1", "m1", "failed", epoch=1)).inserted
    assert store.upgrade() == []


def test_catalog_defaults_epochs():
    catalog = make_catalog(["s1"], epochs=4)
    assert catalog.epochs == 4 and catalog.body["defaults"] == {"epochs": 4}
    assert make_catalog(["s1"]).epochs == 1 and "defaults" not in make_catalog(["s1"]).body
    assert catalog.digest != make_catalog(["s1"]).digest
    with pytest.raises(CatalogError) as caught:
        make_catalog(["s1"], epochs=0)
    assert "epochs must be a whole number from 1 to 1000, not 0" in str(caught.value)
    with pytest.raises(CatalogError, match="unknown key 'epochs'"):
        parse_catalog({"name": "g", "groups": [{"name": "x", "defaults": {"epochs": 2},
                                                "scenarios": [{"key": "a", "prompt": "p"}]}]})


def test_the_cache_key_holds_the_epoch_unless_epochs_share_it():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    keys = {cache_key("p", "m", body, "v1", epoch) for epoch in range(3)}
    assert len(keys) == 3
    assert cache_key("p", "m", body, "v1", 0) == cache_key("p", "m", body, "v1")  # epoch 0: the old key
    with for_epoch(2):
        from evaljobs.providers import cache as cache_module
        assert cache_module._epoch.get() == 2
    assert cache_module._epoch.get() == 0


# -- end to end on the in-process broker --------------------------------------------------------

CATALOG = """
name: epochs
scenarios:
  - key: a
    prompt: "[sim: say alpha]"
    expect: {contains: [alpha]}
  - key: b
    prompt: "[sim: say beta]"
    expect: {contains: [beta]}
  - key: c
    prompt: "[sim: say gamma]"
    expect: {contains: [nothing-like-this]}
"""
MODELS = ["sim/one", "sim/two"]


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.0)


@pytest.fixture
def memory(tmp_path, sim, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    store.connect(f"sqlite:///{tmp_path}/epochs.db")
    binding = broker.configure("memory")
    completes = counted_completes(monkeypatch)
    worker = dramatiq.Worker(binding.broker, worker_threads=4, worker_timeout=20)
    worker.start()
    yield binding, completes
    worker.stop()
    binding.broker.close()


def test_epochs_end_to_end_on_the_in_process_broker(memory, sim):
    binding, completes = memory
    sim.reset_stats()
    run = store.create_run(loads_catalog(CATALOG, source="epochs.yaml"), MODELS, strategy="fanout",
                           options={"cache": True}, epochs=5)
    binding.actors.start_run.send(run.id)
    binding.broker.join(binding.queue, fail_fast=False)
    binding.broker.join(binding.queue, fail_fast=False)
    done = store.get_run(run.id)
    assert done.status == "complete" and done.expected == 30 and done.persisted == 30
    rows = store.list_results(run.id)
    assert sorted(r.ident for r in rows) == sorted((k, m, e) for k in "abc" for m in MODELS for e in range(5))
    assert completes == [run.id], "one report"
    # --cache: every epoch made its own provider call (the epoch is in the cache key)
    assert sim.stats()["requests"] == 30 and not any(r.cached for r in rows)
    assert {r.status for r in rows if r.scenario_key == "c"} == {"failed"}


# -- on Redis with real worker processes ----------------------------------------------------------------


@pytest.mark.redis
def test_epochs_end_to_end_on_redis_with_worker_processes(
    redis_url, sqlite_url, simulated_provider, tmp_path
):
    from helpers import Fleet, fleet_run

    simulated_provider(latency=0.01)
    catalog = loads_catalog(CATALOG, source="epochs.yaml")
    fleet = Fleet(redis_url, sqlite_url, tmp_path / "logs", count=2, threads=4)
    with fleet_run(fleet, catalog, MODELS, db=sqlite_url, broker=redis_url, epochs=5) as run:
        info = run.session.wait(run.id, timeout=120, poll=0.5)
    # fleet_run checked: 30 distinct (scenario, model, epoch) rows, one report, one `complete` event
    assert info.expected == 30 and run.observed["persisted"] == 30 and run.observed["complete_events"] == 1
    block = info.report["epochs"]
    models = {m["model"]: m for m in block["models"]}
    # a and b pass every epoch, c fails every one: 10 of 15 per model. Wilson, by hand: p = 2/3,
    # z²/n = .25610, centre = (.66667 + .12805)/1.25610 = .63269, half = 1.95996·√(.014815 + .004268)/1.25610
    # = .21555 → [.4171, .8482]
    for model in MODELS:
        assert (models[model]["passed"], models[model]["trials"]) == (10, 15)
        assert (models[model]["ci_low"], models[model]["ci_high"]) == (0.4171, 0.8482)
        assert models[model]["flaky"] == []
    pairs = {(p["scenario_key"], p["model"]): p for p in block["pairs"]}
    assert (
        pairs[("a", "sim/one")]["pass_hat_k"]["5"] == 1.0 and pairs[("c", "sim/two")]["pass_at_k"]["5"] == 0.0
    )
    assert pairs[("c", "sim/one")]["ok"] is False and pairs[("b", "sim/two")]["stderr"] == 0.0


@pytest.mark.redis
def test_a_worker_killed_mid_run_with_epochs_loses_and_doubles_no_epoch(
    redis_url, sqlite_url, simulated_provider, tmp_path, monkeypatch
):
    """kill -9 of a worker in the middle of its work: every (scenario, model, epoch) still exactly once."""
    import time

    from helpers import Fleet, fleet_run, numbered_catalog

    providers = tmp_path / "providers.yaml"  # a SIGKILLed worker's governor permits come back in 5 s
    providers.write_text("providers:\n  sim:\n    governor: {lease_seconds: 5}\n")
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(providers))
    simulated_provider(latency=0.2, jitter=0.05)
    catalog, models = numbered_catalog(15, "killed-epochs"), ["sim/a", "sim/b"]
    fleet = Fleet(redis_url, sqlite_url, tmp_path / "logs", count=2, threads=4,
                  env={"EVALJOBS_MAX_CRASHES": "25"}, verbose=True)
    with fleet_run(fleet, catalog, models, db=sqlite_url, broker=redis_url, epochs=3) as run:
        started = time.monotonic()
        while store.get_run(run.id).report is None and time.monotonic() - started < 180:
            if fleet.kills < 2 and fleet.kill_one_that_worked(calls=8 + 10 * fleet.kills):
                continue
            time.sleep(0.2)
    assert fleet.kills >= 1, "the run finished before a worker was killed: nothing was tested"
    assert run.observed["persisted"] == 15 * 2 * 3 and run.observed["duplicated"] == 0
    results = store.list_results(run.id)
    assert all(r.status == "passed" for r in results), [r.error for r in results if r.status != "passed"][:3]


def test_the_readme_example_finds_the_flaky_scenario(tmp_path, sim, monkeypatch):
    """examples/catalogs/variance.yaml against the simulated provider: `[sim@fast: flaky 0.5]` makes
    refund-damaged disagree with itself across epochs, and the report flags it (README numbers)."""
    from evaljobs.api import Session
    from helpers import ROOT

    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    with Session(db=f"sqlite:///{tmp_path}/readme.db") as session:
        info = session.submit(str(ROOT / "examples/catalogs/variance.yaml"), ["sim/fast", "sim/smart"],
                              strategy="sequential")
    assert info.epochs == 5 and info.expected == 40
    block = info.report["epochs"]
    flaky = [(p["scenario_key"], p["model"], p["passed"]) for p in block["pairs"] if p["flaky"]]
    assert flaky == [("refund-damaged", "sim/fast", 2), ("refund-damaged", "sim/smart", 4)]
    assert [(m["passed"], m["ci_low"], m["ci_high"]) for m in block["models"]] == [(17, 0.6396, 0.9476),
                                                                                   (19, 0.7639, 0.9911)]


def test_cache_across_epochs_is_the_named_opt_out(memory, sim):
    """Sequential, so that no two epochs of a pair miss the cache at the same moment (the cache does not
    make concurrent identical calls wait for each other: on the fan-out two epochs may both call)."""
    from evaljobs.pipeline.strategies import run_inline

    sim.reset_stats()
    run = store.create_run(loads_catalog(CATALOG, source="epochs.yaml"), MODELS, strategy="sequential",
                           options={"cache": True, "cache_across_epochs": True}, epochs=5)
    run_inline(run.id)
    rows = store.list_results(run.id)
    assert len(rows) == 30 and store.get_run(run.id).status == "complete"
    # one call per scenario × model (epoch 0, first in order); every later epoch answered from the cache
    assert sim.stats()["requests"] == 6 and sum(r.cached for r in rows) == 24
    assert {r.epoch for r in rows if not r.cached} == {0}


def test_recover_re_enqueues_the_missing_epochs(memory, sim):
    from evaljobs.pipeline import ownership
    from evaljobs.pipeline.recovery import recover

    binding, completes = memory
    run = store.create_run(loads_catalog(CATALOG, source="epochs.yaml"), MODELS, strategy="fanout", epochs=3)
    # one epoch already done
    store.record_result(run.id, Result("a", "sim/one", "passed", score=1.0, epoch=1))
    held: list[str] = []  # on the in-process broker recover leases the run, as Session.recover does
    try:
        actions = recover(binding, run.id, held=held)  # its messages were never sent: as if they were lost
        assert actions == [f"{run.id}: re-enqueued 17 of 17 missing pairs"] and held == [run.id]
        binding.broker.join(binding.queue, fail_fast=False)
        binding.broker.join(binding.queue, fail_fast=False)
        done = store.get_run(run.id)
        assert done.status == "complete" and done.persisted == 18 and completes == [run.id]
        assert len({r.ident for r in store.list_results(run.id)}) == 18
        assert recover(binding, run.id, held=held) == []
    finally:
        ownership.release(held)


@pytest.mark.parametrize("strategy", ["per-model", "threads"])
def test_epochs_on_the_other_strategies(memory, sim, strategy):
    from evaljobs.pipeline.strategies import run_inline

    binding, completes = memory
    run = store.create_run(loads_catalog(CATALOG, source="epochs.yaml"), MODELS, strategy=strategy, epochs=3)
    if strategy == "per-model":
        binding.actors.start_run.send(run.id)
        binding.broker.join(binding.queue, fail_fast=False)
        binding.broker.join(binding.queue, fail_fast=False)
    else:
        run_inline(run.id, width=4)
    done = store.get_run(run.id)
    assert done.status == "complete" and done.persisted == 18 and done.report["epochs"]["epochs"] == 3
    assert sorted(r.ident for r in store.list_results(run.id)) == sorted(
        (k, m, e) for k in "abc" for m in MODELS for e in range(3))
