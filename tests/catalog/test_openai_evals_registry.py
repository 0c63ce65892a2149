"""An OpenAI evals registry YAML is an import format: the class picks the grader, samples_jsonl resolves as
the registry resolves it, and what cannot be mapped is refused by name (one line each), or skipped with
--lenient.

The registry files are openai/evals' own (tests/data/openai_evals/registry, see SOURCE); the refusal cases
write small registry files in openai/evals' format next to copies of those samples.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evaljobs.catalog import CatalogError, loads_catalog, parse_catalog
from evaljobs.catalog.importers import dump_native, load_any
from evaljobs.catalog.importers.jsonl import FACT_RUBRIC

REGISTRY = Path(__file__).parents[1] / "data" / "openai_evals" / "registry"


def _registry(tmp_path: Path, yaml_text: str, name: str = "mine.yaml") -> Path:
    """A registry in openai/evals' layout: evals/NAME.yaml beside data/ (a copy of the real data)."""
    shutil.copytree(REGISTRY / "data", tmp_path / "registry" / "data")
    (tmp_path / "registry" / "evals").mkdir()
    path = tmp_path / "registry" / "evals" / name
    path.write_text(yaml_text, encoding="utf-8")
    return path


def _problems(path: Path, **options) -> list[str]:
    with pytest.raises(CatalogError) as info:
        load_any(path, **options)
    assert all("\n" not in p for p in info.value.problems)
    return info.value.problems


def test_each_class_picks_its_grader_and_samples_resolve_under_the_registry_data_folder():
    born = load_any(REGISTRY / "evals" / "born-first.yaml")
    assert born.format == "openai-evals"
    catalog = parse_catalog(born.data, source="born-first.yaml")
    first = catalog.scenario("sample-1")
    assert (first.expect.ideal, first.expect.ideal_grader, first.expect.gates) == (
        ("N",),
        "match",
        ("ideal",),
    )
    assert first.temperature == 0 and first.tags == ("eval:born-first",)  # Match samples at temperature 0
    assert born.data["description"] == (
        "Imported from the OpenAI evals registry file born-first.yaml: Test the "
        "model's ability to determine who was born first."
    )
    basic = parse_catalog(load_any(REGISTRY / "evals" / "test-basic.yaml").data, source="test-basic.yaml")
    graders = {s.group: s.expect.ideal_grader for s in basic.scenarios}
    assert graders == {"test-match": "match", "test-fuzzy-match": "fuzzy_match", "test-includes": "includes"}
    assert basic.scenario("test-includes.sample-2").expect.ideal == ("Season 11", "11")
    # The converted catalog is a native catalog with the same digest.
    assert (
        loads_catalog(dump_native(load_any(REGISTRY / "evals" / "test-basic.yaml").data)).digest
        == basic.digest
    )


def test_ignore_case_few_shot_and_model_graded_specs(tmp_path):
    few = [{"sample": [{"role": "system", "content": "Q: 1+1", "name": "example_user"},
                       {"role": "system", "content": "2", "name": "example_assistant"}]}] * 3
    path = _registry(tmp_path, """
case-free:
  id: case-free.v0
case-free.v0:
  class: evals.elsuite.basic.includes:Includes
  args: {samples_jsonl: test_fuzzy_match/samples.jsonl, ignore_case: true}
shots.v0:
  class: evals.elsuite.basic.match:Match
  args: {samples_jsonl: test_match/samples.jsonl, few_shot_jsonl: shots/few.jsonl, num_few_shot: 2}
fact.v0:
  class: evals.elsuite.modelgraded.classify:ModelBasedClassify
  args: {samples_jsonl: test_match/samples.jsonl, eval_type: cot_classify, modelgraded_spec: fact}
closed.v0:
  class: evals.elsuite.modelgraded.classify:ModelBasedClassify
  args:
    samples_jsonl: test_match/samples.jsonl
    modelgraded_spec: closedqa
    modelgraded_spec_args: {criteria: "conciseness: Is the answer concise?"}
""")
    (tmp_path / "registry" / "data" / "shots").mkdir()
    (tmp_path / "registry" / "data" / "shots" / "few.jsonl").write_text(
        "".join(json.dumps(s) + "\n" for s in few), encoding="utf-8")
    catalog = parse_catalog(load_any(path).data, source=str(path))
    assert catalog.scenario("case-free.sample-1").expect.ideal_grader == "includes_ignore_case"
    shots = catalog.scenario("shots.v0.sample-1")
    # Match.eval_sample: input[:-1] + the first num_few_shot samples + input[-1:]
    assert [m.get("name") for m in shots.messages[:-1]] == ["example_user", "example_assistant"] * 2
    assert shots.messages[-1]["role"] == "user"
    fact = catalog.scenario("fact.v0.sample-1")
    assert (fact.expect.judge, fact.expect.reference, fact.expect.gates) == (
        FACT_RUBRIC,
        "time",
        ("llm_judge",),
    )
    closed = catalog.scenario("closed.v0.sample-1")
    assert (closed.expect.judge, closed.expect.reference) == ("conciseness: Is the answer concise?", None)


def test_closedqa_takes_each_samples_criteria_when_the_eval_names_none(tmp_path):
    """ModelBasedClassify formats its prompt with the sample's fields and then the spec args
    ({**completions, **test_sample, **self.modelgraded_spec_args}), so a closedqa eval without
    modelgraded_spec_args (the registry's Indian_Menstrual_Health_ChatBot-closedqa) judges each sample on
    its own 'criteria'; one named by the eval wins over the sample's."""
    path = _registry(tmp_path, """
own.v0:
  class: evals.elsuite.modelgraded.classify:ModelBasedClassify
  args: {samples_jsonl: qa/samples.jsonl, eval_type: cot_classify, modelgraded_spec: closedqa}
named.v0:
  class: evals.elsuite.modelgraded.classify:ModelBasedClassify
  args:
    samples_jsonl: qa/samples.jsonl
    modelgraded_spec: closedqa
    modelgraded_spec_args: {criteria: "conciseness: Is the answer concise?"}
""")
    (tmp_path / "registry" / "data" / "qa").mkdir()
    samples = [{"input": [{"role": "user", "content": "Is it normal to have cramps?"}], "ideal": "Yes.",
                "criteria": "Does the answer say cramps are common?"},
               {"input": [{"role": "user", "content": "Can I swim?"}], "ideal": "Yes.",
                "criteria": "Does the answer say yes?"}]
    (tmp_path / "registry" / "data" / "qa" / "samples.jsonl").write_text(
        "".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    loaded = load_any(path)
    catalog = parse_catalog(loaded.data, source=str(path))
    assert [catalog.scenario(f"own.v0.sample-{n}").expect.judge for n in (1, 2)] == [
        "Does the answer say cramps are common?", "Does the answer say yes?"]
    assert catalog.scenario("own.v0.sample-1").expect.gates == ("llm_judge",)
    assert {catalog.scenario(f"named.v0.sample-{n}").expect.judge for n in (1, 2)} == {
        "conciseness: Is the answer concise?"}
    assert not any("criteria" in w for w in loaded.warnings)  # the field is read, not "not used"
    # A sample with no criterion, when the eval names none either: one line, naming the sample.
    (tmp_path / "registry" / "data" / "qa" / "samples.jsonl").write_text(
        json.dumps(samples[0]) + "\n" + json.dumps({"input": "Can I swim?", "ideal": "yes"}) + "\n",
        encoding="utf-8")
    problems = _problems(path)
    assert problems == [
        (f"{path}:4: eval 'own.v0': modelgraded_spec closedqa needs a criterion: sample 'sample-2' has no "
         "'criteria' and the eval has no modelgraded_spec_args.criteria")], problems


def test_what_cannot_be_mapped_is_refused_by_name_or_skipped_with_lenient(tmp_path):
    path = _registry(tmp_path, """
translate.v0:
  class: evals.elsuite.translate:Translate
  args: {samples_jsonl: test_match/samples.jsonl}
humor.v0:
  class: evals.elsuite.modelgraded.classify:ModelBasedClassify
  args: {samples_jsonl: test_match/samples.jsonl, modelgraded_spec: humor}
ok.v0:
  class: evals.elsuite.basic.fuzzy_match:FuzzyMatch
  args: {samples_jsonl: test_fuzzy_match/samples.jsonl}
""")
    assert _problems(path) == [
        (
            f"{path}:3: eval 'translate.v0': class 'evals.elsuite.translate:Translate' is custom Python code "
            "in openai/evals (its own eval_sample); evaljobs maps Match, Includes, FuzzyMatch, "
            "ModelBasedClassify only; remove the eval or pass --lenient to skip it"
        ),
        (
            f"{path}:7: eval 'humor.v0': modelgraded_spec 'humor': its prompt and choice scores "
            "(registry/modelgraded/humor.yaml) are not mapped to evaljobs' judge (mapped: fact, closedqa); "
            "remove the eval or pass --lenient to skip it"
        ),
    ]
    lenient = load_any(path, lenient=True)
    assert [g["name"] for g in lenient.data["groups"]] == ["ok.v0"]
    assert len(lenient.warnings) == 2 and all("skipped (--lenient)" in w for w in lenient.warnings)
    assert lenient.counts == {"assertions": 5, "mapped": 3, "external": 0, "refused": 2}


def test_a_git_lfs_pointer_a_missing_file_and_a_conflicting_grader_are_one_line_each(tmp_path):
    path = _registry(tmp_path, "lfs.v0:\n  class: evals.elsuite.basic.match:Match\n"
                               "  args: {samples_jsonl: lfs/samples.jsonl}\n")
    (tmp_path / "registry" / "data" / "lfs").mkdir()
    pointer = tmp_path / "registry" / "data" / "lfs" / "samples.jsonl"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 10\n")
    assert _problems(path) == [
        (
            f"{path}:3: eval 'lfs.v0': {pointer} is a Git LFS pointer, not the samples: run "
            "'git lfs pull' in the evals checkout first"
        )
    ]
    missing = _registry(tmp_path / "2", "gone.v0:\n  class: evals.elsuite.basic.match:Match\n"
                                        "  args: {samples_jsonl: nowhere/samples.jsonl}\n")
    (problem,) = _problems(missing)
    assert problem.startswith(f"{missing}:3: eval 'gone.v0': samples file 'nowhere/samples.jsonl' not found")
    assert _problems(REGISTRY / "evals" / "born-first.yaml", grader="includes") == [
        (f"{REGISTRY / 'evals' / 'born-first.yaml'}:6: eval 'born-first': its class Match grades with match; "
        "--grader includes would change its verdicts: drop --grader")]
    assert load_any(REGISTRY / "evals" / "born-first.yaml", grader="match").format == "openai-evals"


def test_a_yaml_copied_alone_finds_its_samples_next_to_it(tmp_path):
    shutil.copy(REGISTRY / "evals" / "hebrew-rhyme.yaml", tmp_path / "hebrew-rhyme.yaml")
    (tmp_path / "hebrew_rhyme").mkdir()
    shutil.copy(
        REGISTRY / "data" / "hebrew_rhyme" / "samples.jsonl", tmp_path / "hebrew_rhyme" / "samples.jsonl"
    )
    imported = load_any(tmp_path / "hebrew-rhyme.yaml")
    assert {s["expect"]["ideal_grader"] for s in imported.data["groups"][0]["scenarios"]} == {"fuzzy_match"}


def test_run_takes_the_registry_yaml_and_grader(cli, tmp_path, simulated_provider):
    simulated_provider()
    db = f"sqlite:///{tmp_path}/runs.db"
    done = cli("run", str(REGISTRY / "evals" / "test-basic.yaml"), "-m", "sim/a", "--strategy", "sequential",
               "--db", db, "--json")
    # the simulated answers fail these evals: a gate exit, no error
    assert done.exit_code in (0, 1), done.output
    report = json.loads(done.stdout)
    assert report["summary"]["expected"] == 9 and report["summary"]["errored"] == 0
    samples = REGISTRY / "data" / "test_match" / "samples.jsonl"
    plain = cli("run", str(samples), "-m", "sim/a", "--strategy", "sequential", "--db", db, "--grader",
                "inspect_match", "--json")
    assert plain.exit_code in (0, 1), plain.output
    assert json.loads(plain.stdout)["summary"]["expected"] == 3
    wrong = cli("run", str(samples), "-m", "sim/a", "--db", db, "--grader", "inspect_answer:x")
    assert wrong.exit_code != 0
    assert "inspect_answer takes letter, word or line, not 'x'" in wrong.output


def test_convert_names_every_format_it_converts(cli):
    """`catalog convert --help` said 'an ActiveAgent, promptfoo or JSONL catalog', leaving out the OpenAI
    evals registry files it converts too."""
    shown = cli("catalog", "convert", "--help").output
    assert "OpenAI evals registry file" in " ".join(shown.split())
