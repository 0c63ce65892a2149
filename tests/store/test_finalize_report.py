"""The report ``finalize`` stores is the same, byte for byte, as before finalize was made fast.

``tests/data/finalize/*.json`` were written by the finalize code of commit af60d5c (before the
single-pass report), from the runs :func:`fixed_runs` records: one with 4 epochs and one without,
with every kind of row the report reads (criteria scores, unknown costs, first-token and latency
times, faults and errors, cached replays, a judge's details, a reused pair). The run's id and
times are the only fields that differ between two recordings; they are set to fixed values before
comparing. Regenerate only on purpose: ``EVALJOBS_WRITE_GOLDEN=1 scripts/test
tests/store/test_finalize_report.py`` (and say in the commit why the report changed).
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from evaljobs import store
from evaljobs.catalog import parse_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report

GOLDEN = Path(__file__).parents[1] / "data" / "finalize"
MODELS = ["sim/a", "sim/b", "sim/c"]
JUDGE = {"model": "sim/judge", "score": 0.5, "reason": "half right «ok»", "prompt": "RUBRIC: be right",
         "raw": '{"score": 0.5}', "tokens": 12}


def _catalog(name: str, keys: list[str]):
    return parse_catalog(
        {
            "name": name,
            "scenarios": [
                {
                    "key": k,
                    "messages": [{"role": "user", "content": f"ask {k}"}],
                    **({"pass_threshold": 0.5} if i % 2 else {}),
                }
                for i, k in enumerate(keys)
            ],
        },
        source=f"{name}.yaml",
    )


def _result(rng: random.Random, key: str, model: str, epoch: int) -> Result:
    roll = rng.random()
    status = "passed" if roll < 0.55 else "failed" if roll < 0.9 else "errored"
    scores = {"contains": 1.0 if status == "passed" else 0.0}
    if rng.random() < 0.5:
        scores["regex"] = round(rng.random(), 3)
    details: dict = {"messages": [{"role": "assistant", "content": "not in the report"}]}
    if key.endswith("judged") and status != "errored":
        scores["llm_judge"] = 0.5
        details["judge"] = dict(JUDGE)
    return Result(key, model, status, score=scores["contains"] if status != "errored" else 0.0,
                  scores=scores if status != "errored" else {},
                  fault=None if status == "passed" else "wrong_answer" if status == "failed" else "run_error",
                  error=None if status != "errored" else "HTTP 503 from sim | try later",
                  output=f"answer {key} {model} {epoch}", duration_ms=rng.randrange(5, 900),
                  input_tokens=rng.randrange(100), output_tokens=rng.randrange(50),
                  cost=rng.choice((None, round(rng.random() / 1000, 7), 0.0)),
                  ttft_ms=rng.choice((None, round(rng.random() * 300, 2))),
                  latency_ms=rng.choice((None, round(rng.random() * 900, 2))),
                  cached=rng.random() < 0.2, epoch=epoch, details=details)


def fixed_runs() -> dict[str, dict]:
    """Record the two runs and finalize them: name → report (ids and times fixed)."""
    rng = random.Random(19)
    reports = {}
    for name, keys, epochs in (("epochs", ["alpha", "beta", "gamma-judged", "delta", "epsilon"], 4),
                               ("flat", ["one", "two-judged", "three", "four"], 1)):
        run = store.create_run(_catalog(name, keys), MODELS, strategy="fanout", epochs=epochs)
        # by epoch, key and model, as missing_pairs listed them before runs kept the catalog's order: the
        # same random results for the same pairs
        pairs = sorted(store.missing_pairs(run.id), key=lambda p: (p[2], p[0], MODELS.index(p[1])))
        for n, (key, model, epoch) in enumerate(pairs):
            result = _result(rng, key, model, epoch)
            if n % 7 == 3:  # --reuse: a copy of an earlier run's evaluation, with the calls it saved
                result.reused_from = "r_earlier"
                result.details = {**result.details, "reused": {"run": "r_earlier", "calls": 2}}
            store.record_result(run.id, result)
        report = store.finalize(run.id, build_report).report
        report["run"].update(id="r_fixed", created_at="2026-01-01T00:00:00", started_at=None,
                             finished_at="2026-01-01T00:01:00")
        reports[name] = report
    return reports


def _text(report: dict) -> str:
    """The report as stored: key order kept, compact, UTF-8 (``store.schema._dumps``)."""
    return json.dumps(report, ensure_ascii=False, separators=(",", ":"))


@pytest.fixture
def url(db_url):
    store.connect(db_url)
    return db_url


def test_the_stored_report_is_what_it_was_before_finalize_was_made_fast(url):
    reports = fixed_runs()
    if os.environ.get("EVALJOBS_WRITE_GOLDEN") == "1" and url.startswith("sqlite"):
        for name, report in reports.items():
            (GOLDEN / f"{name}.json").write_text(_text(report) + "\n", encoding="utf-8")
    for name, report in reports.items():
        expected = (GOLDEN / f"{name}.json").read_text(encoding="utf-8").rstrip("\n")
        assert _text(report) == expected, f"the {name} report changed"
    # the fixture covers what it says it covers
    epochs = reports["epochs"]
    assert epochs["summary"]["results"] == 5 * 3 * 4 and epochs["summary"]["reused"] > 0
    assert any(p["flaky"] for p in epochs["epochs"]["pairs"]) and any("judge" in r for r in epochs["results"])
    assert epochs["summary"]["cost_unknown"] > 0 and epochs["summary"]["errored"] > 0
    assert "epochs" not in reports["flat"] and any("judge" in r for r in reports["flat"]["results"])
