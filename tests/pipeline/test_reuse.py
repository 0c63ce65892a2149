"""Incremental runs (--reuse): exactly the provider calls of changed pairs, counted at the simulated
provider."""
from __future__ import annotations

import json

import pytest

from evaljobs import store
from evaljobs.api import Session


def catalog_body(changed: bool = False, added: bool = False) -> dict:
    scenarios = [{"key": f"s{i}", "prompt": f"[sim: say answer {i}]", "expect": {"contains": [f"answer {i}"]}}
                 for i in range(4)]
    scenarios.append(
        {
            "key": "tool",
            "prompt": '[sim: call lookup {"id": "7"}] [sim: say found 7]',
            "tools": [{"name": "lookup", "returns": {"ok": True}}],
            "expect": {"contains": ["found"]},
        }
    )
    if changed:
        scenarios[2]["prompt"] = "[sim: say answer 2, now worded otherwise]"
    if added:
        scenarios.append({"key": "s9", "prompt": "[sim: say answer 9]", "expect": {"contains": ["answer 9"]}})
    return {"name": "reuse", "scenarios": scenarios}


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.0)


@pytest.fixture
def env(tmp_path, sim, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    db = f"sqlite:///{tmp_path}/reuse.db"
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", db)

    def write(name: str, **changes) -> str:
        path = tmp_path / name
        path.write_text(json.dumps(catalog_body(**changes)))
        return str(path)

    return db, write


def requests(sim) -> int:
    return sim.stats()["requests"]


def test_reuse_makes_exactly_the_calls_of_changed_pairs(env, sim):
    db, write = env
    models = ["sim/a", "sim/b"]
    with Session(db=db, broker="memory", width=4) as session:
        sim.reset_stats()
        first = session.wait(session.submit(write("v1.yaml"), models).id, timeout=60)
        # 4 one-turn scenarios + one tool scenario (2 turns), for 2 models
        assert first.status == "complete" and requests(sim) == (4 + 2) * 2

        sim.reset_stats()
        second = session.submit(write("v2.yaml", changed=True, added=True), models, reuse="latest")
        second = session.wait(second.id, timeout=60)
        assert requests(sim) == 2 * 2, "only s2 (changed) and s9 (new), for each model"
        rows = store.list_results(second.id)
        assert len(rows) == second.expected == 12 and len({r.ident for r in rows}) == 12
        reused = sorted(r.pair for r in rows if r.reused_from)
        assert reused == sorted((k, m) for k in ("s0", "s1", "s3", "tool") for m in models)
        assert {r.reused_from for r in rows if r.reused_from} == {first.id}
        assert all(r.cost == 0.0 for r in rows if r.reused_from)
        summary = second.report["summary"]
        assert (summary["reused"], summary["calls_saved"], summary["reused_from"]) == (
            8,
            3 * 2 + 2 * 2,
            [first.id],
        )
        assert summary["results"] == 12 and second.status == "complete"
        assert f"8 reused from {first.id} (10 provider calls saved)" in session.report(second.id, "md")

        # rerun and --reuse compose: a rerun of every pair reusing the run it reruns makes no call at all;
        # rows copied from copies name the run that evaluated them
        sim.reset_stats()
        again = session.start(session.create_rerun(second.id, ["all"], reuse=second.id))
        again = session.wait(again.id, timeout=60)
        assert requests(sim) == 0 and again.status == "complete" and again.persisted == 12
        origins = {r.scenario_key: r.reused_from for r in store.list_results(again.id)}
        assert origins["s0"] == first.id and origins["s2"] == second.id and origins["s9"] == second.id


def test_reuse_is_per_epoch_and_never_copies_an_errored_pair(env, sim):
    db, write = env
    with Session(db=db, width=2) as session:
        first = session.submit(write("v1.yaml"), ["sim/a"], strategy="sequential")
        sim.reset_stats()
        # two epochs: epoch 0 is copied, epoch 1 never ran before
        second = session.submit(write("v1.yaml"), ["sim/a"], strategy="sequential", epochs=2, reuse=first.id)
        assert requests(sim) == 4 + 2 and second.report["summary"]["reused"] == 5
        assert {r.epoch for r in store.list_results(second.id) if r.reused_from} == {0}
        sim.reset_stats()
        third = session.submit(write("v1.yaml"), ["sim/a"], strategy="sequential", time_limit=30,
                               reuse=first.id)
        assert third.report["summary"]["reused"] == 5 and requests(sim) == 0  # time limit is not identity
    # an errored pair is not a verdict: it is evaluated again, the rest is copied
    bad = write("bad.yaml")
    body = catalog_body()
    body["scenarios"].append({"key": "broken", "prompt": "[sim: status 400] hello"})
    with open(bad, "w") as handle:
        json.dump(body, handle)
    with Session(db=db, width=2) as session:
        first = session.submit(bad, ["sim/a"], strategy="sequential")
        assert [r.scenario_key for r in store.list_results(first.id) if r.status == "errored"] == ["broken"]
        sim.reset_stats()
        again = session.submit(bad, ["sim/a"], strategy="sequential", reuse=first.id)
        assert requests(sim) == 1 and again.report["summary"]["reused"] == 5
        assert [r.scenario_key for r in store.list_results(again.id) if not r.reused_from] == ["broken"]
    with pytest.raises(Exception, match="unknown run 'r_nope00000000'"):
        with Session(db=db) as session:
            session.submit(write("v1.yaml"), ["sim/a"], strategy="sequential", reuse="r_nope00000000")


def test_cli_run_and_rerun_take_reuse(cli, env, sim):
    db, write = env

    assert cli("run", write("v1.yaml"), "-m", "sim/a", "--strategy", "sequential").exit_code == 0
    sim.reset_stats()
    out = cli(
        "run", write("v2.yaml", changed=True), "-m", "sim/a", "--strategy", "sequential", "--reuse", "latest"
    )
    assert out.exit_code == 0, out.output
    assert (
        requests(sim) == 1 and "4 reused from r_" in out.output and "(5 provider calls saved)" in out.output
    )


def test_reuse_latest_is_the_latest_run_of_the_same_catalog_and_always_says_what_it_did(cli, env, sim):
    """Before: 'latest' was the newest run of any catalog, so a run of another catalog in between made
    --reuse reuse nothing, and nothing was said."""
    _, write = env

    def sequential(*args):
        done = cli(*args, "--strategy", "sequential")
        assert done.exit_code == 0, done.output
        return done

    def lines(done):
        return [line for line in done.stderr.splitlines() if "reuse" in line]

    other = write("other.json")
    body = catalog_body()
    body["name"] = "other"
    with open(other, "w") as handle:
        json.dump(body, handle)
    never = lines(sequential("run", write("v1.yaml"), "-m", "sim/a", "--reuse", "latest"))
    assert never == ["--reuse: no earlier run of catalog 'reuse'; evaluating all 5 pairs"]
    first = store.list_runs()[0].id
    sequential("run", other, "-m", "sim/a")  # the newest run is now of another catalog
    sim.reset_stats()
    again = sequential(
        "run", write("v2.yaml", changed=True, added=True), "-m", "sim/a", "-m", "sim/b", "--reuse", "latest"
    )
    assert lines(again) == [f"reused 4 of 12 pairs from {first} (1 changed, 7 new)"]
    assert requests(sim) == 2 + 7  # s2 (changed) and s9 (new) for sim/a; every sim/b pair (7 calls: a tool)
    # A run whose judge (an identity option) differs is not comparable: one line, everything evaluated.
    judged = sequential(
        "run",
        write("v2.yaml", changed=True, added=True),
        "-m",
        "sim/a",
        "--judge-model",
        "sim/judge",
        "--reuse",
        "latest",
    )
    latest, judged_id = store.list_runs()[1].id, store.list_runs()[0].id
    assert lines(judged) == [
        f"--reuse: {latest} is not comparable (its judge_model differs); evaluating all 6 pairs"
    ]
    # rerun --reuse latest: the latest run of the rerun's catalog (the judged one: not comparable), said the
    # same way.
    rerun = cli("rerun", first, "--all", "--reuse", "latest")
    assert rerun.exit_code == 0, rerun.output
    assert [line for line in rerun.stderr.splitlines() if "reuse" in line] == [
        f"--reuse: {judged_id} is not comparable (its judge_model differs); evaluating all 5 pairs"]
