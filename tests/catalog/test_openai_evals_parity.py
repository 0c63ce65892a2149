"""OpenAI evals registry evals get the verdicts OpenAI evals itself gives: verdict by verdict, 100 %.

Real registry files from openai/evals (tests/data/openai_evals/registry, see SOURCE): ``born-first``
(``Match``), ``test-basic`` (``Match``, ``FuzzyMatch`` and ``Includes``) and ``hebrew-rhyme``
(``FuzzyMatch``). Each sample is copied once per fixed answer (written to pass and to fail: exact, a
leading space, trailing punctuation, in a sentence, other case, a prefix, a refusal...) into a registry of
the same layout, the answer in a simulated-provider directive; ``evaljobs`` runs the registry YAML
itself through the real pipeline against the simulated provider on loopback, and each stored verdict is
compared with the verdict of OpenAI evals' own grading code on the same answer.

The oracle: OpenAI evals' grading functions, transcribed below from openai/evals commit
4bfc1f58a821685acb40bb28ba54131740535046 (the ``evals`` package on PyPI pulls in ~40 dependencies, from
playwright to snowflake; its grading is these few lines). It is kept apart from evaljobs' own
implementation (evaljobs.evaluation.reference): a drift in either shows here.
"""
from __future__ import annotations

import json
import re
import shutil
import string
from pathlib import Path

import pytest
import yaml
from helpers import disagreements, expand, run_evaljobs, write_jsonl

REGISTRY = Path(__file__).parents[1] / "data" / "openai_evals" / "registry"
#: Samples of each data file used (the first N): with 12 answers each, a few hundred pairs per file.
SAMPLES_PER_FILE = 25
#: Sample copies whose verdicts may differ, with the reason (listed in docs/catalogs.md too): none.
KNOWN: dict[str, str] = {}


# ----- the oracle: openai/evals @ 4bfc1f58 -------------------------------------------------------------

def get_answer(text, answer_prompt, ignore_case=False):  # evals/elsuite/utils.py
    if ignore_case:
        idx = text.lower().rfind(answer_prompt.lower())
    else:
        idx = text.rfind(answer_prompt)
    if idx == -1:
        return None
    return text[idx: idx + len(answer_prompt)]


def normalize(s: str) -> str:  # evals/elsuite/utils.py
    s = s.lower()
    exclude = set(string.punctuation)
    s = "".join(char for char in s if char not in exclude)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    s = " ".join(s.split())
    return s


def fuzzy_match(s1: str, s2: str) -> bool:  # evals/elsuite/utils.py
    s1 = normalize(s1)
    s2 = normalize(s2)
    if s1 == "" or s2 == "":
        return s1 == s2
    return s1 in s2 or s2 in s1


def record_and_check_match(sampled, expected):  # evals/api.py (separator=None, options=None): correct?
    if isinstance(expected, tuple):
        expected = list(expected)
    elif not isinstance(expected, list):
        expected = [expected]
    picked = None
    for option in expected:
        if not sampled.startswith(option):
            continue
        picked = option
        break
    return picked is not None


def oracle(cls: str, args: dict, sampled: str, ideal) -> bool:
    """Whether the eval class records the sample as correct (Match / Includes / FuzzyMatch.eval_sample)."""
    if cls.endswith(":Match"):
        return record_and_check_match(sampled, ideal)
    ideals = ideal if isinstance(ideal, list) else [ideal]
    if cls.endswith(":Includes"):
        return any(get_answer(sampled, ref, args.get("ignore_case", False)) is not None for ref in ideals)
    if cls.endswith(":FuzzyMatch"):
        return True in [fuzzy_match(sampled, correct) for correct in ideals]
    raise AssertionError(f"no oracle for {cls}")


# ----- the suite ----------------------------------------------------------------------------------------

def _evals(yaml_file: Path) -> list[tuple[str, str, dict]]:
    """(alias, class, args) of each eval in a registry file, as the importer names its groups."""
    data = yaml.safe_load(yaml_file.read_text(encoding="utf-8"))
    aliases = {spec["id"]: name for name, spec in data.items() if isinstance(spec, dict) and "id" in spec}
    return [(aliases.get(name, name), spec["class"], spec.get("args") or {}) for name, spec in data.items()
            if isinstance(spec, dict) and "class" in spec]


def _answered_registry(
    tmp_path: Path, yaml_name: str
) -> tuple[Path, dict[str, dict[str, tuple[str, object]]]]:
    """A registry with the YAML verbatim and each data file's samples × fixed answers: the YAML's path and
    {data file: {sample id: (answer, ideal)}}."""
    root = tmp_path / "registry"
    (root / "evals").mkdir(parents=True)
    yaml_file = shutil.copy(REGISTRY / "evals" / yaml_name, root / "evals" / yaml_name)
    answers: dict[str, dict[str, tuple[str, object]]] = {}
    for _, _, args in _evals(Path(yaml_file)):
        relative = args["samples_jsonl"]
        if (root / "data" / relative).exists():
            continue  # two evals of one file read the same samples (test-basic)
        lines = (REGISTRY / "data" / relative).read_text(encoding="utf-8").splitlines()
        samples = [json.loads(line) for line in lines if line.strip()][:SAMPLES_PER_FILE]
        ideal_of = {str(i): s["ideal"] for i, s in enumerate(samples, 1)}
        rows = expand([(str(i), s) for i, s in enumerate(samples, 1)], "input",
                      lambda s: s["ideal"][0] if isinstance(s["ideal"], list) else s["ideal"])
        answers[relative] = {key: (answer, ideal_of[key.rsplit("-v", 1)[0]]) for key, answer, _ in rows}
        write_jsonl(root / "data" / relative, [record for _, _, record in rows])
    return Path(yaml_file), answers


@pytest.mark.parametrize("yaml_name", ["born-first.yaml", "test-basic.yaml", "hebrew-rhyme.yaml"])
def test_registry_evals_agree_with_openai_evals_verdict_by_verdict(yaml_name, tmp_path, sqlite_url,
                                                                    simulated_provider):
    simulated_provider()  # EVALJOBS_SIM_URL: the fixed answers come over loopback HTTP
    yaml_file, answers = _answered_registry(tmp_path, yaml_name)
    results = run_evaljobs(yaml_file, sqlite_url)
    evals = _evals(yaml_file)
    ours: dict[str, str] = {}
    theirs: dict[str, str] = {}
    for alias, cls, args in evals:
        for sample_id, (answer, ideal) in answers[args["samples_jsonl"]].items():
            key = f"{alias}.{sample_id}" if len(evals) > 1 else sample_id
            status, stored = results[key]
            assert stored == answer, (key, stored, answer)  # the answer came back byte for byte
            ours[key] = status
            theirs[key] = "passed" if oracle(cls, args, answer, ideal) else "failed"
    differ, compared = disagreements(ours, theirs, KNOWN)
    assert compared == len(results) and compared >= 9 * len(evals)
    assert differ == [], f"{len(differ)} of {compared} verdicts differ from OpenAI evals: {differ[:10]}"
    # The answers were written to pass and to fail: both verdicts occur.
    assert {"passed", "failed"} <= set(theirs.values())


def test_the_registry_names_the_grader_of_its_own_data_files():
    """A JSONL under a registry's data/ is graded as the registry's evals grade it, or refused in one line
    when they disagree (test_fuzzy_match/samples.jsonl is read by FuzzyMatch and Includes)."""
    from evaljobs.catalog import CatalogError
    from evaljobs.catalog.importers import load_any

    born = load_any(REGISTRY / "data" / "born_first" / "born_first.jsonl")
    assert {s["expect"]["ideal_grader"] for s in born.data["scenarios"]} == {"match"}
    assert "the class of the registry eval born-first.dev.v0" in born.data["description"]
    with pytest.raises(CatalogError) as info:
        load_any(REGISTRY / "data" / "test_fuzzy_match" / "samples.jsonl")
    assert len(info.value.problems) == 1
    assert (
        "grade them differently (fuzzy_match: test-fuzzy-match.s1.simple-v0 (test-basic.yaml); includes: "
        "test-includes.s1.simple-v0 (test-basic.yaml))" in info.value.problems[0]
    )
