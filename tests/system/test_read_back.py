"""What is stored reads back: a run of every import format and real example file is shown, reported in every
format, rerun, compared and served by the viewer from its stored snapshot, and grades the same.

Before: an OpenAI-evals JSONL sample with several system messages ran, but its snapshot was refused on read
("has both 'system' and a leading system message; keep one"): ``show`` and ``rerun`` failed. Worse, silently:
a snapshot lost ``weighted``/``threshold`` (promptfoo) and ``diagnose`` (ActiveAgent), so a worker process
or a rerun graded those scenarios another way than the run that stored them.
"""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from helpers import Viewer

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import catalog_from_body

ROOT = Path(__file__).resolve().parents[2]
#: Every real file an import reads, in tests/data and examples/imports, and what its load needs (JSONL samples
#: name their grader; Inspect datasets with other field names map them).
FILES: dict[str, dict] = {
    "tests/data/activeagent/support_catalog.yml": {},
    "tests/data/activeagent/support_suite.yml": {},
    "tests/data/inspect/security_guide.jsonl": {"grader": "inspect_includes"},
    "tests/data/inspect/theory_of_mind.jsonl": {"grader": "inspect_includes"},
    "tests/data/inspect/popularity.jsonl": {"grader": "inspect_match",
                                            "fields": ["input=question", "target=answer_matching_behavior"]},
    "tests/data/inspect/biology_qa.jsonl": {"grader": "inspect_includes",
                                            "fields": ["input=question", "target=answer"]},
    "tests/data/openai_evals/test_fuzzy_match_samples.jsonl": {"grader": "fuzzy_match"},
    "tests/data/openai_evals/test_match_samples.jsonl": {"grader": "match"},
    "tests/data/openai_evals/registry/evals/born-first.yaml": {},
    "tests/data/openai_evals/registry/evals/hebrew-rhyme.yaml": {},
    "tests/data/openai_evals/registry/evals/test-basic.yaml": {},
    "tests/data/openai_evals/registry/data/born_first/born_first.jsonl": {"grader": "includes"},
    "tests/data/openai_evals/registry/data/hebrew_rhyme/samples.jsonl": {"grader": "includes"},
    "tests/data/openai_evals/registry/data/test_fuzzy_match/samples.jsonl": {"grader": "fuzzy_match"},
    "tests/data/openai_evals/registry/data/test_match/samples.jsonl": {"grader": "match"},
    "tests/data/promptfoo/f-score/promptfooconfig.yaml": {},
    "tests/data/promptfoo/json-output/promptfooconfig.yaml": {},
    "tests/data/promptfoo/python-assert/promptfooconfig-inline.yaml": {},
    "tests/data/promptfoo/simple-test/promptfooconfig.yaml": {},
    "examples/imports/activeagent_catalog.yaml": {},
    "examples/imports/activeagent_suite.yaml": {},
    "examples/imports/samples.jsonl": {"grader": "includes"},
    "examples/imports/promptfoo/promptfooconfig.yaml": {},
}


def _options(load: dict) -> list[str]:
    """The same load options as ``run`` flags."""
    out = ["--grader", load["grader"]] if load.get("grader") else []
    for field in load.get("fields", ()):
        out += ["--field", field]
    return out




@pytest.fixture
def env(cli, tmp_path, sim, monkeypatch):
    """The shared ``cli``'s clean environment with the module's provider, in ``back.db``."""
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/back.db")
    return tmp_path


@pytest.fixture
def cli(cli):
    """The shared ``cli`` (tests/conftest.py), asserting the command succeeded."""

    def invoke(*args: str, ok=(0,)):
        done = cli(*args)
        assert done.exit_code in ok, f"{' '.join(args)}: {done.output[-3000:]}"
        return done

    return invoke


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_import_reads_back_from_its_snapshot(name, tmp_path):
    """The stored body is itself a catalog that parses to the same scenarios and digest."""
    with Session(db=f"sqlite:///{tmp_path}/load.db", broker="memory") as session:
        catalog = session.load(str(ROOT / name), lenient=True, **FILES[name])
    again = catalog_from_body(catalog.body, source="<snapshot>")
    assert again.digest == catalog.digest
    assert list(again.scenarios) == list(catalog.scenarios)


@pytest.mark.usefixtures("allow_code")  # its imported suites carry python/javascript assertions
def test_a_run_of_every_import_shows_reports_reruns_compares_and_serves(cli, env):
    runs = {}
    for name, load in FILES.items():
        cli(
            "run",
            str(ROOT / name),
            "-m",
            "sim/fast",
            "--judge-model",
            "sim/judge",
            "--strategy",
            "sequential",
            "--lenient",
            "--limit",
            "6",
            *_options(load),
            ok=(0, 1),
        )  # 1: every pair errored
        runs[name] = store.list_runs()[0].id
    for name, run_id in runs.items():
        store.forget_snapshots()  # read back from the database, as another process does
        assert run_id in cli("show", run_id).output
        for fmt in ("table", "md", "json", "junit", "html"):
            assert cli("report", run_id, "--format", fmt).output.strip(), (name, fmt)
        store.forget_snapshots()
        cli("rerun", run_id, "--all", ok=(0, 1))
        rerun_id = store.list_runs()[0].id
        # graded the same way from the snapshot as by the run that stored it
        before = {r.ident: (r.status, r.fault) for r in store.list_results(run_id)}
        after = {r.ident: (r.status, r.fault) for r in store.list_results(rerun_id)}
        assert after == before, name
        compared = json.loads(cli("compare", run_id, rerun_id, "--json").output)
        assert compared["summary"]["common"] == len(before) and compared["summary"]["regressed"] == 0, name
        runs[name] = (run_id, rerun_id)
    store.forget_snapshots()
    viewer = Viewer(f"sqlite:///{env}/back.db", "memory", env / "view.log")
    try:
        assert httpx.get(viewer.url + "/", timeout=30).status_code == 200
        for name, (run_id, rerun_id) in runs.items():
            key = store.list_results(run_id)[0].scenario_key
            for path in (
                f"/runs/{run_id}",
                f"/runs/{run_id}/scenarios/{key}",
                f"/runs/{rerun_id}/scenarios/{key}?baseline={run_id}",
                f"/compare?a={run_id}&b={rerun_id}",
            ):
                response = httpx.get(viewer.url + path, timeout=30)
                assert response.status_code == 200, (name, path, response.text[-1000:])
    finally:
        viewer.close()
