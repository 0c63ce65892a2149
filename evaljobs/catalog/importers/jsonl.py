"""JSONL samples (OpenAI Evals, Inspect) as native catalog data.

One JSON object per line::

    {"input": "What is the capital of France?", "ideal": "Paris"}
    {"id": "q2", "input": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
     "target": ["4", "four"]}

``input`` is a prompt string or a chat (a list of ``{role, content}``; several
system messages are kept as written — OpenAI evals' few-shot samples use them).
``ideal`` (OpenAI Evals) or ``target`` (Inspect) is the reference answer, or a
list of accepted answers (any of them). Other field names are mapped as
Inspect's ``FieldSpec`` maps them: ``--field input=question --field
target=answer`` (also ``id=`` and ``metadata=a,b``); fields a mapping does not
name are ignored, as Inspect ignores them, and said so in one warning.

How the reply is compared is the *grader*. The file does not say which — the
eval that uses it does (an OpenAI evals registry YAML names its class, an
Inspect task its scorer) — so it is never guessed: ``--grader`` names it, or the
samples sit in an OpenAI evals registry whose evals say it
(:mod:`evaljobs.catalog.importers.openai_evals`), or the import stops with one
line saying so. Grading ``Match`` samples as "includes" passed 42 of 168 wrong
answers (``" 42"``, ``"The answer is 42"``). The graders
(:mod:`evaljobs.evaluation.reference`):

=============================  ==========================================================
``match``                      OpenAI evals ``Match``: the reply starts with the ideal
``includes``                   ``Includes``: contains it, case-sensitive
``includes_ignore_case``       ``Includes`` with ``ignore_case: true``
``fuzzy_match``                ``FuzzyMatch``: normalized, either one contains the other
``inspect_includes``           Inspect ``includes()``: contains it, ignoring case
``inspect_match``              Inspect ``match()``: ends with it, ignoring case, whitespace
                               and punctuation at both ends
``inspect_exact``              Inspect ``exact()``: equal after its normalization
``inspect_pattern:REGEX``      Inspect ``pattern(REGEX)``: a captured group equals a target
``inspect_answer:letter``      Inspect ``answer("letter")`` (also ``word``, ``line``)
``model_graded_fact``          the LLM judge compares the reply with the reference answer
                               (Inspect's ``model_graded_fact``); needs a judge model
=============================  ==========================================================

The reference-answer check is a gate. Keys are the sample's ``id`` when it has
one, else ``sample-<line number>`` (so they are stable while lines are not
moved). ``metadata`` (scalar values) becomes tags ``name:value``. The catalog is
named after the file.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from evaljobs.catalog.importers.shared import ImportResult, Problems, key_part, strings
from evaljobs.catalog.model import IDEAL_GRADERS, CatalogError, ideal_grader_problem

_SAMPLE_KEYS = ("input", "ideal", "target", "id", "metadata")
#: Sample fields Inspect acts on that evaljobs does not: their samples are refused by name (skipped under
#: --lenient, never graded without the field). Other fields are ignored, as OpenAI evals' classes and
#: Inspect's FieldSpec ignore them, with one warning.
REFUSED_FIELDS = {
    "choices": (
        "Inspect's multiple_choice() solver writes the prompt from them; evaljobs sends the input as it is"
    ),
    "sandbox": "evaljobs runs no sandbox for a sample",
    "files": "evaljobs copies no files into a sandbox",
    "setup": "evaljobs runs no setup script",
}
#: What ``--field NAME=FIELD`` may map (Inspect's FieldSpec names).
FIELDS = ("input", "target", "id", "metadata")
GRADERS = (*IDEAL_GRADERS, "model_graded_fact")
#: How a sample skipped under --lenient ends its warning (shared.Problems.unsupported).
SKIPPED = "; skipped (--lenient)"
#: The rubric given to the judge for model_graded_fact (the reference answer goes with it).
FACT_RUBRIC = ("The answer is factually consistent with the reference answer: it states the same facts, "
               "possibly in other words, and contradicts none of them. Ignore style and length.")
#: What the one-line "which grader?" error lists.
GRADER_CHOICES = (
    "OpenAI evals: match, includes, includes_ignore_case, fuzzy_match; Inspect: inspect_includes, "
    "inspect_match, inspect_exact, inspect_pattern:REGEX, inspect_answer:letter|word|line; "
    "or model_graded_fact (the LLM judge)"
)
_INPUT_GUESSES = ("question", "prompt", "query", "instruction", "problem", "text", "context")
_TARGET_GUESSES = ("answer", "ideal", "target", "label", "expected", "output", "solution", "response",
                   "answer_matching_behavior")


def grader_problem(grader: str) -> str | None:
    """Why ``grader`` cannot grade JSONL samples, or ``None``."""
    if grader == "model_graded_fact":
        return None
    problem = ideal_grader_problem(grader)
    if problem and problem.startswith("must be one of"):
        return f"unknown grader {grader!r}; use one of {', '.join(GRADERS)}"
    return problem


def parse_fields(pairs: Sequence[str] | dict[str, str] | None) -> dict[str, str]:
    """``["input=question", "target=answer"]`` as ``{"input": "question", "target": "answer"}`` (one-line
    errors)."""
    if not pairs:
        return {}
    if isinstance(pairs, dict):
        pairs = [f"{k}={v}" for k, v in pairs.items()]
    fields: dict[str, str] = {}
    for pair in pairs:
        name, eq, field = str(pair).partition("=")
        name, field = name.strip(), field.strip()
        if not eq or not field or name not in FIELDS:
            raise CatalogError([(f"--field {pair!r}: write NAME=FIELD with NAME one of {', '.join(FIELDS)}, "
                                f"e.g. --field input=question --field target=answer")])
        if name in fields:
            raise CatalogError([f"--field {name} is given twice ({fields[name]!r} and {field!r}); keep one"])
        fields[name] = field
    return fields


def no_grader_error(source: str) -> CatalogError:
    return CatalogError(
        [
            (
                f"{source}: the samples do not say how to grade them (the eval that uses them does); "
                f"pass --grader ({GRADER_CHOICES}), or run the eval's OpenAI evals registry YAML"
            )
        ]
    )


def convert_jsonl(
    text: str,
    source: str,
    *,
    lenient: bool = False,
    grader: str | None = None,
    fields: Sequence[str] | dict[str, str] | None = None,
    chosen_by: str | None = None,
) -> ImportResult:
    """Every non-blank line of ``text`` as one scenario (errors name the line number).

    ``chosen_by`` says where the grader came from when it was not ``--grader`` (an OpenAI evals registry).
    """
    if grader is None:
        raise no_grader_error(source)
    problem = grader_problem(grader)
    if problem:
        raise CatalogError([f"{source}: --grader {problem}"])
    mapping = parse_fields(fields)
    problems = Problems(source, lenient=lenient)
    scenarios = read_samples(text, source, problems, grader, mapping)
    if not scenarios and not problems.errors:  # --lenient skipped every sample: nothing is left to run
        # The error is all the user sees (the warnings of a file that cannot run are not printed): say why.
        skipped = [w.removesuffix(SKIPPED) for w in problems.warnings if w.endswith(SKIPPED)]
        why = f"; the first: {skipped[0]}" if skipped else ""
        problems.error((), "", f"no samples left to run: --lenient skipped every sample{why}")
    problems.raise_if_any()
    name = os.path.splitext(os.path.basename(source))[0] or "samples"
    how = chosen_by or "chosen with --grader"
    mapped = f"; fields {', '.join(f'{k}={v}' for k, v in mapping.items())}" if mapping else ""
    description = f"Imported from {os.path.basename(source)}; graded with {grader} ({how}){mapped}"
    problems.counts["assertions"] += len(scenarios)
    problems.counts["mapped"] += len(scenarios)
    return ImportResult(
        data={"name": name, "description": description, "scenarios": scenarios},
        format="jsonl",
        warnings=problems.warnings,
        counts=dict(problems.counts),
    )


def read_samples(
    text: str,
    source: str,
    problems: Problems,
    grader: str,
    fields: dict[str, str] | None = None,
    *,
    ignore_unknown: bool = False,
    keep: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """The samples of ``text`` as scenario dicts; problems (naming the line) go to ``problems``.

    With ``fields`` (a FieldSpec mapping) or ``ignore_unknown`` (an OpenAI evals eval class reads only
    ``input`` and ``ideal``), fields nobody reads are ignored as the source tool ignores them, and said so
    in one warning; otherwise an unknown field is unsupported (an error, or skipped under lenient).
    ``keep`` names fields the caller reads itself: a sample's values of them go in its scenario's ``kept``
    (for the caller to take out before the scenario is validated).
    """
    fields = fields or {}
    scenarios: list[dict[str, Any]] = []
    keys: dict[str, int] = {}
    unknown: dict[str, list[int]] = {}  # field -> line numbers: reported once per field, not per line
    system_only: list[int] = []  # chats of system messages alone: reported once, not per line
    hinted = False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        sample_problems = Problems(source, {(): number}, problems.lenient)  # every problem points at its line
        record = _record(line, sample_problems)
        if record is not None and not hinted:
            hinted = True
            hint = _missing_fields_hint(record, fields)
            # the first sample lacks the fields: one line with the mapping to write, not one per line
            if hint:
                problems.lines[("line", number)] = number
                problems.error(("line", number), "", hint)
                return []
        scenario = (
            None
            if record is None
            else _sample(_mapped(record, fields), number, sample_problems, grader, allow_empty=ignore_unknown)
        )
        problems.errors.extend(sample_problems.errors)
        problems.warnings.extend(sample_problems.warnings)
        if scenario is None:
            if sample_problems.warnings and not sample_problems.errors:  # skipped under --lenient: refused
                problems.counts["assertions"] += 1
                problems.counts["refused"] += 1
            continue
        assert record is not None  # else scenario is None
        if "messages" in scenario and not any(m["role"] == "user" for m in scenario["messages"]):
            system_only.append(number)
            continue
        used = {fields.get(k, k) for k in ("input", "target", "id", "metadata")} | {"ideal", *keep}
        if any(name in record for name in keep):
            scenario["kept"] = {name: record[name] for name in keep if name in record}
        for name in record:
            if name not in used:
                unknown.setdefault(name, []).append(number)
        if not ignore_unknown and any(name in REFUSED_FIELDS for name in record if name not in used):
            # Inspect would not send this input as it is: the sample is refused, never graded without it
            continue
        key = scenario["key"]
        if key in keys:
            problems.lines[("line", number)] = number
            problems.error(("line", number), f"sample {key!r}", f"duplicate id (also on line {keys[key]}); "
                                                                f"ids must be unique")
            continue
        keys[key] = number
        scenarios.append(scenario)
    ignored = []
    refused: set[int] = set()  # samples with a field Inspect acts on: refused (skipped under --lenient)
    for name, numbers in unknown.items():
        if name in REFUSED_FIELDS and not ignore_unknown:  # Inspect reads these whatever the FieldSpec says
            problems.lines[("line", name)] = numbers[0]
            lines = (f"line {numbers[0]}" if len(numbers) == 1
                     else f"{len(numbers)} samples, first on line {numbers[0]}")
            problems.unsupported(("line", name), "", f"field {name!r} ({lines}): {REFUSED_FIELDS[name]}",
                                 "remove the samples")
            refused.update(numbers)
        else:
            ignored.append(name)
    if ignored:
        why = ("the eval class reads only input and ideal" if ignore_unknown
               else "as Inspect ignores fields its FieldSpec does not name" if fields
               else f"evaljobs reads {', '.join(_SAMPLE_KEYS)}; --field maps others")
        problems.warnings.append(
            f"{source}: fields {', '.join(repr(n) for n in ignored)} are not used ({why})"
        )
    problems.counts["refused"] += len(refused)
    problems.counts["assertions"] += len(refused)
    if system_only:
        problems.lines[("line", "system-only")] = system_only[0]
        shown = (f"line {system_only[0]}" if len(system_only) == 1
                 else f"{len(system_only)} samples, first on line {system_only[0]}")
        problems.unsupported(
            ("line", "system-only"),
            "",
            f"input of system messages only ({shown}): evaljobs sends a conversation with a user message",
            "give each sample a user message",
        )
        problems.counts["refused"] += len(system_only)
        problems.counts["assertions"] += len(system_only)
    if not problems.errors and not scenarios and not system_only and not refused:
        problems.error((), "", "no samples; write one JSON object per line")
    return scenarios


def _record(line: str, problems: Problems) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        problems.error((), "sample", f"not valid JSON: {exc.msg} (column {exc.colno})")
        return None
    except (RecursionError, ValueError) as exc:  # nested too deeply, an integer of too many digits
        problems.error(
            (),
            "sample",
            "not valid JSON: "
            + ("nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]),
        )
        return None
    if not isinstance(record, dict):
        problems.error((), "sample", f"must be a JSON object with 'input' and 'ideal' or 'target', "
                                     f"not {type(record).__name__}")
        return None
    return record


def _mapped(record: dict[str, Any], fields: dict[str, str]) -> dict[str, Any]:
    """The record under evaljobs' field names (Inspect's record_to_sample with a FieldSpec)."""
    if not fields:
        return record
    sample = {k: v for k, v in record.items() if k in ("ideal",) and "target" not in fields}
    for name in ("input", "target", "id"):
        source = fields.get(name, name)
        if source in record:
            sample[name] = record[source]
    if "metadata" in fields:
        sample["metadata"] = {n: record.get(n) for n in fields["metadata"].split(",") if n.strip()}
    elif isinstance(record.get("metadata"), dict):
        sample["metadata"] = record["metadata"]
    return sample


def _missing_fields_hint(record: dict[str, Any], fields: dict[str, str]) -> str | None:
    """One line naming the --field mapping to write when the first sample lacks input or the answer."""
    input_field = fields.get("input", "input")
    target_fields = [fields["target"]] if "target" in fields else ["ideal", "target"]
    has_input = input_field in record
    has_target = any(f in record for f in target_fields)
    if has_input and has_target:
        return None
    names = list(record)
    guess_input = input_field if has_input else next((n for n in _INPUT_GUESSES if n in record), None)
    guess_target = (None if has_target else
                    next((n for n in _TARGET_GUESSES if n in record and n != guess_input), None))
    lacking = []
    if not has_input:
        lacking.append(f"{input_field!r}")
    if not has_target:
        lacking.append(" or ".join(repr(f) for f in target_fields))
    suggestion = " ".join(f"--field {k}={v}" for k, v in (("input", None if has_input else guess_input),
                                                            ("target", guess_target)) if v)
    fix = (f"map them: {suggestion}" if suggestion
           else "map them with --field input=FIELD --field target=FIELD")
    shown = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
    return f"the samples have no {' and no '.join(lacking)} field (fields: {shown}); {fix}"


def _sample(sample: dict[str, Any], number: int, problems: Problems, grader: str, *,
            allow_empty: bool = False) -> dict[str, Any] | None:
    """One sample as a scenario. ``allow_empty`` (an OpenAI evals registry eval): an empty ideal is refused as
    unsupported (skipped under lenient) with the reason — evals passes every reply against it."""
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
    if allow_empty and targets and not all(targets):
        problems.unsupported(
            (),
            where,
            "an empty ideal passes every reply in OpenAI evals (every text starts "
            "with and includes ''); evaljobs does not import it",
            "remove the sample",
        )
        return None
    if not targets or not all(t.strip() for t in targets):
        problems.error((), where, f"needs 'ideal' or 'target': the answer text (or a list of accepted "
                                  f"answers), not {target!r}")
    elif grader == "model_graded_fact":
        reference = targets[0] if len(targets) == 1 else "\n".join(f"- {t}" for t in dict.fromkeys(targets))
        scenario["expect"] = {"judge": FACT_RUBRIC, "reference": reference, "gate": ["llm_judge"]}
    else:
        scenario["expect"] = {
            "ideal": list(dict.fromkeys(targets)),
            "ideal_grader": grader,
            "gate": ["ideal"],
        }
    metadata = sample.get("metadata")
    if isinstance(metadata, str):  # Inspect reads a JSON string as the metadata mapping
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = None
    if isinstance(metadata, dict):
        tags = [f"{k}:{v}" for k, v in metadata.items()
                if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v).strip()]
        if tags:
            scenario["tags"] = tags
    return scenario if len(problems.errors) == before else None
