"""A criterion is one declaration: adding one (here a throwaway ``word_limit``, registered at test time the
way a plugin would) reaches the schema, validation, the digest, grading, the report and the viewer, with no
other edit. Before the registry, each of those listed the criteria itself (about 24 edits in 7 files).
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evaljobs import api
from evaljobs.api import Session
from evaljobs.catalog import CatalogError, criterion_names, gateable_names, loads_catalog
from evaljobs.catalog import criteria as catalog_criteria
from evaljobs.catalog.criteria import (POSITIVE_INT, enabled_by_keys, expect_keys, positive_int,
                                       value_criterion)
from evaljobs.catalog.schema import catalog_schema
from evaljobs.evaluation import graders
from evaljobs.evaluation.grading import grade
from evaljobs.evaluation.replay import Replay
from evaljobs.reports.build import render_markdown

CATALOG = "name: w\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {contains: [x], word_limit: 2}\n"
PLAIN = "name: w\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {contains: [x]}\n"


@pytest.fixture
def word_limit() -> Iterator[None]:
    """``word_limit``: the answer has at most this many words (fault ``too_wordy``)."""
    catalog_criteria.register(value_criterion(
        "word_limit", description="The answer may have at most this many words.", schema=POSITIVE_INT,
        check=positive_int, label=lambda words: f"words ≤ {words}"))
    graders.register(graders.value_grader(
        "word_limit", lambda replay, most: len((replay.answer or "").split()) <= most, fault="too_wordy"))
    try:
        yield
    finally:
        graders.unregister("word_limit")
        catalog_criteria.unregister("word_limit")


def test_without_the_module_the_key_is_unknown():
    with pytest.raises(CatalogError, match="unknown key 'word_limit'"):
        loads_catalog(CATALOG)


def test_the_schema_lists_the_new_criterion_and_its_key(word_limit):
    schema = catalog_schema()["$defs"]
    key = schema["expect"]["properties"]["word_limit"]
    assert key["type"] == ["integer", "null"] and key["description"].startswith("The answer may have")
    assert schema["settings"]["properties"]["word_limit"] == key  # also a setting, as token_budget is
    assert "word_limit" in schema["settings"]["properties"]["criteria"]["anyOf"][0]["anyOf"][0]["enum"]
    assert "word_limit" in criterion_names() and "word_limit" in gateable_names()


def test_validation_and_the_digest_read_the_new_key(word_limit):
    with pytest.raises(CatalogError) as info:
        loads_catalog(CATALOG.replace("word_limit: 2", "word_limit: 0"))
    assert str(info.value) == "<catalog>:5: scenario 'a': expect.word_limit must be a positive integer, not 0"
    inherited = loads_catalog(PLAIN.replace("scenarios:", "defaults: {word_limit: 2}\nscenarios:"))
    own = loads_catalog(CATALOG)
    assert inherited.scenario("a").expect.value("word_limit") == 2
    assert own.scenario("a").expect.value("word_limit") == 2
    assert own.body["scenarios"][0]["expect"]["word_limit"] == 2
    gated = loads_catalog(CATALOG.replace("word_limit: 2}", "word_limit: 2, gate: [word_limit]}"))
    assert gated.scenario("a").expect.gates == ("word_limit",)
    # A catalog that does not use the new key keeps its digest: a new key is written only when set.
    plain = loads_catalog(PLAIN).digest
    catalog_criteria.unregister("word_limit")
    try:
        assert loads_catalog(PLAIN).digest == plain
    finally:
        catalog_criteria.register(value_criterion(
            "word_limit", description="The answer may have at most this many words.", schema=POSITIVE_INT,
            check=positive_int, label=lambda words: f"words ≤ {words}"))


def test_weighted_lists_and_importers_ask_the_table_for_the_new_key(word_limit):
    # a weighted expect is graded by its assertions alone: the new criterion's key is refused beside it
    weighted = CATALOG.replace("{contains: [x], word_limit: 2}",
                               "{weighted: true, assertions: [{kind: builtin}], word_limit: 2}")
    with pytest.raises(CatalogError, match=r"write word_limit as assertions entries or drop 'weighted'"):
        loads_catalog(weighted)
    # an importer gating everything a foreign format expects (ActiveAgent) gates it too
    assert enabled_by_keys({"contains": ["x"], "word_limit": 2}) == ("contains", "word_limit")
    assert "word_limit" in expect_keys()


def test_grading_applies_the_new_grader(word_limit):
    scenario = loads_catalog(CATALOG.replace("word_limit: 2}", "word_limit: 2, gate: [word_limit]}"))
    wordy = grade(scenario.scenario("a"), Replay(answer="x marks the spot"))
    assert wordy.scores == {"contains": 1.0, "word_limit": 0.0}
    assert (wordy.status, wordy.fault) == ("failed", "too_wordy")
    assert wordy.details["failed_gates"] == ["word_limit"]
    assert grade(scenario.scenario("a"), Replay(answer="x")).status == "passed"


def test_a_run_reports_and_shows_the_new_criterion(word_limit, tmp_path: Path, sim, monkeypatch):
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    db = f"sqlite:///{tmp_path}/runs.db"
    with Session(db=db, broker="memory", width=1) as session:
        run = session.wait(session.submit(str(path), ["sim/fast"], strategy="sequential").id, timeout=120)
        report = run.report
    assert report is not None
    rows = [row for row in report["criteria"] if row["criterion"] == "word_limit"]
    assert [(row["model"], row["total"]) for row in rows] == [("sim/fast", 1)]
    assert "| word_limit | `sim/fast` |" in render_markdown(report)
    exported = api.export_run(run.id, str(tmp_path / "bundle"), db=db, broker="memory")
    pages = [p.read_text() for p in exported.files if p.parent.name == "scenarios"]
    assert pages and "<li>words ≤ 2</li>" in pages[0]
