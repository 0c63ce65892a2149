"""OpenAI evals registry YAML (``registry/evals/NAME.yaml``) as native catalog data.

A registry file maps names to eval specs; an entry with ``id`` is an alias (the
short name users run, with the ``description``), an entry with ``class`` is the
eval itself::

    born-first:
      id: born-first.dev.v0
      description: Test the model's ability to determine who was born first.
    born-first.dev.v0:
      class: evals.elsuite.basic.match:Match
      args:
        samples_jsonl: born_first/born_first.jsonl

Each eval becomes one group of scenarios (keys ``ALIAS.SAMPLE`` when the file
holds several evals), graded as its class grades (evals/elsuite/basic/*.py at
openai/evals commit 4bfc1f58):

- ``Match`` → ``match`` (the reply starts with an ideal), at temperature 0 as the
  class samples; ``num_few_shot`` + ``few_shot_jsonl`` put the few-shot samples
  before the last message, as ``Match.eval_sample`` does;
- ``Includes`` → ``includes`` (``ignore_case: true`` → ``includes_ignore_case``);
- ``FuzzyMatch`` → ``fuzzy_match``, at temperature 0;
- ``ModelBasedClassify`` with ``modelgraded_spec: fact`` → the LLM judge with the
  ideal as reference answer; ``closedqa`` → the judge with the spec's
  ``criteria`` as rubric (else each sample's ``criteria``, which the class formats
  into the same prompt). Other specs, and every other class (custom Python code
  in openai/evals' ``elsuite``), are refused by name.

``samples_jsonl`` is resolved as ``Eval._prefix_registry_path`` resolves it: a
path that exists as given (relative to the working directory), else under the
registry's ``data/`` folder (the sibling of the YAML's ``evals/`` folder); and,
for a YAML copied on its own, next to the YAML.

Domain code: reads files, no network.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from evaljobs.catalog.importers.jsonl import read_samples
from evaljobs.catalog.importers.shared import Problems, key_part, read_text
from evaljobs.catalog.model import CatalogError

FORMAT = "openai-evals"
MATCH = "evals.elsuite.basic.match:Match"
INCLUDES = "evals.elsuite.basic.includes:Includes"
FUZZY_MATCH = "evals.elsuite.basic.fuzzy_match:FuzzyMatch"
CLASSIFY = "evals.elsuite.modelgraded.classify:ModelBasedClassify"
#: The arguments each mapped class takes (its __init__), and what evaljobs does with them.
_ARGS = {
    MATCH: ("samples_jsonl", "max_tokens", "num_few_shot", "few_shot_jsonl"),  # max_tokens is never sent
    INCLUDES: ("samples_jsonl", "ignore_case"),
    FUZZY_MATCH: ("samples_jsonl", "max_tokens"),
    CLASSIFY: ("samples_jsonl", "modelgraded_spec", "modelgraded_spec_args", "eval_type"),
}
#: Model-graded specs evaljobs' judge stands in for (evals/registry/modelgraded/*.yaml).
JUDGED_SPECS = ("fact", "closedqa")
_LFS = "version https://git-lfs.github.com/spec/v1"


def is_registry(data: Any) -> bool:
    """An OpenAI evals registry file: a mapping whose entries include an eval spec (``class:
    module:Name``)."""
    return isinstance(data, dict) and any(isinstance(v, dict) and isinstance(v.get("class"), str)
                                          and ":" in v["class"] for v in data.values())


def convert_registry(data: dict[str, Any], source: str, problems: Problems,
                     grader: str | None = None) -> dict[str, Any]:
    """The evals of a registry file as native catalog data (one group per eval)."""
    aliases: dict[str, list[str]] = {}
    descriptions: dict[str, str] = {}
    for name, spec in data.items():
        target = spec if isinstance(spec, str) else spec.get("id") if isinstance(spec, dict) else None
        if isinstance(target, str) and not (isinstance(spec, dict) and "class" in spec):
            aliases.setdefault(target, []).append(str(name))
            if isinstance(spec, dict) and isinstance(spec.get("description"), str):
                descriptions[target] = spec["description"]
    evals = [(str(name), spec) for name, spec in data.items() if isinstance(spec, dict) and "class" in spec]
    groups: list[dict[str, Any]] = []
    several = len(evals) > 1
    for name, spec in evals:
        shown = (aliases.get(name) or [name])[0]
        group = _eval_group(name, shown, spec, source, problems, grader, prefix=several)
        if group is not None:
            groups.append(group)
    stem = os.path.splitext(os.path.basename(source))[0]
    described = [descriptions[n] for n, _ in evals if n in descriptions]
    description = (f"Imported from the OpenAI evals registry file {os.path.basename(source)}"
                   + (f": {described[0]}" if len(described) == 1 else ""))
    return {"name": key_part(stem) or "evals", "description": description, "groups": groups}


def _eval_group(name: str, shown: str, spec: dict[str, Any], source: str, problems: Problems,
                grader: str | None, *, prefix: bool) -> dict[str, Any] | None:
    path = (name,)
    cls = spec.get("class")
    where = f"eval {shown!r}"
    if cls not in _ARGS:
        problems.unsupported(
            path + ("class",),
            where,
            f"class {cls!r} is custom Python code in openai/evals (its own eval_sample); evaljobs "
            f"maps {', '.join(c.rsplit(':', 1)[1] for c in _ARGS)} only",
            "remove the eval",
        )
        problems.count("refused")
        return None
    args = spec.get("args") or {}
    if not isinstance(args, dict):
        problems.error(path + ("args",), where, f"args must be a mapping, not {args!r}")
        return None
    unknown = [a for a in args if a not in _ARGS[cls]]
    if unknown:
        problems.unsupported(path + ("args",), where,
                             f"args {', '.join(repr(a) for a in unknown)} of {cls.rsplit(':', 1)[1]} are not "
                             f"mapped (known: {', '.join(_ARGS[cls])})", "remove them")
        problems.count("refused")
        return None
    own = _class_grader(cls, args, path, where, problems)
    if own is None:
        problems.count("refused")
        return None
    if grader is not None and own != grader:
        problems.error(
            path + ("class",),
            where,
            f"its class {cls.rsplit(':', 1)[1]} grades with {own}; "
            f"--grader {grader} would change its verdicts: drop --grader",
        )
        return None
    samples = args.get("samples_jsonl")
    if not isinstance(samples, str) or not samples.strip():
        problems.error(
            path + ("args",), where, f"args.samples_jsonl must name the samples file, not {samples!r}"
        )
        return None
    file = resolve_data_path(samples, source, problems, path + ("args", "samples_jsonl"), where)
    if file is None:
        problems.count("refused")
        return None
    text = _read_samples_file(file, problems, path + ("args", "samples_jsonl"), where)
    if text is None:
        return None
    sample_problems = Problems(file, lenient=problems.lenient)
    judged = own if own.startswith("judge:") else None
    scenarios = read_samples(text, file, sample_problems, "model_graded_fact" if judged else own,
                             ignore_unknown=True, keep=("criteria",) if judged == "judge:closedqa" else ())
    problems.errors.extend(sample_problems.errors)
    problems.warnings.extend(sample_problems.warnings)
    if sample_problems.errors:
        return None
    if judged == "judge:closedqa":
        # ModelBasedClassify formats the prompt with {**completions, **test_sample, **modelgraded_spec_args}:
        # the eval's criteria, else each sample's own.
        named = (args.get("modelgraded_spec_args") or {}).get("criteria")
        for scenario in scenarios:
            rubric = named or scenario.get("kept", {}).get("criteria")
            if not isinstance(rubric, str) or not rubric.strip():
                problems.error(
                    path + ("args",),
                    where,
                    f"modelgraded_spec closedqa needs a criterion: sample "
                    f"{scenario['key']!r} has no 'criteria' and the eval has no "
                    f"modelgraded_spec_args.criteria",
                )
                return None
            scenario["expect"] = {"judge": rubric, "gate": ["llm_judge"]}
    for scenario in scenarios:
        scenario.pop("kept", None)
    if (cls == MATCH and args.get("num_few_shot") not in (None, 0)
            and not _add_few_shot(scenarios, args, source, problems, path, where)):
        return None
    for scenario in scenarios:
        if prefix:
            scenario["key"] = f"{key_part(shown)}.{scenario['key']}"
        scenario["tags"] = [f"eval:{shown}", *scenario.get("tags", [])]
    for what in ("assertions", "mapped", "refused"):
        problems.counts[what] += sample_problems.counts[what]
    problems.counts["assertions"] += len(scenarios)
    problems.counts["mapped"] += len(scenarios)
    if not scenarios:
        return None
    group: dict[str, Any] = {"name": key_part(shown) or "eval", "scenarios": scenarios}
    if cls in (MATCH, FUZZY_MATCH):
        group["defaults"] = {"temperature": 0}  # both classes sample at temperature 0.0
    return group


def _class_grader(cls: str, args: dict[str, Any], path: tuple, where: str, problems: Problems) -> str | None:
    if cls == MATCH:
        return "match"
    if cls == FUZZY_MATCH:
        return "fuzzy_match"
    if cls == INCLUDES:
        ignore = args.get("ignore_case", False)
        if not isinstance(ignore, bool):
            problems.error(path + ("args",), where, f"args.ignore_case must be true or false, not {ignore!r}")
            return None
        return "includes_ignore_case" if ignore else "includes"
    spec = args.get("modelgraded_spec")
    if spec not in JUDGED_SPECS:
        problems.unsupported(
            path + ("args",),
            where,
            f"modelgraded_spec {spec!r}: its prompt and choice scores (registry/modelgraded/"
            f"{spec}.yaml) are not mapped to evaljobs' judge (mapped: {', '.join(JUDGED_SPECS)})",
            "remove the eval",
        )
        return None
    spec_args = args.get("modelgraded_spec_args") or {}
    if spec == "closedqa":
        criteria = spec_args.get("criteria") if isinstance(spec_args, dict) else None
        if criteria is not None and (not isinstance(criteria, str) or not criteria.strip()):
            problems.error(
                path + ("args",),
                where,
                f"modelgraded_spec_args.criteria must be the judge's criterion (text), not {criteria!r}",
            )
            return None
    elif spec_args:
        problems.unsupported(path + ("args",), where, f"modelgraded_spec_args of {spec!r} are not mapped",
                             "remove them")
        return None
    return f"judge:{spec}"


def resolve_data_path(data_path: str, source: str, problems: Problems, path: tuple, where: str) -> str | None:
    """``Eval._prefix_registry_path``: as given if it is a file, else under the registry's ``data/``;
    else next to the YAML."""
    candidates = [Path(data_path)]
    yaml_dir = Path(source).resolve().parent
    if yaml_dir.name == "evals":
        candidates.append(yaml_dir.parent / "data" / data_path)
    candidates.append(yaml_dir / data_path)
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
        if candidate.is_dir():
            problems.unsupported(
                path,
                where,
                f"samples {data_path!r} is a folder ({candidate}); evaljobs reads one JSONL file per eval",
                "name one file",
            )
            return None
    tried = ", ".join(str(c) for c in candidates)
    problems.unsupported(
        path,
        where,
        f"samples file {data_path!r} not found (looked at {tried}); evals resolves "
        f"it under the registry's data/ folder, beside evals/",
        "fix the path",
    )
    return None


def _read_samples_file(file: str, problems: Problems, path: tuple, where: str) -> str | None:
    if file.endswith((".gz", ".lz4", ".zst")):
        problems.unsupported(path, where, f"compressed samples ({file}) are not read", "decompress them")
        return None
    try:
        text = read_text(file)
    except CatalogError as exc:
        problems.errors.extend(exc.problems)
        return None
    if text.startswith(_LFS):
        problems.error(
            path,
            where,
            f"{file} is a Git LFS pointer, not the samples: run 'git lfs pull' in the evals checkout first",
        )
        return None
    return text


def _add_few_shot(scenarios: list[dict[str, Any]], args: dict[str, Any], source: str, problems: Problems,
                  path: tuple, where: str) -> bool:
    """Match.eval_sample: prompt = input[:-1] + each few-shot sample's "sample" messages + input[-1:]."""
    count = args.get("num_few_shot")
    few_path = args.get("few_shot_jsonl")
    if isinstance(count, bool) or not isinstance(count, int) or not isinstance(few_path, str):
        problems.error(
            path + ("args",),
            where,
            "num_few_shot needs an integer and few_shot_jsonl the few-shot samples file (Match asserts both)",
        )
        return False
    file = resolve_data_path(few_path, source, problems, path + ("args", "few_shot_jsonl"), where)
    text = _read_samples_file(file, problems, path + ("args", "few_shot_jsonl"), where) if file else None
    if text is None:
        return False
    shots: list[dict[str, Any]] = []
    taken = 0
    for number, line in enumerate(text.splitlines(), 1):
        # evals: self.few_shot[: self.num_few_shot] (blank lines fail there)
        if not line.strip() or taken >= count:
            continue
        taken += 1
        try:
            sample = json.loads(line)
        except json.JSONDecodeError:
            sample = None
        messages = sample.get("sample") if isinstance(sample, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                                     and isinstance(m.get("content"), str) for m in messages):
            problems.error(
                path + ("args",),
                where,
                f"{file}:{number}: a few-shot sample needs 'sample': a list of {{role, content}} messages",
            )
            return False
        shots.extend({k: v for k, v in m.items() if k in ("role", "content", "name")} for m in messages)
    for scenario in scenarios:
        if "messages" not in scenario:
            problems.error(
                path,
                where,
                f"sample {scenario['key']!r}: few shot requires a chat prompt (Match asserts "
                f"it): write 'input' as a list of messages",
            )
            return False
        messages = scenario["messages"]
        scenario["messages"] = [*messages[:-1], *shots, *messages[-1:]]
    return True


def grader_from_registry(samples: str) -> tuple[str, str] | None:
    """The grader of the registry evals that read ``samples`` (a JSONL under ``registry/data/``), with a note
    saying which eval chose it; ``None`` when no registry eval names the file. Several evals grading it
    differently: a one-line error naming them."""
    file = Path(samples).resolve()
    for data_dir in file.parents:
        if data_dir.name == "data" and (data_dir.parent / "evals").is_dir():
            break
    else:
        return None
    relative = file.relative_to(data_dir).as_posix()
    found: dict[str, list[str]] = {}
    for yaml_file in sorted((data_dir.parent / "evals").glob("*.yaml")):
        try:
            text = yaml_file.read_text(encoding="utf-8")
            if relative not in text:
                continue
            data = yaml.safe_load(text)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        for name, spec in (data.items() if isinstance(data, dict) else ()):
            args = spec.get("args") if isinstance(spec, dict) else None
            if not isinstance(args, dict) or args.get("samples_jsonl") != relative:
                continue
            own = _quiet_grader(spec.get("class"), args)
            found.setdefault(own or f"refused ({spec.get('class')})", []).append(f"{name} ({yaml_file.name})")
    if not found:
        return None
    if len(found) > 1:
        listed = "; ".join(f"{g}: {', '.join(names)}" for g, names in found.items())
        raise CatalogError([(f"{samples}: the registry evals reading these samples grade them differently "
                            f"({listed}); run one eval's registry YAML, or pass --grader")])
    (own, names), = found.items()
    if own.startswith(("refused", "judge:")):
        raise CatalogError(
            [
                (
                    f"{samples}: the registry eval reading these samples ({', '.join(names)}) is not a "
                    f"Match/Includes/FuzzyMatch eval; run its registry YAML, or pass --grader"
                )
            ]
        )
    return own, f"the class of the registry eval {names[0]}"


def _quiet_grader(cls: Any, args: dict[str, Any]) -> str | None:
    if cls == MATCH:
        return "match"
    if cls == FUZZY_MATCH:
        return "fuzzy_match"
    if cls == INCLUDES:
        return "includes_ignore_case" if args.get("ignore_case") is True else "includes"
    if cls == CLASSIFY:
        return f"judge:{args.get('modelgraded_spec')}"
    return None


__all__ = ["FORMAT", "convert_registry", "grader_from_registry", "is_registry", "resolve_data_path"]
