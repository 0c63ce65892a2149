"""promptfoo tests and their data: the tests list, CSV test files, vars expanded and loaded as promptfoo does.

The part of the promptfoo importer (:mod:`.promptfoo`) that reads the tests and
what they ask with: the ``tests`` list with its ``file://`` globs of tests files
(src/util/testCaseReader.ts), CSV rows (src/csv.ts), ``file://`` and list vars
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
from dataclasses import dataclass
from typing import Any

import yaml

from evaljobs.catalog import yaml12
from evaljobs.catalog.importers.shared import Problems, key_part, read_text


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
                    problems.unsupported(
                        ("tests",),
                        "tests",
                        f"tests file {ref!r}: column {key!r} is not read by evaljobs",
                        "remove the column",
                    )
            elif key in ("__metric", "__metadata"):
                continue
            else:
                test["vars"][key] = value
        for position, threshold in configs.items():
            if position < len(test["assert"]):
                test["assert"][position]["threshold"] = threshold
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
_ASSERTION_TYPES = sorted(
    (
        "agent-rubric",
        "answer-relevance",
        "bleu",
        "classifier",
        "contains",
        "contains-all",
        "contains-any",
        "contains-html",
        "contains-json",
        "contains-sql",
        "contains-xml",
        "context-faithfulness",
        "context-recall",
        "context-relevance",
        "conversation-relevance",
        "cost",
        "equals",
        "factuality",
        "finish-reason",
        "g-eval",
        "gleu",
        "guardrails",
        "icontains",
        "icontains-all",
        "icontains-any",
        "is-html",
        "is-json",
        "is-refusal",
        "is-sql",
        "is-valid-function-call",
        "is-valid-openai-function-call",
        "is-valid-openai-tools-call",
        "is-xml",
        "javascript",
        "latency",
        "levenshtein",
        "llm-rubric",
        "pi",
        "meteor",
        "model-graded-closedqa",
        "model-graded-factuality",
        "moderation",
        "perplexity",
        "perplexity-score",
        "python",
        "regex",
        "rouge-n",
        "ruby",
        "similar",
        "similar:cosine",
        "similar:dot",
        "similar:euclidean",
        "starts-with",
        "tool-call-f1",
        "skill-used",
        "trajectory:goal-success",
        "trajectory:tool-args-match",
        "trajectory:step-count",
        "trajectory:tool-sequence",
        "trajectory:tool-used",
        "trace-error-spans",
        "trace-span-count",
        "trace-span-duration",
        "search-rubric",
        "webhook",
        "word-count",
    ),
    key=len,
    reverse=True,
)
_ASSERTION_CELL = re.compile(r"^(not-)?(" + "|".join(re.escape(t) for t in _ASSERTION_TYPES)
                             + r")(?:\((\d+(?:\.\d+)?)\))?(?::([\s\S]*))?$")
_THRESHOLD_TYPES = (
    "answer-relevance",
    "classifier",
    "context-faithfulness",
    "context-recall",
    "context-relevance",
    "cost",
    "latency",
    "levenshtein",
    "perplexity-score",
    "perplexity",
    "rouge-n",
    "similar",
    "starts-with",
)


def assertion_from_string(expected: str) -> dict[str, Any]:
    """A CSV ``__expected`` cell as promptfoo reads it (src/csv.ts ``assertionFromString``)."""
    for prefix in ("javascript:", "fn:", "eval:"):
        if expected.startswith(prefix):
            return {"type": "javascript", "value": expected[len(prefix):].strip()}
    if expected.startswith("file://") and expected.endswith((".js", ".cjs", ".mjs", ".ts")):
        return {"type": "javascript", "value": expected}
    if expected.startswith(("grade:", "llm-rubric:")):
        return {"type": "llm-rubric", "value": expected[6 if expected.startswith("grade:") else 11:]}
    if expected.startswith("python:") or (
        expected.startswith("file://") and (expected.endswith(".py") or ".py:" in expected)
    ):
        # As promptfoo: seven characters are cut from "file://" too (the path is then read as code, and
        # fails).
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


def where_of(path: tuple, test: dict) -> str:
    i = path[-1] if isinstance(path[-1], int) else 0
    label = test.get("description") if isinstance(test.get("description"), str) else None
    return f"test #{i + 1}" + (f" ({label!r})" if label else "")


@dataclass
class Source:
    """One test as the config lists it, or one test of a tests file a list entry names."""

    path: tuple
    test: dict
    where: str
    #: The key part when the test has no description (``test-<n>``, or ``<file>-<n>`` for a file's tests).
    name: str
    #: Its place among all the tests (promptfoo's testIdx).
    index: int


def read_tests(raw: Any, problems: Problems, base: str) -> list[Source]:
    """The config's tests, in promptfoo's order (src/util/testCaseReader.ts ``readTests``): ``tests`` is a
    list of tests, a ``file://`` tests file, or a list mixing tests and ``file://`` globs of tests files (each
    file's tests in its place, the files of a glob in name order)."""
    if raw is None:
        problems.error((), "", "missing 'tests'")
        return []
    path: tuple = ("tests",)
    if isinstance(raw, str):
        raw = [raw]
        single = True
    else:
        single = False
    if not isinstance(raw, list):
        problems.error(path, "tests", "tests must be a list of tests (or a file:// YAML file of them)")
        return []
    out: list[Source] = []
    for i, item in enumerate(raw):
        at = path if single else path + (i,)
        if isinstance(item, dict):
            out.append(Source(at, item, where_of(at, item), f"test-{i + 1}", len(out)))
            continue
        if not isinstance(item, str) or not item.strip():
            problems.error(at, f"test #{i + 1}",
                           f"must be a mapping with vars and assert, or a file:// tests file, not {item!r}")
            continue
        ref = item.removeprefix("file://")
        pattern = ref if os.path.isabs(ref) else os.path.join(base, ref)
        files = sorted(f for f in glob.glob(pattern, recursive=True) if os.path.isfile(f))
        if not files:
            problems.error(at, "tests" if single else f"test #{i + 1}",
                           f"no tests file matches {ref!r} (looked in {base}); a test is a mapping with vars "
                           f"and assert, or a file:// path to a YAML, JSON or CSV file of tests")
            continue
        for file in files:
            name = os.path.relpath(file, base)
            loaded = _tests_file(file, name, problems, at)
            stem = key_part(os.path.splitext(os.path.basename(file))[0]) or "tests"
            for j, test in enumerate(loaded):
                test_at = at + (name, j) if not single or len(files) > 1 else at + (j,)
                if not isinstance(test, dict):
                    problems.error(test_at, f"{name} test #{j + 1}",
                                   f"must be a mapping with vars and assert, not {test!r}")
                    continue
                label = test.get("description") if isinstance(test.get("description"), str) else None
                where = (f"test #{j + 1}" if single and len(files) == 1 else f"{name} test #{j + 1}") + (
                    f" ({label!r})" if label else "")
                key = f"test-{j + 1}" if single and len(files) == 1 else f"{stem}-{j + 1}"
                out.append(Source(test_at, test, where, key, len(out)))
    return out


def _tests_file(file: str, name: str, problems: Problems, at: tuple) -> list:
    """The tests of one tests file (YAML or JSON: a list of tests or one; CSV: promptfoo's columns)."""
    lowered = file.lower()
    if not lowered.endswith((".yaml", ".yml", ".json", ".csv")):
        problems.unsupported(at, "tests", f"tests file {name!r} is not YAML, JSON or CSV (code is not run by "
                                          f"evaljobs)", "convert it to YAML")
        return []
    try:
        loaded = csv_tests(file, name, problems) if lowered.endswith(".csv") else yaml12.load(read_text(file))
    except (yaml.YAMLError, csv.Error) as exc:
        kind = "CSV" if lowered.endswith(".csv") else "YAML"
        problems.error(at, "tests", f"tests file {name!r} is not valid {kind}: {str(exc).splitlines()[0]}")
        return []
    if isinstance(loaded, dict):
        return [loaded]
    if not isinstance(loaded, list):
        problems.error(at, "tests", f"tests file {name!r} must hold a list of tests")
        return []
    return loaded


def raw_vars(raw: Any, problems: Problems, path: tuple, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.error(path, where, "vars must be a mapping of names to values")
        return {}
    return {str(name): value for name, value in raw.items()}


#: Var files promptfoo runs or decodes rather than reads as text (src/evaluatorHelpers.ts renderPrompt).
_CODE_VAR_FILES = (
    ".js",
    ".cjs",
    ".mjs",
    ".ts",
    ".py",
    ".pdf",
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".webp",
    ".bmp",
    ".tif",
    ".tiff",
    ".svg",
    ".ico",
    ".avif",
    ".heic",
    ".mp3",
    ".wav",
    ".ogg",
    ".mp4",
    ".webm",
    ".mov",
)


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
                problems.error(
                    path + (name,), where, f"var {name!r}: no file matches {ref!r} (looked in {base})"
                )
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
    return [
        {k: v[:-1] if isinstance(v, str) and v.endswith("\n") else v for k, v in run.items()} for run in runs
    ]


def _var_file(file: str, name: str, problems: Problems, path: tuple, where: str) -> str | None:
    """A ``file://`` var's value as promptfoo's renderPrompt reads it: YAML as compact JSON, text trimmed."""
    ext = os.path.splitext(file)[1].lower()
    if ext in _CODE_VAR_FILES:
        problems.unsupported(
            path + (name,),
            where,
            f"var {name!r} comes from {os.path.basename(file)!r}, which "
            f"promptfoo runs or decodes ({ext}); evaljobs reads text only",
            "put the text in a .txt file",
        )
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


__all__ = [
    "Source",
    "assertion_from_string",
    "combinations",
    "csv_tests",
    "raw_vars",
    "read_tests",
    "where_of",
]
