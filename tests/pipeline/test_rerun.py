"""Reruns: a new run over chosen pairs, with the original catalog snapshot, context and options.

The store half (a run over an explicit subset of pairs keeps the completion
contract) runs on SQLite and PostgreSQL; the end-to-end half uses the
in-process broker with real worker threads, the simulated provider's request
counter and the example host's publishing domain (``acme_host``).
"""
from __future__ import annotations

import re
import uuid

import pytest

from acme_host import current_domain, publishing_domain
from acme_host.context import NAME, provider as domain_provider
from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog, parse_catalog
from evaljobs.cli import Group
from evaljobs.cli.ops import rerun as rerun_command
from evaljobs.pipeline.rerun import RerunError, create_rerun, rerun, select_pairs
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report
from helpers import utc_now


def make_catalog(keys: list[str], name: str = "subset"):
    body = {"name": name, "scenarios": [{"key": k, "messages": [{"role": "user", "content": f"ask {k}"}]}
                                        for k in keys]}
    return parse_catalog(body, source=f"{name}.yaml")


@pytest.fixture
def url(db_url: str) -> str:
    store.connect(db_url)
    return db_url


# -- the store: runs over chosen pairs -----------------------------------------------------------


def test_a_run_over_chosen_pairs_expects_exactly_those(url):
    cat = make_catalog(["s1", "s2", "s3"])
    run = store.create_run(cat, ["m1", "m2"], strategy="fanout",
                           pairs=[("s3", "m2"), ("s1", "m1"), ("s2", "m2")])
    chosen = [("s1", "m1", 0), ("s2", "m2", 0), ("s3", "m2", 0)]  # stored in catalog order, epoch 0
    assert run.expected == 3 and run.pairs == chosen and store.get_run(run.id).pairs == chosen
    assert store.missing_pairs(run.id) == chosen == store.expected_pairs(run.id)
    expected_error = (rf"^run {run.id} does not expect scenario 's1' × model 'm2': "
                      "the run covers only 3 chosen pairs$")
    with pytest.raises(store.UnexpectedPair, match=expected_error):
        store.record_result(run.id, Result("s1", "m2", "passed"))
    outcomes = [store.record_result(run.id, Result(k, m, "passed", score=1.0)) for k, m, _ in chosen]
    assert [(o.inserted, o.completed, o.persisted) for o in outcomes] == [(True, False, 1), (True, False, 2),
                                                                        (True, True, 3)]
    assert store.record_result(run.id, Result("s1", "m1", "failed")).inserted is False
    report = store.finalize(run.id, build_report).report
    assert report["summary"]["expected"] == 3 and report["summary"]["results"] == 3
    assert store.get_run(run.id).status == "complete" and store.missing_pairs(run.id) == []
    whole = store.create_run(cat, ["m1"], strategy="fanout")
    assert whole.pairs is None and whole.expected == 3


@pytest.mark.parametrize("pairs,message", [
    ([], "needs at least one pair"),
    ([("s1", "m1"), ("s1", "m1")], "pair s1 × m1 is given more than once"),
    ([("nope", "m1")], "scenario 'nope' is not in catalog 'subset'"),
    ([("s1", "m9")], "model 'm9' is not one of the run's models (m1, m2)"),
    ([("s1", "m1")], "model 'm2' has no pair in this run: leave it out of the models"),
])
def test_chosen_pairs_are_checked_before_anything_is_created(sqlite_url, pairs, message):
    store.connect(sqlite_url)  # the checks come before any SQL: one backend is enough
    with pytest.raises(ValueError, match=re.escape(message)):
        store.create_run(make_catalog(["s1", "s2"]), ["m1", "m2"], strategy="fanout", pairs=pairs)
    assert store.list_runs() == []


def test_a_schema_1_database_gets_the_pairs_column(url, tmp_path):
    db = store.database.obj
    with db.connection_context():
        run_sql = [c.name for c in db.get_columns("run")]
        assert "pairs" in run_sql
        db.execute_sql('ALTER TABLE "run" DROP COLUMN "pairs"')
        store.SchemaVersion.delete().execute()
        store.SchemaVersion.create(version=1, applied_at=utc_now(), description="initial schema")
    store.connect(f"sqlite:///{tmp_path}/other.db")
    store.connect(url)  # a newer evaljobs opens a schema 1 database
    assert store.upgrade() == ["added column run.pairs", f"recorded schema version {store.SCHEMA_VERSION}"]
    run = store.create_run(make_catalog(["s1"]), ["m1"], strategy="fanout", pairs=[("s1", "m1")])
    assert store.get_run(run.id).pairs == [("s1", "m1", 0)]
    assert store.upgrade() == []


# -- selecting and creating a rerun ------------------------------------------------------------------


def finished_mixed_run(context=None, options=None) -> store.RunInfo:
    cat = make_catalog(["s1", "s2", "s3"], "mixed")
    run = store.create_run(cat, ["m1", "m2"], strategy="fanout", context=context,
                           options=options or {"time_limit": 30})
    statuses = {("s1", "m1"): "passed", ("s1", "m2"): "errored", ("s2", "m1"): "failed",
                ("s2", "m2"): "passed", ("s3", "m1"): "errored"}  # s3 × m2 never persisted
    for (key, model), status in statuses.items():
        store.record_result(run.id, Result.errored(key, model, "boom") if status == "errored"
                            else Result(key, model, status))
    return run


def test_select_pairs_by_status_or_all(sqlite_url):
    store.connect(sqlite_url)
    run = finished_mixed_run()
    assert select_pairs(run.id, ["errored"]) == [("s1", "m2", 0), ("s3", "m1", 0)]
    assert select_pairs(run.id, ["failed"]) == [("s2", "m1", 0)]
    assert select_pairs(run.id, ["errored", "failed"]) == [("s1", "m2", 0), ("s2", "m1", 0), ("s3", "m1", 0)]
    every = select_pairs(run.id, ["all"])
    assert every == store.expected_pairs(run.id) and len(every) == 6
    with pytest.raises(RerunError, match="choose what to rerun"):
        select_pairs(run.id, ["missing"])


def test_create_rerun_keeps_snapshot_context_options_and_strategy(sqlite_url):
    store.connect(sqlite_url)
    run = finished_mixed_run(context={"publishing_domain": "acme-eu"})
    new = create_rerun(run.id, ["failed"])
    assert new.id != run.id and new.status == "pending"
    assert (new.digest, new.strategy) == (run.digest, run.strategy)
    assert new.context == {"publishing_domain": "acme-eu"}
    assert new.models == ["m1"] and new.pairs == [("s2", "m1", 0)] and new.expected == 1
    assert new.options == {"time_limit": 30, "rerun_of": run.id, "rerun": "failed"}
    assert store.get_run(run.id).persisted == 5  # the original is untouched
    clean = store.create_run(make_catalog(["s1"], "clean"), ["m1"], strategy="fanout")
    store.record_result(clean.id, Result("s1", "m1", "passed"))
    expected_error = (rf"^run {clean.id} has no errored pairs \(1/1 persisted, status pending\): "
                      "nothing to rerun$")
    with pytest.raises(RerunError, match=expected_error):
        create_rerun(clean.id, ["errored"])


# -- end to end ----------------------------------------------------------------------------------


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.01)


@pytest.fixture
def session(tmp_path, sim, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    monkeypatch.setenv("EVALJOBS_MAX_RETRIES", "0")  # a first-call 500 is final: the pair is errored
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/rerun.db")
    with Session(db=f"sqlite:///{tmp_path}/rerun.db", broker="memory", width=4) as s:
        yield s


def flaky_catalog():
    """8 pairs: 2 errored once (a 500 on their first call only), 2 failing, 4 passing."""
    tag = uuid.uuid4().hex[:8]  # the simulator counts attempts per conversation: keep them unique
    lines = ["name: flaky", "scenarios:"]
    for i in range(4):
        fault = "[sim: fail-first 1 500] " if i in (1, 3) else ""
        want = "never-said" if i == 2 else "published for"
        lines += [f"  - key: k{i}", f'    prompt: "{fault}item {i} {tag}"',
                  f"    expect: {{contains: ['{want}']}}"]
    return loads_catalog("\n".join(lines) + "\n", source="flaky.yaml")


def test_rerun_of_errored_pairs_calls_the_provider_for_those_only_with_the_original_context(session, sim):
    with publishing_domain("acme-eu"):
        first = session.submit(flaky_catalog(), ["sim/a", "sim/b"], adapter="acme")
    first = session.wait(first.id, timeout=60)
    errored = sorted(r.pair for r in store.list_results(first.id) if r.status == "errored")
    assert len(errored) == 4 and {k for k, _ in errored} == {"k1", "k3"}
    assert first.context == {NAME: "acme-eu"}
    before = (first.report, [r.to_dict() for r in store.list_results(first.id)])

    sim.reset_stats()
    assert current_domain() is None  # the rerun is started from a thread with no domain at all
    new = rerun(first.id, ["errored"], binding=session.binding())
    new = session.wait(new.id, timeout=60)

    assert sim.stats()["requests"] == len(errored)  # only the errored pairs were evaluated again
    results = store.list_results(new.id)
    assert [r.pair for r in results] == errored and new.pairs == [(k, m, 0) for k, m in errored]
    assert all(r.status == "passed" for r in results), [r.error for r in results]
    assert {r.details["meta"][NAME] for r in results} == {"acme-eu"}  # ran under the original domain
    assert new.report["summary"]["results"] == 4 and new.status == "complete"
    assert new.options["rerun_of"] == first.id and new.options["adapter"] == "acme"
    assert (store.get_run(first.id).report, [r.to_dict() for r in store.list_results(first.id)]) == before


def test_inline_rerun_restores_the_context_in_process(session, sim):
    with publishing_domain("acme-us"):
        first = session.submit(flaky_catalog(), ["sim/a"], adapter="acme", strategy="sequential")
    assert first.report["summary"]["errored"] == 2
    sim.reset_stats()
    new = rerun(first.id, ["errored", "failed"], context_providers=[domain_provider()])
    assert sim.stats()["requests"] == 3 and new.report["summary"]["results"] == 3
    assert {r.details["meta"][NAME] for r in store.list_results(new.id)} == {"acme-us"}
    assert current_domain() is None  # cleared afterwards


def test_rerun_command(cli, session, sim, tmp_path):
    with publishing_domain("acme-cli"):
        first = session.submit(flaky_catalog(), ["sim/a"], adapter="acme")
    first = session.wait(first.id, timeout=60)
    group = Group(commands={"rerun": rerun_command})

    def rerun(*args):
        return cli("rerun", *args, command=group)

    done = rerun(first.id, "--failed", "--broker", "memory", "--width", "2", "--fail-under", "0.5")
    assert done.exit_code == 1, done.output  # the one failing pair fails again: 0% < 50%
    assert f"rerun of {first.id} (failed), 1 pairs (fanout, broker memory)" in done.output
    assert "k2 × sim/a  failed" in done.output and "FAIL: pass rate 0.0%" in done.output
    assert rerun(first.id).exit_code == 2
    assert "say what to rerun" in rerun(first.id).output
    both = rerun(first.id, "--all", "--failed")
    assert both.exit_code == 2 and "--all already includes every pair" in both.output
    rerun_run = next(r for r in store.list_runs() if r.options.get("rerun_of") == first.id)
    nothing = rerun(rerun_run.id, "--errored")
    assert nothing.exit_code == 2 and "has no errored pairs" in nothing.output
    assert "Traceback" not in nothing.output and nothing.output.count("\n") == 1
    unknown = rerun("r_nope", "--all")
    assert unknown.exit_code == 2 and "unknown run 'r_nope'" in unknown.output
