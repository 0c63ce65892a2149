"""promptfoo assertions (``assert:``) as native expectations: the second half of the promptfoo importer.

:func:`convert_assertions` turns one test's assertions (with ``defaultTest``'s,
``$ref`` templates resolved, transforms attached) into the scenario's ``expect``
block, or records why one cannot be graded. Split from :mod:`.promptfoo`
(prompts, tests, vars), which calls it once per test; the two halves share only
the problem collector and :func:`fill` (``{{var}}`` rendering).
"""
from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from typing import Any

from evaljobs.catalog import patterns
from evaljobs.catalog.importers.js_regex import python_pattern
from evaljobs.catalog.importers.promptfoo_templates import render_template
from evaljobs.catalog.importers.shared import Problems, check_keys, read_text, strings

_ASSERT_KEYS = (
    "type",
    "value",
    "threshold",
    "weight",
    "metric",
    "provider",
    "transform",
    "rubricPrompt",
    "config",
)

#: The answer is (roughly) a JSON object or array.
JSON_REGEX = r"\A\s*(?:\{[\s\S]*\}|\[[\s\S]*\])\s*\Z"


def fill(text: str, variables: dict[str, Any], problems: Problems, missing_at: tuple[tuple, str],
          bad_at: tuple[tuple, str] | None, what: str) -> str:
    """Render a Nunjucks template as promptfoo does (:mod:`.promptfoo_templates`); a missing var is blamed on
    ``missing_at`` (the test), a template evaljobs will not render on ``bad_at`` (where it is written;
    ``None``: checked elsewhere, once)."""
    rendered, missing, refusal = render_template(text, variables)
    for name in dict.fromkeys(missing):
        problems.error(*missing_at, f"{what} uses {{{{{name}}}}} but the test has no var {name!r}; add it "
                                    f"under vars (or defaultTest.vars)")
    if refusal and bad_at:
        problems.unsupported(*bad_at, f"{what} {refusal}", "simplify it")
    return rendered


def convert_assertions(raw: Any, problems: Problems, path: tuple, where: str, variables: dict[str, Any],
            *, fill_at: tuple[tuple, str] | None = None, ctx: AssertContext | None = None,
            entries: list | None = None) -> dict[str, Any]:
    """Native ``expect`` for a list of promptfoo assertions.

    ``fill_at`` names the (path, entry) to blame for a missing var, when that is
    not where the assertion is written (defaultTest asserts rendered per test).
    ``entries``, when given, also receives one weighted-list entry per assertion
    (``expect.assertions`` of a ``weighted`` scenario: each with its ``weight``,
    an ``assert-set`` as a ``set``), for the tests promptfoo scores by weight.
    """
    if raw is None:
        return {}
    if not isinstance(raw, list):
        problems.error(path, where, "assert must be a list of assertions")
        return {}
    out: dict[str, Any] = {}
    ctx = ctx or AssertContext(variables=variables)
    for i, item in enumerate(raw):
        apath = path + (i,)
        if isinstance(item, dict) and "$ref" in item and ctx.refs is not None:
            item = ctx.refs.resolve(item, apath, where)
            if item is None:
                problems.counts["assertions"] += 1  # refused (and counted so) by Refs.resolve
                continue
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            problems.error(apath, where, f"assertion #{i + 1} must be a mapping with a 'type', not {item!r}")
            continue
        kind = item["type"]
        label = f"{where}: assertion #{i + 1} ({kind})"
        weight = item.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            problems.error(
                apath + ("weight",),
                where,
                f"assertion #{i + 1} ({kind}): weight must be a number >= 0, not {weight!r}",
            )
            continue
        if kind == "assert-set":
            check_keys(problems, apath, f"{where}: assertion #{i + 1}", item, _SET_KEYS)
            children: list = []
            out = _merge(
                out,
                convert_assertions(
                    item.get("assert"),
                    problems,
                    apath + ("assert",),
                    label,
                    variables,
                    fill_at=fill_at,
                    ctx=ctx,
                    entries=children,
                ),
            )
            threshold = item.get("threshold")
            if threshold is not None and (
                isinstance(threshold, bool) or not isinstance(threshold, (int, float))
            ):
                problems.error(apath + ("threshold",), where, f"assert-set threshold must be a number, not "
                                                              f"{threshold!r}")
                continue
            if entries is not None:
                entries.append(
                    _weighed(
                        {
                            "kind": "set",
                            "assertions": children,
                            "label": label,
                            **({"threshold": float(threshold)} if threshold is not None else {}),
                        },
                        weight,
                    )
                )
            continue
        check_keys(problems, apath, f"{where}: assertion #{i + 1}", item, _ASSERT_KEYS)
        if item.get("provider") is not None:
            problems.warn(
                apath + ("provider",),
                where,
                f"assertion #{i + 1} ({kind}): provider is not used by "
                f"evaljobs (the judge model is the run's: judge_model / "
                f"--judge-model); ignored",
            )
        custom = "its rubricPrompt" if item.get("rubricPrompt") is not None else ctx.rubric_prompt
        if kind == "llm-rubric" and custom:
            # A rubric prompt of one's own decides what the judge is asked, and so its verdict
            # (promptfoo/examples/custom-grading-prompt asks it to "always pass"): evaljobs' judge prompt
            # would not.
            problems.counts["assertions"] += 1
            problems.unsupported(
                apath,
                where,
                f"assertion type 'llm-rubric' with {custom} (a judge prompt of "
                f"its own) cannot be graded by evaljobs, whose judge asks its own "
                f"prompt",
                "remove the rubricPrompt",
            )
            if problems.lenient and entries is not None:
                entries.append(_weighed({"kind": "refused", "label": label,
                                         "reason": f"llm-rubric with {custom}"}, weight))
            continue
        value = item.get("value")
        missing_at, bad_at = fill_at or (apath, where), (apath, where)
        if kind not in _CODE_TYPES:  # code is not a template (its own {{ }} and quotes are code)
            if isinstance(value, str):
                value = fill(value, variables, problems, missing_at, bad_at, f"assertion '{kind}'")
            elif isinstance(value, list):
                value = [fill(v, variables, problems, missing_at, bad_at, f"assertion '{kind}'")
                         if isinstance(v, str) else v for v in value]
        single: dict[str, Any] = {}
        try:
            if _external(kind, value, item, single, ctx, label) or _transformed(
                kind, value, item, single, ctx, label
            ):
                problems.count("external")
            else:
                _assertion(kind, value, item, single)
                problems.count("mapped")
        except _Unsupported as exc:
            problems.counts["assertions"] += 1  # unsupported() counts it as refused
            problems.unsupported(apath, where, f"assertion type {kind!r} {exc.reason}",
                                 "remove it")
            if problems.lenient:
                single["assertions"] = [{"kind": "refused", "label": label, "reason": f"{kind} {exc.reason}"}]
        except _BadValue as exc:
            problems.error(apath, where, f"assertion {kind!r}: {exc.reason}")
            continue
        out = _merge(out, single)
        if entries is not None:
            entries.append(_weighed(_entry(single, item, label), weight))
    return out


_SET_KEYS = ("type", "assert", "threshold", "weight", "metric")


def _merge(out: dict[str, Any], single: dict[str, Any]) -> dict[str, Any]:
    """One assertion's native checks added to the test's (external assertions are all kept, in order)."""
    merged = merge_expect(out, {k: v for k, v in single.items() if k != "assertions"})
    if single.get("assertions"):
        merged["assertions"] = list(out.get("assertions") or []) + list(single["assertions"])
    return merged


def _entry(single: dict[str, Any], item: dict, label: str) -> dict[str, Any]:
    """One promptfoo assertion as one entry of a weighted list."""
    entry: dict[str, Any]
    if single.get("assertions"):
        entry = dict(single["assertions"][0])
        entry.setdefault("label", label)
        return entry
    if "judge" in single:
        entry = {"kind": "judge", "rubric": single["judge"], "label": label}
        threshold = item.get("threshold")
        if isinstance(threshold, (int, float)) and not isinstance(threshold, bool):
            entry["threshold"] = float(threshold)
        return entry
    if "max_latency_ms" in single:
        return {"kind": "latency", "max_ms": single["max_latency_ms"], "label": label}
    return {"kind": "builtin", "expect": single, "label": label}


def _weighed(entry: dict[str, Any], weight: float) -> dict[str, Any]:
    if weight != 1:
        entry["weight"] = weight
    return entry


def needs_weights(entries: list, threshold: float | None) -> bool:
    """Whether promptfoo's weighted scoring can give another verdict than "every assertion passes"."""
    def special(entry: dict) -> bool:
        return ("weight" in entry or entry.get("kind") == "set"
                or (entry.get("kind") == "judge" and "threshold" in entry))
    return threshold is not None or any(special(e) for e in entries)


_CODE_TYPES = ("javascript", "not-javascript", "python", "not-python")
#: JavaScript modules a file:// javascript assertion may name (TypeScript only when it is plain JavaScript:
#: evaljobs does not compile it).
_JS_FILES = (".js", ".cjs", ".mjs", ".ts", ".cts", ".mts")


@dataclass
class AssertContext:
    """What an assertion needs besides itself: the test's vars, its transform, the config's folder."""

    variables: dict[str, Any]
    transform: str | None = None
    base: str = "."
    refs: Refs | None = None
    #: Where a test's ``options.rubricPrompt`` comes from (its own or defaultTest's), if it has one.
    rubric_prompt: str | None = None

    def transforms(self, item: dict) -> list[str]:
        """The test's ``options.transform`` first, then the assertion's own ``transform`` (as promptfoo)."""
        own = item.get("transform")
        if own is not None and (not isinstance(own, str) or not own.strip()):
            raise _BadValue(f"transform must be a JavaScript expression (a string), not {own!r}")
        chain = [t for t in (self.transform, own) if t]
        for t in chain:
            if t.startswith("file://"):
                raise _Unsupported(f"with a file:// transform ({t}) cannot be run by evaljobs (only inline "
                                   f"JavaScript transforms are)")
        return chain


class Refs:
    """``$ref: '#/assertionTemplates/name'``: JSON pointers into the same config file."""

    def __init__(self, data: dict, problems: Problems):
        self.data = data
        self.problems = problems

    def resolve(self, item: dict, path: tuple, where: str) -> dict | None:
        ref = item.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            self.problems.unsupported(path, where, f"$ref {ref!r} is not a reference into this file "
                                                   f"('#/assertionTemplates/<name>')", "inline the assertion")
            return None
        target: Any = self.data
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                self.problems.unsupported(path, where, f"$ref {ref!r} points to nothing in this file",
                                          "define it under assertionTemplates or fix the name")
                return None
        if not isinstance(target, dict):
            self.problems.error(path, where, f"$ref {ref!r} is not an assertion (a mapping with 'type')")
            return None
        merged = copy.deepcopy(target)
        merged.update({k: v for k, v in item.items() if k != "$ref"})  # siblings of $ref refine it
        return merged


def options_transform(test: dict, path: tuple, where: str, problems: Problems) -> str | None:
    options = test.get("options")
    if options is None:
        return None
    if not isinstance(options, dict):
        problems.error(path + ("options",), where, "options must be a mapping")
        return None
    for key in options:
        # a rubricPrompt is refused with the llm-rubric it changes
        if key not in ("transform", "rubricPrompt"):
            problems.warn(path + ("options", key), where, f"options.{key} is not used by evaljobs; ignored")
    transform = options.get("transform")
    if transform is not None and (not isinstance(transform, str) or not transform.strip()):
        problems.error(path + ("options", "transform"), where,
                       f"options.transform must be a JavaScript expression (a string), not {transform!r}")
        return None
    return transform


def _external(kind: str, value: Any, item: dict, out: dict[str, Any], ctx: AssertContext, label: str) -> bool:
    """javascript / python / is-json with a schema: assertions run by ``evaljobs.evaluation.assertions``."""
    negate = kind.startswith("not-")
    base_kind = kind[4:] if negate else kind
    entry: dict[str, Any]
    if base_kind == "javascript":
        if not isinstance(value, str) or not value.strip():
            raise _BadValue(f"value must be JavaScript code (a string), not {value!r}")
        if value.startswith("file://"):
            # promptfoo's loadFromJavaScriptFile: the module's named function, else its default export. The
            # source is stored in the catalog (a worker elsewhere runs the same code) and imported in Node.
            ref, _, function = value[len("file://"):].partition(":")
            if not ref.lower().endswith(_JS_FILES):
                raise _Unsupported(f"from {ref!r} cannot be run by evaljobs (a JavaScript file: "
                                   f"{', '.join(_JS_FILES)})")
            file = ref if os.path.isabs(ref) else os.path.join(ctx.base, ref)
            if not os.path.isfile(file):
                raise _BadValue(f"JavaScript file {ref!r} not found (looked for {file})")
            entry = {"kind": "javascript", "module": read_text(file), "filename": os.path.basename(file)}
            if function:
                entry["function"] = function
        else:
            entry = {"kind": "javascript", "code": value}
    elif base_kind == "python":
        if not isinstance(value, str) or not value.strip():
            raise _BadValue(f"value must be Python code or file://path.py[:function], not {value!r}")
        if value.startswith("file://"):
            ref, _, function = value[len("file://"):].partition(":")
            file = ref if os.path.isabs(ref) else os.path.join(ctx.base, ref)
            if not os.path.isfile(file):
                raise _BadValue(f"Python file {ref!r} not found (looked for {file})")
            # The source is stored in the catalog: a worker on another machine runs the same code.
            entry = {"kind": "python", "code": read_text(file), "function": function or "get_assert",
                     "filename": os.path.basename(file)}
        else:
            entry = {"kind": "python", "code": value}
    elif base_kind == "is-json" and value is not None:
        if not isinstance(value, dict):
            raise _BadValue(f"is-json's value must be a JSON schema (a mapping), not {value!r}")
        entry = {"kind": "json_schema", "schema": value}
    else:
        return False
    entry["label"] = label
    transforms = ctx.transforms(item)
    if transforms:
        entry["transforms"] = transforms
    if negate:
        entry["negate"] = True
    threshold = item.get("threshold")
    if isinstance(threshold, (int, float)) and not isinstance(threshold, bool):
        entry["threshold"] = threshold
    if base_kind in ("javascript", "python") and ctx.variables:
        entry["vars"] = copy.deepcopy(ctx.variables)
    config = item.get("config")
    if base_kind in ("javascript", "python") and config is not None:
        if not isinstance(config, dict):
            raise _BadValue(f"config must be a mapping (given to the code as context.config), not {config!r}")
        entry["config"] = copy.deepcopy(config)  # context.config, as promptfoo passes it
    out.setdefault("assertions", []).append(entry)
    return True


def _transformed(
    kind: str, value: Any, item: dict, out: dict[str, Any], ctx: AssertContext, label: str
) -> bool:
    """A built-in assertion on a transformed output: the native checks, run after the transforms."""
    transforms = ctx.transforms(item)
    if not transforms or kind in ("cost", "not-cost"):  # the call's cost does not read the output
        return False
    if kind in ("llm-rubric", "latency"):
        raise _Unsupported("with a transform cannot be graded by evaljobs (the judge and the latency see "
                           "the answer as it came)")
    checks: dict[str, Any] = {}
    _assertion(kind, value, item, checks)
    if checks.get("assertions"):  # a promptfoo check of its own (levenshtein, contains-json...)
        entry = dict(checks["assertions"][0], transforms=transforms, label=label)
    else:
        entry = {"kind": "builtin", "expect": checks, "transforms": transforms, "label": label}
    out.setdefault("assertions", []).append(entry)
    return True


#: promptfoo assertions graded by :mod:`evaljobs.evaluation.promptfoo_checks` (as promptfoo computes them).
_CHECKS = ("is-json", "contains-json", "levenshtein", "rouge-n", "bleu")


def _js_string(value: Any) -> str:
    """JavaScript's ``String(value)`` for a YAML scalar (``1.0`` is ``"1"``)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class _Unsupported(Exception):
    def __init__(self, reason: str = "cannot be graded by evaljobs"):
        self.reason = reason


class _BadValue(Exception):
    def __init__(self, reason: str):
        self.reason = reason


def _assertion(kind: str, value: Any, item: dict, out: dict[str, Any]) -> None:
    def values(split: bool = False) -> list[str]:
        items = value.split(",") if split and isinstance(value, str) else value
        got = strings(items)
        if not got or not all(v.strip() for v in got):
            raise _BadValue(f"value must be {'a list of strings' if split else 'a string'}, not {value!r}")
        return [v.strip() if split else v for v in got]

    def one() -> str:
        got = values()
        if len(got) != 1:
            raise _BadValue(f"value must be one string, not {value!r}")
        return got[0]

    def add(name: str, *items: str) -> None:
        bucket = out.setdefault(name, [])
        bucket.extend(i for i in items if i not in bucket)

    esc = re.escape
    # Exact where promptfoo is exact (src/assertions/equals.ts: ``String(value) === output``;
    # startsWith.ts: ``output.startsWith(value)``): no whitespace is tolerated that promptfoo does not.
    if kind == "equals":
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise _Unsupported("with a non-text value (deep JSON equality) cannot be graded by evaljobs")
        add("regex", rf"\A{esc(_js_string(value))}\Z")
    elif kind == "not-equals":
        add("regex", rf"\A(?!{esc(one())}\Z)")
    elif kind == "contains":
        add("regex", esc(one()))
    elif kind == "icontains":
        add("contains", one())
    elif kind in ("contains-any", "icontains-any"):
        flags = "(?i)" if kind.startswith("i") else ""
        add("regex", flags + "(?:" + "|".join(esc(v) for v in values(split=True)) + ")")
    elif kind == "contains-all":
        add("regex", *(esc(v) for v in values(split=True)))
    elif kind == "icontains-all":
        add("contains", *values(split=True))
    elif kind == "not-contains":
        add("regex", _nowhere(esc(one())))
    elif kind == "not-icontains":
        add("not_contains", one())
    elif kind == "not-contains-any":
        add("regex", *(_nowhere(esc(v)) for v in values(split=True)))
    elif kind == "not-icontains-any":
        add("not_contains", *values(split=True))
    elif kind in ("regex", "not-regex"):
        source = one()
        if re.match(r"\(\?[a-zA-Z]+\)", source):
            raise _BadValue(f"regex {source!r} starts with an inline flag group, which JavaScript's RegExp "
                            f"(promptfoo) refuses (Invalid group); write the letters' cases, e.g. [Ee]rror")
        pattern = python_pattern(source)  # promptfoo: new RegExp(value), JavaScript's semantics
        trouble = patterns.problem(pattern)  # what the bounded engine runs (evaljobs.catalog.patterns)
        if trouble:  # (a position would point into the translated pattern, not the one written)
            raise _BadValue(f"regex {source!r} {trouble.split(' at position ')[0]}")
        add("regex", pattern if kind == "regex" else _nowhere(pattern))
    elif kind == "starts-with":
        add("regex", rf"\A{esc(one())}")
    elif kind == "not-starts-with":
        add("regex", rf"\A(?!{esc(one())})")
    elif kind in _CHECKS or (kind.startswith("not-") and kind[4:] in _CHECKS):
        base = kind.removeprefix("not-")
        check: dict[str, Any] = {"kind": "promptfoo", "type": base}
        if base == "contains-json" and value is not None:
            raise _Unsupported(
                "with a JSON schema cannot be graded by evaljobs (write is-json with the schema, "
                "or contains-json without one)"
            )
        if base in ("levenshtein", "rouge-n"):
            check["value"] = one()
        elif base == "bleu":
            got = values()
            check["value"] = got if isinstance(value, list) else got[0]
        threshold = item.get("threshold")
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
                raise _BadValue(f"threshold must be a number, not {threshold!r}")
            check["threshold"] = threshold
        if kind != base:
            check["negate"] = True
        out.setdefault("assertions", []).append(check)
    elif kind == "llm-rubric":
        rubric = one()
        out["judge"] = f"{out['judge']}\n{rubric}" if out.get("judge") else rubric
    elif kind == "similar":
        raise _Unsupported("needs an embedding model to compare meanings, which evaljobs does not have "
                           "(write the expected phrases as icontains, or a rubric as llm-rubric)")
    elif kind in ("cost", "not-cost"):
        threshold = item.get("threshold")
        if threshold is None:
            raise _Unsupported("without a threshold only records the cost as a metric, which evaljobs "
                               "reports for every pair anyway")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 0:
            raise _BadValue(f"cost needs a 'threshold' in USD (a number >= 0), not {threshold!r}")
        # graded with evaljobs' price of the call (evaljobs.evaluation.cost_check)
        check = {"kind": "cost", "max_usd": float(threshold)}
        if kind == "not-cost":
            check["negate"] = True
        out.setdefault("assertions", []).append(check)
    elif kind == "latency":
        threshold = item.get("threshold")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold <= 0:
            raise _BadValue(f"latency needs a positive 'threshold' in milliseconds, not {threshold!r}")
        out["max_latency_ms"] = min(int(threshold), out.get("max_latency_ms", int(threshold)))
    else:
        raise _Unsupported()


def _nowhere(pattern: str) -> str:
    """A regex that matches (at the start) only if ``pattern`` occurs nowhere in the text.

    Global inline flags such as ``(?i)`` must lead a Python pattern: they are hoisted.
    """
    match = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    flags = ""
    if match:
        flags, pattern = match.group(0), pattern[match.end():]
    return rf"{flags}\A(?![\s\S]*?(?:{pattern}))"


def merge_expect(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """defaultTest's expectations followed by the test's own."""
    out = {name: list(items) if isinstance(items, list) else items for name, items in first.items()}
    for name, value in second.items():
        if isinstance(value, list):
            bucket = out.setdefault(name, [])
            bucket.extend(v for v in value if v not in bucket)
        elif name == "judge" and out.get("judge"):
            out["judge"] = f"{out['judge']}\n{value}"
        elif name == "max_latency_ms" and "max_latency_ms" in out:
            out[name] = min(out[name], value)
        else:
            out[name] = value
    return out


__all__ = [
    "JSON_REGEX",
    "AssertContext",
    "Refs",
    "convert_assertions",
    "fill",
    "merge_expect",
    "needs_weights",
    "options_transform",
]
