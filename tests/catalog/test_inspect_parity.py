"""Inspect datasets get the verdicts Inspect itself gives, with evaljobs' named Inspect graders.

The real ``inspect eval`` (inspect-ai, pinned in setup.cfg's test extra) and evaljobs grade the same fixed
answers, verdict by verdict. Datasets: Inspect's own examples (tests/data/inspect, see SOURCE) —
``theory_of_mind`` (``input``/``target`` chat samples), ``popularity`` (field-mapped as
inspect_ai/examples/popularity.py maps it: ``input=question``,
``target=answer_matching_behavior``; targets with a leading space) and ``biology_qa``
(``input=question``, ``target=answer``, with ids). Each sample is copied
once per answer (written to pass and to fail: exact, spaced, punctuated, in a sentence, other case, a
prefix, a refusal, an ``ANSWER:`` line), the answer in a simulated-provider directive; Inspect reaches
the simulated provider on loopback as an OpenAI-compatible model (``openai-api/sim/...``), evaljobs runs
the same file through its real pipeline. The verdicts depend on the answer and the target alone, so
each dataset keeps the first sample of each distinct target (popularity's 25 samples have two: " Yes"
and " No"), and one ``inspect eval`` evaluates the three datasets' tasks (its start-up is paid once).
Every scorer of the task — ``includes()``, ``match()``,
``exact()``, ``answer("word")``, ``pattern(...)`` — is compared with its evaljobs grader; a disagreement
fails the suite unless it is in KNOWN below and in docs/catalogs.md's known differences, with its reason
(none is, today).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import disagreements, expand, run_evaljobs, write_jsonl

DATA = Path(__file__).parents[1] / "data" / "inspect"
#: Samples of each dataset read (the first N), of which the first of each distinct target is used: with
#: ~17 answers each, up to a few hundred copies per dataset.
SAMPLES_PER_DATASET = 25
PATTERN = r"answer is ([^.\n]+)"
#: Sample copies whose verdicts may differ, with the reason (listed in docs/catalogs.md too): none.
KNOWN: dict[str, str] = {}
#: Inspect scorer (its score name in the log) -> the evaljobs grader with its semantics.
SCORERS = {
    "includes": ("includes()", "inspect_includes"),
    "match": ("match()", "inspect_match"),
    "exact": ("exact()", "inspect_exact"),
    "answer": ('answer("word")', "inspect_answer:word"),
    "pattern": (f"pattern({PATTERN!r})", f"inspect_pattern:{PATTERN}"),
}
#: dataset -> FieldSpec mapping (as Inspect's own example task maps it), empty for input/target files.
DATASETS = {
    "theory_of_mind": {},
    "popularity": {"input": "question", "target": "answer_matching_behavior"},
    "biology_qa": {"input": "question", "target": "answer"},
}

TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import FieldSpec, json_dataset
from inspect_ai.scorer import answer, exact, includes, match, pattern
from inspect_ai.solver import generate
'''
DATASET_TASK = '''

@task
def parity_{name}():
    return Task(dataset=json_dataset({dataset!r}, FieldSpec(input={input!r}, target={target!r})),
                solver=[generate()], scorer=[{scorers}])
'''


def _answered_dataset(folder: Path, name: str) -> Path:
    """The dataset's first samples, the first of each distinct target (samples with the same target get
    the same answers, so the same verdicts), each copied once per fixed answer (ids KEY-vN)."""
    fields = DATASETS[name]
    input_field, target_field = fields.get("input", "input"), fields.get("target", "target")
    lines = (DATA / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()][:SAMPLES_PER_DATASET]

    def reference(record: dict) -> str:
        target = record[target_field]
        return target if isinstance(target, str) else target[0]

    keyed: list[tuple[str, dict]] = []
    targets: set[str] = set()
    for number, record in enumerate(records, 1):
        if reference(record) not in targets:
            targets.add(reference(record))
            keyed.append((str(record.get("id", number)), record))
    rows = expand(keyed, input_field, reference)
    return write_jsonl(folder / f"{name}-answered.jsonl", [record for _, _, record in rows])


def _inspect_verdicts(folder: Path, datasets: dict[str, Path], sim_url: str,
                      ) -> dict[str, dict[str, dict[str, str]]]:
    """Run the real `inspect eval` once, a task per dataset: {dataset: {score name: {sample id:
    "passed"/"failed"/other}}}, with the completions under "_completions"."""
    task = folder / "parity_task.py"
    scorers = ", ".join(call for call, _ in SCORERS.values())
    task.write_text(TASK + "".join(
        DATASET_TASK.format(name=name, dataset=str(path), input=DATASETS[name].get("input", "input"),
                            target=DATASETS[name].get("target", "target"), scorers=scorers)
        for name, path in datasets.items()), encoding="utf-8")
    logs = folder / "inspect-logs"
    env = {**os.environ, "SIM_BASE_URL": sim_url, "SIM_API_KEY": "parity", "INSPECT_LOG_DIR": str(logs),
           "INSPECT_DISPLAY": "none"}
    inspect = Path(sys.executable).parent / "inspect"
    done = subprocess.run([str(inspect), "eval", task.name, "--model", "openai-api/sim/parity",
                           "--log-format", "json", "--log-dir", str(logs), "--display", "none",
                           "--max-connections", "8", "--max-tasks", str(len(datasets)),
                           # The log is written once, at the end, and no live event buffer is kept (for
                           # `inspect view` while it runs): by default Inspect rewrote the whole JSON log
                           # every 100 samples and stored each event in a sqlite buffer too, two thirds of
                           # its CPU here; the verdicts read below are the same.
                           "--log-buffer", "100000", "--no-log-realtime"],
                          check=False, env=env, cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    by_dataset: dict[str, dict[str, dict[str, str]]] = {}
    for log_file in logs.glob("*.json"):
        log = json.loads(log_file.read_text(encoding="utf-8"))
        assert log["status"] == "success", log.get("error")
        verdicts: dict[str, dict[str, str]] = {name: {} for name in SCORERS}
        completions: dict[str, str] = {}
        for sample in log["samples"]:
            completions[str(sample["id"])] = sample["output"]["completion"]
            for name, score in sample["scores"].items():
                value = score["value"]
                verdict = {"C": "passed", "I": "failed"}.get(value, f"value {value!r}")
                verdicts[name][str(sample["id"])] = verdict
        verdicts["_completions"] = completions
        by_dataset[log["eval"]["task"].removeprefix("parity_")] = verdicts
    assert sorted(by_dataset) == sorted(datasets), sorted(by_dataset)
    return by_dataset


@pytest.fixture(scope="module")
def inspects(module_simulated_provider, tmp_path_factory):
    """(the simulated provider, the answered datasets, Inspect's verdicts on them): one `inspect eval`."""
    sim = module_simulated_provider()  # SIM_BASE_URL for Inspect; each test sets EVALJOBS_SIM_URL
    folder = tmp_path_factory.mktemp("inspect-parity")
    datasets = {name: _answered_dataset(folder, name) for name in DATASETS}
    return sim, datasets, _inspect_verdicts(folder, datasets, sim.url)


@pytest.mark.parametrize("name", list(DATASETS))
def test_inspect_scorers_and_evaljobs_graders_agree_verdict_by_verdict(name, inspects, sqlite_url,
                                                                      monkeypatch):
    sim, datasets, verdicts = inspects
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)  # one server for both tools
    fields, dataset, theirs = DATASETS[name], datasets[name], verdicts[name]
    field_args = [f"{k}={v}" for k, v in fields.items()]
    summary = {}
    for score_name, (_, grader) in SCORERS.items():
        results = run_evaljobs(dataset, sqlite_url, grader=grader, fields=field_args)
        for key, (_, stored) in results.items():  # both tools got the same reply
            assert stored == theirs["_completions"][key], (key, stored, theirs["_completions"][key])
        ours = {key: status for key, (status, _) in results.items()}
        differ, compared = disagreements(ours, theirs[score_name], KNOWN)
        assert differ == [], f"{grader}: {len(differ)} of {compared} verdicts differ from Inspect's " \
                             f"{score_name}(): {differ[:10]}"
        summary[score_name] = (compared, sorted(set(theirs[score_name].values())))
    # Every scorer graded every sample copy; includes() and match() saw answers they pass and answers they
    # fail (answer("word") never passes popularity: its targets keep their leading space, the extracted word
    # does not — in Inspect and here alike).
    for score_name, (compared, values) in summary.items():
        assert compared == len(theirs["_completions"]), score_name
        if score_name in ("includes", "match"):
            assert values == ["failed", "passed"], (score_name, values)


def test_a_dataset_with_other_field_names_gets_one_line_naming_the_mapping():
    from evaljobs.catalog import CatalogError
    from evaljobs.catalog.importers import load_any

    with pytest.raises(CatalogError) as info:
        load_any(DATA / "biology_qa.jsonl", grader="inspect_includes")
    assert info.value.problems == [
        (
            f"{DATA / 'biology_qa.jsonl'}:1: the samples have no 'input' and no 'ideal' or 'target' field "
            "(fields: id, question, answer); map them: --field input=question --field target=answer"
        )
    ]
    mapped = load_any(
        DATA / "popularity.jsonl",
        grader="inspect_match",
        fields=["input=question", "target=answer_matching_behavior", "metadata=label_confidence"],
    )
    first = mapped.data["scenarios"][0]
    assert first["expect"] == {"ideal": [" Yes"], "ideal_grader": "inspect_match", "gate": ["ideal"]}
    assert first["tags"] == ["label_confidence:0.8860552919198255"]
    # The fields the mapping does not name are ignored, as Inspect ignores them, and said so once.
    assert mapped.warnings == [
        (
            f"{DATA / 'popularity.jsonl'}: fields 'statement', 'answer_not_matching_behavior' "
            "are not used (as Inspect ignores fields its FieldSpec does not name)"
        )
    ]
