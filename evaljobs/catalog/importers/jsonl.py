"""JSONL samples (OpenAI Evals, Inspect) as native catalog data.

One JSON object per line::

    {"input": "What is the capital of France?", "ideal": "Paris"}
    {"id": "q2", "input": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
     "target": ["4", "four"]}

``input`` is a prompt string or a chat (a list of ``{role, content}``);
``ideal`` (OpenAI Evals) or ``target`` (Inspect) is the answer the model's
reply must include, case-insensitively (the "includes" grading of both
tools). Several targets mean "any of them": a case-insensitive regex
alternation of the escaped targets. Keys are the sample's ``id`` when it has
one, else ``sample-<line number>`` (so they are stable while lines are not
moved). ``metadata`` (scalar values) becomes tags ``name:value``. The catalog
is named after the file.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

from evaljobs.catalog.importers import ImportResult, Problems, key_part, strings

_SAMPLE_KEYS = ("input", "ideal", "target", "id", "metadata")


def convert_jsonl(text: str, source: str, *, lenient: bool = False) -> ImportResult:
    """Every non-blank line of ``text`` as one scenario (errors name the line number)."""
    problems = Problems(source, lenient=lenient)
    scenarios: list[dict[str, Any]] = []
    keys: dict[str, int] = {}
    unknown: dict[str, list[int]] = {}  # field -> line numbers: reported once per field, not per line
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        lines = {(): number}  # every problem on this sample points at its line
        sample_problems = Problems(source, lines, lenient)
        scenario = _sample(line, number, sample_problems)
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
    return ImportResult(data={"name": name, "scenarios": scenarios}, format="jsonl",
                        warnings=problems.warnings)


def _sample(line: str, number: int, problems: Problems) -> dict[str, Any] | None:
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
    elif len(dict.fromkeys(targets)) == 1:
        scenario["expect"] = {"contains": [targets[0]]}
    else:
        alternatives = "|".join(re.escape(t) for t in dict.fromkeys(targets))
        scenario["expect"] = {"regex": [f"(?i)(?:{alternatives})"]}
    metadata = sample.get("metadata")
    if isinstance(metadata, dict):
        tags = [f"{k}:{v}" for k, v in metadata.items()
                if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v).strip()]
        if tags:
            scenario["tags"] = tags
    scenario["_unknown"] = [name for name in sample if name not in _SAMPLE_KEYS]
    return scenario if len(problems.errors) == before else None
