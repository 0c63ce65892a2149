"""JSONL samples (OpenAI Evals, Inspect) as native catalog data.

One JSON object per line::

    {"input": "What is the capital of France?", "ideal": "Paris"}
    {"id": "q2", "input": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
     "target": ["4", "four"]}

``input`` is a prompt string or a chat (a list of ``{role, content}``; several
system messages are kept as written — OpenAI evals' few-shot samples use them).
``ideal`` (OpenAI Evals) or ``target`` (Inspect) is the reference answer, or a
list of accepted answers (any of them). How the reply is compared is the
*grader*, chosen to match the eval the samples were written for (the file does
not say; ``evaljobs catalog convert --grader`` picks one, and the converted
catalog's description states which):

==================  ===============================================================
``includes``        the default: the reply contains the reference (OpenAI evals'
                    ``Includes``: case-sensitive; Inspect's ``includes()`` ignores
                    case: ``target`` samples use ``includes_ignore_case``)
``match``           the reply starts with the reference (``Match``: ``startswith``)
``fuzzy_match``     normalized (lower case, no punctuation or articles), either one
                    contains the other (``FuzzyMatch``)
``model_graded_fact`` the LLM judge compares the reply with the reference answer
                    (Inspect's ``model_graded_fact``); needs a judge model
==================  ===============================================================

The reference-answer check is a gate. Keys are the sample's ``id`` when it has
one, else ``sample-<line number>`` (so they are stable while lines are not
moved). ``metadata`` (scalar values) becomes tags ``name:value``. The catalog is
named after the file.
"""
from __future__ import annotations

import json
import os
from typing import Any

from evaljobs.catalog.model import CatalogError
from evaljobs.catalog.importers.shared import ImportResult, Problems, key_part, strings

_SAMPLE_KEYS = ("input", "ideal", "target", "id", "metadata")
GRADERS = ("includes", "match", "fuzzy_match", "model_graded_fact")
#: The rubric given to the judge for model_graded_fact (the reference answer goes with it).
FACT_RUBRIC = ("The answer is factually consistent with the reference answer: it states the same facts, "
               "possibly in other words, and contradicts none of them. Ignore style and length.")


def convert_jsonl(text: str, source: str, *, lenient: bool = False, grader: str | None = None) -> ImportResult:
    """Every non-blank line of ``text`` as one scenario (errors name the line number)."""
    problems = Problems(source, lenient=lenient)
    if grader is not None and grader not in GRADERS:
        raise CatalogError([f"{source}: unknown grader {grader!r}; use one of {', '.join(GRADERS)}"])
    chosen = grader or "includes"
    scenarios: list[dict[str, Any]] = []
    keys: dict[str, int] = {}
    unknown: dict[str, list[int]] = {}  # field -> line numbers: reported once per field, not per line
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        lines = {(): number}  # every problem on this sample points at its line
        sample_problems = Problems(source, lines, lenient)
        scenario = _sample(line, number, sample_problems, chosen)
        problems.errors.extend(sample_problems.errors)
        if scenario is None:
            continue
        for name in scenario.pop("_unknown"):
            unknown.setdefault(name, []).append(number)
        key = scenario["key"]
        if key in keys:
            problems.lines[("line", number)] = number
            problems.error(("line", number), f"sample {key!r}", f"duplicate id (also on line {keys[key]}); "
                                                                f"ids must be unique")
            continue
        keys[key] = number
        scenarios.append(scenario)
    for name, numbers in unknown.items():
        problems.lines[("line", name)] = numbers[0]
        lines = (f"line {numbers[0]}" if len(numbers) == 1
                 else f"{len(numbers)} samples, first on line {numbers[0]}")
        problems.unsupported(("line", name), "", f"field {name!r} ({lines}) is not supported by evaljobs "
                                                 f"(known: {', '.join(_SAMPLE_KEYS)})", "remove it")
    if not problems.errors and not scenarios:
        problems.error((), "", "no samples; write one JSON object per line")
    problems.raise_if_any()
    name = os.path.splitext(os.path.basename(source))[0] or "samples"
    how = "the default" if grader is None else "chosen with --grader"
    description = (f"Imported from {os.path.basename(source)}; graded with {chosen} ({how}; "
                   f"evaljobs catalog convert --grader picks one of {', '.join(GRADERS)})")
    problems.counts.update(assertions=len(scenarios), mapped=len(scenarios))
    return ImportResult(data={"name": name, "description": description, "scenarios": scenarios}, format="jsonl",
                        warnings=problems.warnings, counts=dict(problems.counts))


def _sample(line: str, number: int, problems: Problems, grader: str = "includes") -> dict[str, Any] | None:
    try:
        sample = json.loads(line)
    except json.JSONDecodeError as exc:
        problems.error((), "sample", f"not valid JSON: {exc.msg} (column {exc.colno})")
        return None
    if not isinstance(sample, dict):
        problems.error((), "sample", f"must be a JSON object with 'input' and 'ideal' or 'target', "
                                     f"not {type(sample).__name__}")
        return None
    ident = sample.get("id")
    if ident is not None and (isinstance(ident, bool) or not isinstance(ident, (str, int))
                              or not key_part(ident)):
        problems.error((), "sample", f"id must be a non-empty string or number, not {ident!r}")
        return None
    key = key_part(ident) if ident is not None else f"sample-{number}"
    where = f"sample {key!r}"
    before = len(problems.errors)
    scenario: dict[str, Any] = {"key": key}
    content = sample.get("input")
    if isinstance(content, str) and content.strip():
        scenario["prompt"] = content
    elif isinstance(content, list) and content:
        messages = []
        for i, message in enumerate(content):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                    or not isinstance(message.get("content"), str):
                problems.error((), where, f"input[{i}] must be {{role, content}} with text content "
                                          f"(images and other parts are not supported), not {message!r}")
                continue
            messages.append({k: v for k, v in message.items() if k in ("role", "content", "name")})
        scenario["messages"] = messages
    else:
        problems.error((), where, "'input' must be a prompt string or a list of chat messages")
    if "ideal" in sample and "target" in sample:
        problems.error((), where, "has both 'ideal' and 'target'; keep one")
    target = sample.get("ideal", sample.get("target"))
    targets = strings(target) if target is not None else None
    if not targets or not all(t.strip() for t in targets):
        problems.error((), where, f"needs 'ideal' or 'target': the answer text (or a list of accepted "
                                  f"answers), not {target!r}")
    elif grader == "model_graded_fact":
        reference = targets[0] if len(targets) == 1 else "\n".join(f"- {t}" for t in dict.fromkeys(targets))
        scenario["expect"] = {"judge": FACT_RUBRIC, "reference": reference, "gate": ["llm_judge"]}
    else:
        if grader == "includes" and "target" in sample and "ideal" not in sample:
            grader = "includes_ignore_case"  # Inspect's includes() ignores case by default
        scenario["expect"] = {"ideal": list(dict.fromkeys(targets)), "ideal_grader": grader, "gate": ["ideal"]}
    metadata = sample.get("metadata")
    if isinstance(metadata, dict):
        tags = [f"{k}:{v}" for k, v in metadata.items()
                if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v).strip()]
        if tags:
            scenario["tags"] = tags
    scenario["_unknown"] = [name for name in sample if name not in _SAMPLE_KEYS]
    return scenario if len(problems.errors) == before else None
