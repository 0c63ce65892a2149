"""What makes the 4,000-pair finalize fast must not change what it does (issue 19).

* ``store.finalize`` pauses the cyclic garbage collector while it builds the report. The pause is
  process-wide, so what matters is that it ends: after a finalize that writes the report, returns
  an existing one, or raises (an incomplete run), the collector is as the caller left it.
* ``build_report`` rounds each distinct score and cost once, ``pair_stats`` each distinct rate, mean
  and error: every entry must still hold exactly what ``round`` gives, sign of zero included.

(``tests/store/test_finalize_report.py`` checks the whole stored report, byte for byte.)
"""
from __future__ import annotations

import gc
import math
import random

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.bench import measure_epochs
from evaljobs.catalog import parse_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report
from evaljobs.reports.rows import ReportRow
from evaljobs.reports.variance import mean_and_stderr, pair_stats
from evaljobs.store.report_text import report_text
from evaljobs.store.schema import Run, _dumps


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


def test_the_collector_is_paused_while_the_report_is_built_and_enabled_after(url, collector_enabled):
    seen = []

    def watched(run, results):
        seen.append(gc.isenabled())
        return build_report(run, results)

    run = store.create_run(_catalog(["s1", "s2"]), ["m1"], strategy="fanout", epochs=2)
    for key, model, epoch in store.missing_pairs(run.id):
        store.record_result(run.id, Result(key, model, "passed", score=1.0, epoch=epoch))
    finalized = store.finalize(run.id, watched)
    assert finalized.created and seen == [False] and gc.isenabled()
    # stored with the report's own encoder: the same text as the store's JSON of what finalize returned
    with store.connection():
        stored = Run.get_by_id(run.id).report
    assert stored == _dumps(finalized.report) and '"pass_at_k":{"1":1.0,"2":1.0}' in stored
    assert not store.finalize(run.id, watched).created  # the stored report, returned as is
    assert seen == [False] and gc.isenabled()


def test_the_collector_is_enabled_again_after_a_finalize_that_raises(url, collector_enabled):
    run = store.create_run(_catalog(["s1", "s2"]), ["m1"], strategy="fanout")
    store.record_result(run.id, Result("s1", "m1", "passed", score=1.0))
    with pytest.raises(store.Incomplete, match=rf"^run {run.id} has 1 of 2 pairs; missing: s2 × m1$"):
        store.finalize(run.id, build_report)
    assert gc.isenabled()
    with pytest.raises(store.UnknownRun):
        store.finalize("r_no_such_run", build_report)
    assert gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled(url, collector_enabled):
    run = store.create_run(_catalog(["s1"]), ["m1"], strategy="fanout")
    store.record_result(run.id, Result("s1", "m1", "passed", score=1.0))
    gc.disable()
    assert store.finalize(run.id, build_report).created
    assert not gc.isenabled()


#: scores and costs the memo must not confuse: zeros of both signs, ints equal to floats, values
#: one rounding apart, repeated values, a NaN, costs small enough to print with an exponent
SCORES = [
    1.0,
    1,
    0.0,
    -0.0,
    0,
    0.12345,
    0.12345,
    0.123449999,
    0.99995,
    1e-05,
    -0.0,
    0.0,
    True,
    float("nan"),
    0.5,
]
COSTS = [
    None,
    0.0,
    -0.0,
    1.2e-05,
    1.2e-05,
    0.0000125,
    0.0000124999,
    3,
    3.0,
    None,
    2.5e-07,
    0.0,
    1e-09,
    0.1,
    7,
]


@pytest.mark.parametrize("epochs", [1, 3])
def test_every_entry_holds_exactly_what_round_gives(epochs):
    rows = [
        ReportRow(
            f"s{i:02d}",
            "m1",
            i % epochs,
            "passed" if score else "failed",
            score,
            None,
            None,
            5,
            cost,
            False,
            0,
            0,
            None,
            None,
            None,
            0,
            0,
            0.0,
            None,
            {},
        )
        for i, (score, cost) in enumerate(zip(SCORES, COSTS))
    ]
    run = {"id": "r1", "models": ["m1"], "epochs": epochs, "expected": len(rows)}
    entries = build_report(run, list(reversed(rows)))["results"]
    assert [e["scenario_key"] for e in entries] == [r.scenario_key for r in rows]
    for row, entry in zip(rows, entries):
        expected_score = round(float(row.score), 4)
        expected_cost = None if row.cost is None else round(float(row.cost), 6)
        # repr tells 0.0 from -0.0 and compares NaN
        assert (repr(entry["score"]), repr(entry["cost"])) == (repr(expected_score), repr(expected_cost)), row
        assert type(entry["score"]) is float and (entry["cost"] is None or type(entry["cost"]) is float)
        assert ("epoch" in entry) == (epochs > 1)
    assert math.copysign(1.0, entries[3]["score"]) == -1.0 and math.copysign(1.0, entries[2]["cost"]) == -1.0


def test_epoch_statistics_hold_exactly_what_round_gives():
    rng = random.Random(7)
    patterns = [[1.0] * 5, [0.0] * 5, [-0.0] * 5, [0.33333, 0.66667, 1.0, 0.0, 0.5], [0.1] * 5]
    rows = []
    for i in range(60):  # several pairs share each rate, mean and error: the memo is hit
        scores = (
            patterns[i % len(patterns)] if i < 30 else [rng.choice((0.0, 0.25, 1 / 3, 1.0)) for _ in range(5)]
        )
        for epoch, score in enumerate(scores):
            rows.append(
                ReportRow(
                    f"s{i:02d}",
                    "m1",
                    epoch,
                    "passed" if score >= 0.5 else "failed",
                    score,
                    None,
                    None,
                    5,
                    None,
                    False,
                    0,
                    0,
                    None,
                    None,
                    None,
                    0,
                    0,
                    0.0,
                    None,
                    {},
                )
            )
    rng.shuffle(rows)
    stats = pair_stats(rows)
    assert [p["scenario_key"] for p in stats] == [f"s{i:02d}" for i in range(60)]
    for pair in stats:
        mine = sorted((r for r in rows if r.scenario_key == pair["scenario_key"]), key=lambda r: r.epoch)
        c = sum(1 for r in mine if r.status == "passed")
        mean, stderr = mean_and_stderr([float(r.score) for r in mine])
        assert [repr(pair[k]) for k in ("pass_rate", "mean_score", "stderr")] == \
            [repr(round(c / len(mine), 4)), repr(round(mean, 4)), repr(round(stderr, 4))]
        assert pair["statuses"] == [r.status for r in mine]


def test_the_epochs_bench_reports_wall_and_cpu_of_the_finalize(tmp_path):
    figure = measure_epochs(
        "memory", f"sqlite:///{tmp_path}/bench.db", sessions=Session, scenarios=3, models=2, epochs=2,
        repeat=2,
    )
    assert figure["pairs"] == 12 and figure["broker"] == "memory"
    for block in (figure, figure["without_epochs"]):
        assert len(block["finalize_all_ms"]) == len(block["finalize_cpu_all_ms"]) == 2
        assert block["finalize_ms"] >= 0 and block["finalize_cpu_ms"] >= 0  # measured: rounded to 0.1 ms
    assert gc.isenabled()


def _entry(
    key="s1",
    model="m1",
    epoch=0,
    status="passed",
    score=1.0,
    fault=None,
    error=None,
    duration=5,
    cost=0.0,
    cached=False,
    **extra,
):
    entry = {
        "scenario_key": key,
        "model": model,
        "epoch": epoch,
        "status": status,
        "score": score,
        "fault": fault,
        "error": error,
        "duration_ms": duration,
        "cost": cost,
        "cached": cached,
        **extra,
    }
    if epoch is None:
        del entry["epoch"]
    return entry


#: entries the fast path must write exactly as the standard encoder does, or leave to it
ODD_ENTRIES = [
    _entry(),
    _entry(),
    _entry(epoch=None),
    _entry(score=0.0),
    _entry(score=-0.0),
    _entry(score=0.0),
    _entry(cost=-0.0),
    _entry(cost=0.0),
    _entry(cost=None),
    _entry(cost=1.2e-05),
    _entry(score=1),
    _entry(score=True),
    _entry(duration=True),
    _entry(duration=5.0),
    _entry(cached=1),
    _entry(cached=True),
    _entry(epoch=True),
    _entry(score=float("nan")),
    _entry(score=float("inf")),
    _entry(cost=float("-inf")),
    _entry(key='quote " back \\ nl \n tab \t', model="ünï «code» 🎉 \u2028"),
    _entry(key=1),
    _entry(model=None),
    _entry(status=None),
    _entry(fault="wrong_answer", error="HTTP 503 | «later»"),
    _entry(fault=["a"]),
    _entry(error={"x": 1}),
    _entry(reused_from="r_1"),
    _entry(judge={"model": "j", "score": 0.5}),
    {"model": "m1", "scenario_key": "s1"},
    ["not", "a", "dict"],
    None,
    7,
    _entry(
        key="s2",
        model="m2",
        epoch=3,
        status="errored",
        score=0.0,
        fault="run_error",
        error="boom",
        duration=900,
        cost=None,
        cached=True,
    ),
]


@pytest.mark.parametrize("report", [
    {"run": {"id": "r1"}, "summary": {"pass_rate": 0.5}, "results": ODD_ENTRIES, "epochs": {"pairs": []}},
    {"results": ODD_ENTRIES[:3], "another": [1.5, -0.0, None, "é"]},
    {"results": "not a list"}, {"results": []}, {1: "a non-string key"}, [ODD_ENTRIES], "text", None,
])
def test_the_report_text_is_the_standard_encoders_text(report):
    assert report_text(report) == _dumps(report)


def test_a_finalized_report_with_every_kind_of_entry_is_stored_as_the_standard_encoders_text(url):
    run = store.create_run(
        _catalog(["alpha", "beta-judged", "gamma"]), ["m1", "m2"], strategy="fanout", epochs=2
    )
    judge = {
        "model": "sim/judge",
        "score": 0.5,
        "reason": "half «right»",
        "prompt": "RUBRIC",
        "raw": '{"score": 0.5}',
    }
    for n, (key, model, epoch) in enumerate(store.missing_pairs(run.id)):
        status = ("passed", "failed", "errored")[n % 3]
        details = {"judge": judge} if key.endswith("judged") else {}
        if n % 4 == 1:
            details["reused"] = {"run": "r_before", "calls": 2}
        store.record_result(
            run.id,
            Result(
                key,
                model,
                status,
                score=1.0 if status == "passed" else 0.0,
                scores={"contains": 1.0, **({"llm_judge": 0.5} if key.endswith("judged") else {})},
                fault=None if status == "passed" else "wrong_answer",
                error="HTTP 503 | later" if n % 3 == 2 else None,
                cost=(None, 0.0, 1.2e-05)[n % 3],
                cached=n % 2 == 0,
                epoch=epoch,
                duration_ms=n * 7,
                reused_from="r_before" if n % 4 == 1 else None,
                details=details,
            ),
        )
    report = store.finalize(run.id, build_report).report
    assert any("judge" in e for e in report["results"]) and any("reused_from" in e for e in report["results"])
    with store.connection():
        stored = Run.get_by_id(run.id).report
    assert stored == _dumps(report) == report_text(report)


def test_usual_entries_are_encoded_once_per_distinct_rest(monkeypatch):
    from evaljobs.store import report_text as module

    calls = []
    encode = module._ENCODE
    monkeypatch.setattr(module, "_ENCODE", lambda value: calls.append(value) or encode(value))
    entries = [
        _entry(
            key=f"s{i}",
            model=f"m{i % 4}",
            epoch=i % 10,
            score=float(i % 2),
            status=("failed", "passed")[i % 2],
        )
        for i in range(1000)
    ]
    assert module.report_text({"results": entries}) == _dumps({"results": entries})
    assert len(calls) == 2  # one per distinct (status, score, …): the 1,000 entries themselves never
