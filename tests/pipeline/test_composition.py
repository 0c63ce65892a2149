"""Features that compose: hypothesis draws combinations of strategy × broker × epochs × judge × cache × reuse
× import format, runs each on the simulated provider (Redis with a real ``evaljobs worker`` process, or the
in-process broker) and checks the invariants that every combination must keep:

* every expected (scenario, model, epoch) has exactly one row, with a verdict status;
* no row is a ``run_error`` made by grading ("grading failed: ...");
* the report's totals (summary and per model) equal the rows;
* the same inputs give the same verdicts on every strategy (each draw is compared with a plain
  sequential run of the same catalog, models and epochs);
* every run reads back: its snapshot, read from the database as another process reads it, is the
  catalog it ran, its report renders in every format, and a rerun of every pair graded from that
  snapshot gives the same verdicts.

Bounded (``max_examples``, ``derandomize``, no deadline) so it runs in about a minute in CI. On the code
before issue 31 it fails at once: the unpriced judge (``cost += None``) turns judged pairs into
``run_error``, and the OpenAI-evals JSONL with several system messages does not read back.
"""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from helpers import WorkerProcess

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog.subset import Selection
from evaljobs.reports.render import FORMATS, render

pytestmark = [pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["sim/fast", "sim/smart"]
JUDGES = {"priced": "sim/judge", "unpriced": "lab/judge", "failing": "sim/judge"}
#: Import format → (a real file of tests/data, what its load needs).
IMPORTS = {
    "promptfoo": (ROOT / "tests/data/promptfoo/simple-test/promptfooconfig.yaml", {}),
    "openai-evals": (
        ROOT / "tests/data/openai_evals/test_fuzzy_match_samples.jsonl",
        {"grader": "fuzzy_match"},
    ),
    "openai-evals-registry": (ROOT / "tests/data/openai_evals/registry/evals/test-basic.yaml", {}),
    "inspect": (ROOT / "tests/data/inspect/security_guide.jsonl", {"grader": "inspect_includes"}),
    "activeagent": (ROOT / "tests/data/activeagent/support_suite.yml", {}),
}


def native(judge: str) -> str:
    """A judged native catalog: a tool, plain checks, and a rubric (with a judge that fails if asked to)."""
    broken = " [sim@judge: status 400 judge model is gone]" if judge == "failing" else ""
    return f"""
name: composed-native
defaults: {{judge_model: {JUDGES[judge]}}}
scenarios:
  - key: greet
    prompt: "Hi [sim: say Hello from Acme, how can I help?]"
    expect: {{contains: [acme], not_contains: [password]}}
  - key: order
    prompt: "Where is order 7? [sim: call lookup {{\\"id\\": \\"7\\"}}] [sim: say It shipped on Tuesday.]"
    tools: [{{name: lookup, returns: {{status: shipped}}}}]
    expect: {{tools: [{{name: lookup}}], contains: [shipped]}}
  - key: sorry
    prompt: "My parcel is late. [sim: say I am sorry the parcel is late; I will track it now.]"
    expect: {{judge: "The answer says sorry and offers to track the parcel.{broken}"}}
"""


@pytest.fixture
def world(redis_url, tmp_path, simulated_provider, monkeypatch):
    sim = simulated_provider(latency=0.0)
    providers = tmp_path / "providers.yaml"  # 'lab': the simulated provider with no prices at all
    providers.write_text(f'providers:\n  lab: {{api: openai, base_url: "{sim.url}", api_key_env: null}}\n')
    monkeypatch.setenv("EVALJOBS_PROVIDERS", str(providers))
    db = f"sqlite:///{tmp_path}/compose.db"
    worker = WorkerProcess(redis_url, db, threads=4, log=tmp_path / "worker.log",
                           env={"EVALJOBS_SIM_URL": sim.url, "EVALJOBS_PROVIDERS": str(providers)}).start()
    try:
        yield {"db": db, "redis": redis_url, "providers": str(providers), "dir": tmp_path}
    finally:
        worker.terminate(10)


def _verdicts(run_id: str) -> dict[tuple[str, str, int], tuple[str, str | None]]:
    return {r.ident: (r.status, r.fault) for r in store.list_results(run_id)}


def _check(info: store.RunInfo, catalog) -> None:
    rows = store.list_results(info.id)
    expected = store.expected_pairs(info.id)
    # exactly one row per expected (scenario, model, epoch), each with a verdict status
    assert sorted(r.ident for r in rows) == sorted(expected), "one row per pair and epoch"
    assert all(r.status in ("passed", "failed", "errored") for r in rows)
    # grading never crashes into a run_error
    crashed = [
        (r.ident, r.error) for r in rows if r.fault == "run_error" and "grading failed" in (r.error or "")
    ]
    assert not crashed, crashed
    # the report's totals are the rows
    report = info.report
    assert report is not None and info.status in store.FINISHED_STATUSES
    summary = report["summary"]
    assert summary["results"] == len(rows)
    for status in ("passed", "failed", "errored"):
        assert summary[status] == sum(1 for r in rows if r.status == status), status
    for block in report["models"]:
        mine = [r for r in rows if r.model == block["model"]]
        assert block["scenarios"] == len(mine) and block["passed"] == sum(
            1 for r in mine if r.status == "passed"
        )
        assert block["cost_unknown"] == sum(1 for r in mine if r.cost is None)
    # it reads back: the snapshot (not this process's cache) is the catalog that ran; every format renders
    store.forget_snapshots()
    assert list(store.load_snapshot(info.digest).scenarios) == list(catalog.scenarios)
    for fmt in FORMATS:
        assert render(report, fmt, results=rows)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(strategy=st.sampled_from(["sequential", "threads", "fanout", "per-model"]),
       broker=st.sampled_from(["memory", "redis"]), epochs=st.sampled_from([1, 2]),
       judge=st.sampled_from(sorted(JUDGES)), cache=st.booleans(),
       reuse=st.sampled_from([None, "reference", "latest"]),
       source=st.sampled_from(["native", *sorted(IMPORTS)]))
@pytest.mark.usefixtures("allow_code")  # its imported suites carry python/javascript assertions
def test_features_compose(world, strategy, broker, epochs, judge, cache, reuse, source):
    for axis, value in (("strategy", strategy), ("broker", broker), ("epochs", epochs), ("judge", judge),
                        ("cache", cache), ("reuse", reuse), ("source", source)):
        event(f"{axis}={value}")  # --hypothesis-show-statistics lists what the draws covered
    if source == "native":
        path, load = world["dir"] / f"native-{judge}.yaml", {}
        path.write_text(native(judge))
    else:
        path, load = IMPORTS[source]
    selection = Selection(limit=3)  # at most three scenarios of a file: the draws stay quick
    tag = uuid.uuid4().hex[:8]
    with Session(db=world["db"], broker="memory", width=4, providers=world["providers"]) as session:
        catalog = session.load(str(path), lenient=True, **load)
        reference = session.submit(catalog, MODELS, strategy="sequential", epochs=epochs, selection=selection,
                                   judge_model=JUDGES[judge] if source != "native" else None)
    _check(reference, _selected(catalog, reference))
    with Session(db=world["db"], broker=world["redis"] if broker == "redis" else "memory", width=4,
                 providers=world["providers"]) as session:
        info = session.submit(
            catalog,
            MODELS,
            strategy=strategy,
            epochs=epochs,
            cache=cache,
            selection=selection,
            judge_model=JUDGES[judge] if source != "native" else None,
            reuse={"reference": reference.id, "latest": "latest", None: None}[reuse],
        )
        info = session.wait(info.id, timeout=90)
        if reuse is not None:
            assert session.reuse_note and session.reuse_note.startswith("reused "), session.reuse_note
        _check(info, _selected(catalog, info))
        assert _verdicts(info.id) == _verdicts(reference.id), (
            f"{strategy}/{broker} differs from sequential ({tag})"
        )
        # and a rerun of every pair, graded from the stored snapshot alone, gives the same verdicts
        store.forget_snapshots()
        again = session.start(session.create_rerun(info.id, ["all"]))
        again = session.wait(again.id, timeout=90)
        assert _verdicts(again.id) == _verdicts(reference.id), f"the rerun of {strategy}/{broker} differs"


def _selected(catalog, info: store.RunInfo):
    """The catalog a run stored: its snapshot is the selected scenarios (read here from this process)."""
    from evaljobs.catalog.subset import select

    chosen, _ = select(catalog, Selection(limit=3))
    assert chosen.digest == info.digest
    return chosen
