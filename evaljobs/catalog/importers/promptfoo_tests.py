"""promptfoo tests' data: CSV test files, and vars expanded and loaded as promptfoo does.

The part of the promptfoo importer (:mod:`.promptfoo`) that reads what a test
asks with: ``tests: file://x.csv`` rows (src/csv.ts), ``file://`` and list vars
(src/evaluator.ts ``generateVarCombinations``, src/evaluatorHelpers.ts
``renderPrompt``). Split from the importer, which calls these per test.
"""
from __future__ import annotations

import csv
import glob
import json
import math
import os
import re
from typing import Any

import yaml

from evaljobs.catalog import yaml12
from evaljobs.catalog.importers.shared import Problems, read_text


def csv_tests(file: str, ref: str, problems: Problems) -> list[dict[str, Any]]:
    """promptfoo's CSV tests (src/csv.ts ``testCaseFromCsvRow``): a header row, one test per row; each column
    is a var, except ``__expected*`` (one assertion each, :func:`assertion_from_string`),
    ``__config:__expectedN:threshold``, ``__description``, ``__threshold``, ``__metadata:*`` and ``__metric``
    (a named metric: no verdict changes). ``__prefix``, ``__suffix`` and ``__providerOutput`` change what is
    asked or answered: refused by name."""
    with open(file, newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.DictReader(handle))
    tests = []
    for row in rows:
        test: dict[str, Any] = {"vars": {}, "assert": []}
        configs: dict[int, float] = {}
        metadata: dict[str, Any] = {}
        for key, value in row.items():
            if key is None:  # more cells than headers
                continue
            key, value = key.strip(), value or ""
            if key.startswith("__expected"):
                if value.strip():
                    test["assert"].append(assertion_from_string(value.strip()))
            elif key == "__description":
                if value:
                    test["description"] = value
            elif key == "__threshold":
                threshold = _finite_number(value)
                if threshold is not None:
                    test["threshold"] = threshold
            elif key.startswith("__metadata:"):
                if value.strip():
                    metadata[key[len("__metadata:"):].removesuffix("[]")] = value
            elif key.startswith("__config:"):
                parts = key[len("__config:"):].split(":")
                index = re.fullmatch(r"__expected(\d*)", parts[0]) if len(parts) == 2 else None
                number = _finite_number(value)
                if index is None or parts[1] != "threshold" or number is None:
                    problems.unsupported(("tests",), "tests", f"tests file {ref!r}: column {key!r} is not a "
                                                              f"__config:__expectedN:threshold column with a "
                                                              f"number", "fix the column")
                    continue
                configs[int(index.group(1) or 1) - 1] = number
            elif key in ("__prefix", "__suffix", "__providerOutput"):
                if value:
                    problems.unsupported(("tests",), "tests", f"tests file {ref!r}: column {key!r} is not read "
                                                              f"by evaljobs", "remove the column")
            elif key in ("__metric", "__metadata"):
                continue
            else:
                test["vars"][key] = value
        for index, threshold in configs.items():
            if index < len(test["assert"]):
                test["assert"][index]["threshold"] = threshold
        if metadata:
            test["metadata"] = metadata
        tests.append(test)
    return tests


def _finite_number(text: str) -> float | None:
    """src/csv.ts ``parseFiniteNumber``."""
    text = (text or "").strip()
    if not re.fullmatch(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", text):
        return None
    number = float(text)
    return number if math.isfinite(number) else None


def _comma_values(value: str) -> list[str]:
    """src/csv.ts ``parseCommaSeparatedAssertionValues``: comma-separated, a field may be double-quoted."""
    return [v.strip() for v in next(csv.reader([value], skipinitialspace=True))] if value else []


#: promptfoo's assertion types (``BaseAssertionTypesSchema``), longest first so that a CSV cell's type
#: is read whole (``contains-any`` before ``contains``).
_ASSERTION_TYPES = sorted((
    "agent-rubric", "answer-relevance", "bleu", "classifier", "contains", "contains-all", "contains-any",
    "contains-html", "contains-json", "contains-sql", "contains-xml", "context-faithfulness", "context-recall",
    "context-relevance", "conversation-relevance", "cost", "equals", "factuality", "finish-reason", "g-eval", "gleu",
    "guardrails", "icontains", "icontains-all", "icontains-any", "is-html", "is-json", "is-refusal", "is-sql",
    "is-valid-function-call", "is-valid-openai-function-call", "is-valid-openai-tools-call", "is-xml", "javascript",
    "latency", "levenshtein", "llm-rubric", "pi", "meteor", "model-graded-closedqa", "model-graded-factuality",
    "moderation", "perplexity", "perplexity-score", "python", "regex", "rouge-n", "ruby", "similar", "similar:cosine",
    "similar:dot", "similar:euclidean", "starts-with", "tool-call-f1", "skill-used", "trajectory:goal-success",
    "trajectory:tool-args-match", "trajectory:step-count", "trajectory:tool-sequence", "trajectory:tool-used",
    "trace-error-spans", "trace-span-count", "trace-span-duration", "search-rubric", "webhook", "word-count"),
    key=len, reverse=True)
_ASSERTION_CELL = re.compile(r"^(not-)?(" + "|".join(re.escape(t) for t in _ASSERTION_TYPES)
                             + r")(?:\((\d+(?:\.\d+)?)\))?(?::([\s\S]*))?$")
_THRESHOLD_TYPES = ("answer-relevance", "classifier", "context-faithfulness", "context-recall", "context-relevance",
                    "cost", "latency", "levenshtein", "perplexity-score", "perplexity", "rouge-n", "similar",
                    "starts-with")


def assertion_from_string(expected: str) -> dict[str, Any]:
    """A CSV ``__expected`` cell as promptfoo reads it (src/csv.ts ``assertionFromString``)."""
    for prefix in ("javascript:", "fn:", "eval:"):
        if expected.startswith(prefix):
            return {"type": "javascript", "value": expected[len(prefix):].strip()}
    if expected.startswith("file://") and expected.endswith((".js", ".cjs", ".mjs", ".ts")):
        return {"type": "javascript", "value": expected}
    if expected.startswith(("grade:", "llm-rubric:")):
        return {"type": "llm-rubric", "value": expected[6 if expected.startswith("grade:") else 11:]}
    if expected.startswith("python:") or (expected.startswith("file://") and (expected.endswith(".py")
                                                                              or ".py:" in expected)):
        # As promptfoo: seven characters are cut from "file://" too (the path is then read as code, and fails).
        return {"type": "python", "value": expected[7:].strip()}
    match = _ASSERTION_CELL.match(expected)
    if match:
        negate, kind, threshold_text, value = match.groups()
        full = f"not-{kind}" if negate else kind
        if kind in ("contains-all", "contains-any", "icontains-all", "icontains-any"):
            return {"type": full, "value": _comma_values(value) if value else value}
        if kind in ("contains-json", "is-json"):
            return {"type": full, "value": value}
        value = value.strip() if value is not None else None
        if kind in _THRESHOLD_TYPES:
            threshold = _finite_number(threshold_text) if threshold_text else None
            return {"type": full, "value": value,
                    "threshold": threshold if threshold is not None else (0.8 if kind == "similar" else 0.75)}
        return {"type": full, "value": value}
    return {"type": "equals", "value": expected}


def raw_vars(raw: Any, problems: Problems, path: tuple, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.error(path, where, "vars must be a mapping of names to values")
        return {}
    return {str(name): value for name, value in raw.items()}


#: Var files promptfoo runs or decodes rather than reads as text (src/evaluatorHelpers.ts renderPrompt).
_CODE_VAR_FILES = (".js", ".cjs", ".mjs", ".ts", ".py", ".pdf", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp",
                   ".tif", ".tiff", ".svg", ".ico", ".avif", ".heic", ".mp3", ".wav", ".ogg", ".mp4", ".webm", ".mov")


def combinations(variables: dict[str, Any], problems: Problems, path: tuple, where: str,
                  base: str) -> list[dict[str, Any]]:
    """The test's vars, one dict per run, as promptfoo's ``generateVarCombinations`` (src/evaluator.ts)
    expands them: a ``file://`` var is a glob (one run per file, a plain path is a glob of one file), a
    list of strings is one run per value, in the order of the vars; every other value is used as it is."""
    runs: list[dict[str, Any]] = [{}]
    for name, value in variables.items():
        if isinstance(value, str) and value.startswith("file://"):
            ref = value[len("file://"):]
            pattern = ref if os.path.isabs(ref) else os.path.join(base, ref)
            files = sorted(f for f in glob.glob(pattern, recursive=True) if os.path.isfile(f))
            if not files:
                problems.error(path + (name,), where, f"var {name!r}: no file matches {ref!r} (looked in {base})")
                return []
            values = []
            for file in files:
                loaded = _var_file(file, name, problems, path, where)
                if loaded is None:
                    return []
                values.append(loaded)
        elif isinstance(value, list) and value and isinstance(value[0], str):
            values = value
        else:
            values = [value]
        runs = [dict(run, **{name: item}) for run in runs for item in values]
    # renderPrompt: every string var loses one trailing newline (a YAML "|" block's).
    return [{k: v[:-1] if isinstance(v, str) and v.endswith("\n") else v for k, v in run.items()} for run in runs]


def _var_file(file: str, name: str, problems: Problems, path: tuple, where: str) -> str | None:
    """A ``file://`` var's value as promptfoo's renderPrompt reads it: YAML as compact JSON, text trimmed."""
    ext = os.path.splitext(file)[1].lower()
    if ext in _CODE_VAR_FILES:
        problems.unsupported(path + (name,), where, f"var {name!r} comes from {os.path.basename(file)!r}, which "
                                                    f"promptfoo runs or decodes ({ext}); evaljobs reads text only",
                             "put the text in a .txt file")
        return None
    text = read_text(file)
    if ext in (".yaml", ".yml"):
        try:
            return json.dumps(yaml12.load(text), separators=(",", ":"), ensure_ascii=False)
        except yaml.YAMLError as exc:
            problems.error(path + (name,), where, f"var {name!r}: {file} is not valid YAML: "
                                                  f"{str(exc).splitlines()[0]}")
            return None
    return text.strip()


__all__ = ["assertion_from_string", "combinations", "csv_tests", "raw_vars"]
