"""promptfoo configs (``promptfooconfig.yaml``) as native catalog data.

Every prompt × every test becomes one scenario, keyed
``<prompt id>.<test>`` where the prompt id is its ``id``/``label`` (or
``prompt-<n>``) and the test part is its ``description`` slugged (or
``test-<n>``); both are stable as long as the config's ids and descriptions
are. Each prompt is a native group. ``vars`` fill ``{{var}}`` placeholders
(plain names only), ``defaultTest`` vars and asserts are merged into every
test, and the test's description is kept as the scenario's notes.

Prompts may be strings, ``{id|label, raw}`` objects, a ``{file://path: label}``
mapping or ``file://`` references relative to the config: ``.txt``/``.md``
(several prompts separated by a line ``---``), ``.json``/``.yaml`` (a chat:
a list of ``{role, content}``). A prompt string holding a JSON chat is a chat.

Assertions map onto native expectations. Native ``contains``/``not_contains``
are case-insensitive, so case-sensitive assertions become regexes:

==================  ====================================================
equals              regex ``\\A\\s*<value>\\s*\\Z`` (surrounding whitespace allowed); ``not-equals``: negative
contains            regex ``<value>`` (escaped; case-sensitive)
icontains           ``contains``
contains-any        regex ``(?:a|b)``; ``icontains-any`` adds ``(?i)``
contains-all        one regex per value; ``icontains-all``: ``contains``
not-contains        regex ``\\A(?![\\s\\S]*<value>)`` (nowhere in the answer)
not-contains-any    one negative regex per value
not-icontains       ``not_contains`` (``not-icontains-any``: one entry per value)
regex               ``regex`` (``not-regex``: the negative form above)
starts-with         regex ``\\A\\s*<value>`` (``not-starts-with``: negative)
is-json             regex for a JSON object or array (``not-is-json``: negative)
llm-rubric          ``judge`` (several rubrics are joined, one per line)
latency             ``max_latency_ms`` from its ``threshold``
==================  ====================================================

A test passes only when every assertion does (``pass_threshold: 1.0``, as in
promptfoo), unless it sets ``threshold`` (then the native ``pass_threshold``).
Note that evaljobs' judge scores from 0 to 1: with no threshold, an
``llm-rubric`` must get full marks.

Run outside Python's graders (``evaljobs.evaluation.assertions``): ``javascript`` (inline,
in Node), ``python`` (inline or ``file://x.py[:function]``, whose source is
stored in the catalog; in a subprocess), ``is-json`` with a schema
(``jsonschema``), and any built-in assertion on a transformed output: the test's
``options.transform`` (or ``defaultTest``'s) then the assertion's own
``transform`` run in Node first, as promptfoo applies them.

``$ref: '#/assertionTemplates/<name>'`` (any JSON pointer into the same file)
is replaced by what it points to; siblings of ``$ref`` refine it.

Refused, with the reason: ``similar`` (needs an embedding model), ``cost``
(not graded per pair), file:// JavaScript modules and transforms, an
``llm-rubric`` or ``latency`` with a transform, and unknown types: an error
naming the test and the type, or under ``--lenient`` skipped with a warning
— a test whose every assertion was skipped is then reported as not gradable,
never graded on "an answer came back". ``providers`` are ignored (choose
models with ``-m``), with a warning.

YAML is read as YAML 1.2, as promptfoo reads it: ``body: Yes`` is the text "Yes".
"""
from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import yaml

from evaljobs.catalog import yaml12
from evaljobs.catalog.importers.shared import Problems, check_keys, key_part, read_text, render, slug, strings

_TOP_KEYS = ("description", "prompts", "tests", "defaultTest", "assertionTemplates")
_IGNORED_TOP = ("providers", "outputPath", "evaluateOptions", "env", "sharing", "commandLineOptions",
                "writeLatestResults", "tags", "metadata", "$schema")
_TEST_KEYS = ("description", "vars", "assert", "threshold", "metadata", "options")
_DEFAULT_TEST_KEYS = ("vars", "assert", "threshold", "options", "metadata")
_ASSERT_KEYS = ("type", "value", "threshold", "weight", "metric", "provider", "transform", "rubricPrompt")
_PROMPT_FILE_TEXT = (".txt", ".md", ".prompt", ".j2", ".njk")
_PROMPT_FILE_CHAT = (".json", ".yaml", ".yml")

#: The answer is (roughly) a JSON object or array.
JSON_REGEX = r"\A\s*(?:\{[\s\S]*\}|\[[\s\S]*\])\s*\Z"


def convert_promptfoo(data: Any, problems: Problems) -> dict[str, Any]:
    """A promptfoo config as native catalog data (problems collected in ``problems``)."""
    base = os.path.dirname(os.path.abspath(problems.source))
    for key in data:
        if key in _IGNORED_TOP:
            problems.warn((key,), "", f"{key!r} is ignored by evaljobs"
                          + ("; choose the models with -m" if key == "providers" else ""))
        elif key not in _TOP_KEYS:
            problems.unsupported((key,), "", f"top-level key {key!r} is not supported by evaljobs",
                                 "remove it")
    stem = os.path.splitext(os.path.basename(problems.source))[0]
    description = data.get("description")
    out: dict[str, Any] = {"name": description.strip() if isinstance(description, str) and description.strip()
                           else stem}
    if isinstance(description, str) and description.strip():
        out["description"] = description.strip()

    prompts = _prompts(data.get("prompts"), problems, base)
    default = data.get("defaultTest") or {}
    if not isinstance(default, dict):
        problems.error(("defaultTest",), "defaultTest", "must be a mapping with vars and assert")
        default = {}
    check_keys(problems, ("defaultTest",), "defaultTest", default, _DEFAULT_TEST_KEYS)
    tests = _tests(data.get("tests"), problems, base)

    default_vars = _vars(default.get("vars"), problems, ("defaultTest", "vars"), "defaultTest", base)
    refs = _Refs(data, problems)
    converted = [_test(path, test, default, default_vars, problems, base, refs) for path, test in tests]
    seen: set[str] = set()
    for test in converted:  # two tests share a description: number the later ones
        if test.key in seen:
            test.key = f"{test.key}-{test.index + 1}"
        seen.add(test.key)

    groups = []
    for pid, plabel, content in prompts:
        scenarios = [_scenario(pid, content, test, problems) for test in converted]
        if scenarios:
            groups.append({"name": plabel, "tags": [f"prompt:{pid}"], "scenarios": scenarios})
    out["groups"] = groups
    if not problems.errors and not (prompts and converted):
        problems.error(("tests",) if prompts else ("prompts",), "",
                       f"no {'tests' if prompts else 'prompts'}; a promptfoo config needs prompts and tests")
    return out


@dataclass
class _Test:
    index: int
    key: str
    path: tuple
    where: str
    description: str | None
    variables: dict[str, Any]
    expect: dict[str, Any]
    threshold: float | None
    tags: list[str]


def _test(path: tuple, test: dict, default: dict, default_vars: dict[str, Any], problems: Problems,
          base: str, refs: "_Refs") -> _Test:
    i = path[-1] if isinstance(path[-1], int) else 0
    label = test.get("description") if isinstance(test.get("description"), str) else None
    where = f"test #{i + 1}" + (f" ({label!r})" if label else "")
    check_keys(problems, path, where, test, _TEST_KEYS)
    variables = dict(default_vars)
    variables.update(_vars(test.get("vars"), problems, path + ("vars",), where, base))
    # promptfoo merges the test's options over defaultTest's: the test's transform wins.
    transform = _options_transform(test, path, where, problems)
    if transform is None:
        transform = _options_transform(default, ("defaultTest",), "defaultTest", problems)
    ctx = _AssertContext(variables=variables, transform=transform, base=base, refs=refs)
    # defaultTest's asserts are rendered with each test's vars; their own problems are reported once.
    expect = _merge(_expect(default.get("assert"), problems, ("defaultTest", "assert"), "defaultTest",
                            variables, fill_at=(path, f"{where} (defaultTest.assert)"), ctx=ctx),
                    _expect(test.get("assert"), problems, path + ("assert",), where, variables, ctx=ctx))
    threshold = test.get("threshold", default.get("threshold"))
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 <= threshold <= 1):
        problems.error(path + ("threshold",), where,
                       f"threshold must be a number from 0 to 1, not {threshold!r}")
        threshold = None
    return _Test(index=i, key=slug(label or "") or f"test-{i + 1}", path=path, where=where, description=label,
                 variables=variables, expect=expect, threshold=threshold,
                 tags=_metadata_tags(test.get("metadata")))


def _scenario(pid: str, content: Any, test: _Test, problems: Problems) -> dict[str, Any]:
    """One prompt x one test."""
    scenario: dict[str, Any] = {"key": f"{pid}.{test.key}"}
    blame, what = (test.path, test.where), f"prompt '{pid}'"
    if isinstance(content, str):
        scenario["prompt"] = _fill(content, test.variables, problems, blame, None, what)
    else:
        scenario["messages"] = [dict(m, content=_fill(m["content"], test.variables, problems, blame, None,
                                                      what)) for m in content]
    if test.expect:
        scenario["expect"] = copy.deepcopy(test.expect)  # each scenario owns its data
    # promptfoo passes a test only when every assertion passes, unless the test sets a threshold.
    scenario["pass_threshold"] = float(test.threshold) if test.threshold is not None else 1.0
    if test.tags:
        scenario["tags"] = list(test.tags)
    if test.description:
        scenario["notes"] = test.description
    return scenario


# --------------------------------------------------------------------------- prompts


def _prompts(raw: Any, problems: Problems, base: str) -> list[tuple[str, str, Any]]:
    """``(id, label, content)`` per prompt; content is a string or a list of chat messages."""
    if raw is None:
        problems.error((), "", "missing 'prompts'")
        return []
    entries: list[tuple[tuple, Any, str | None, str | None]] = []  # (path, text or file ref, id, label)
    if isinstance(raw, str):
        entries.append((("prompts",), raw, None, None))
    elif isinstance(raw, dict):  # {file://path or text: label}
        for ref, label in raw.items():
            label = label if isinstance(label, str) and label.strip() else None
            entries.append((("prompts", ref), ref, label, label))
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            path = ("prompts", i)
            if isinstance(item, str):
                entries.append((path, item, None, None))
            elif isinstance(item, dict):
                check_keys(problems, path, f"prompt #{i + 1}", item, ("id", "label", "raw"))
                ident, label, text = item.get("id"), item.get("label"), item.get("raw")
                if text is None and isinstance(ident, str) and ident.startswith("file://"):
                    text, ident = ident, None
                if not isinstance(text, str) or not text.strip():
                    problems.error(path, f"prompt #{i + 1}",
                                   "needs 'raw' (the prompt text) or a file:// 'id'")
                    continue
                label = label if isinstance(label, str) and label.strip() else None
                ident = ident if isinstance(ident, str) and ident.strip() else label
                entries.append((path, text, ident, label))
            else:
                problems.error(path, f"prompt #{i + 1}",
                               f"must be a string or {{id, label, raw}}, not {item!r}")
    else:
        problems.error(("prompts",), "", "prompts must be a list of prompts")
        return []

    out: list[tuple[str, str, Any]] = []
    seen: set[str] = set()
    for n, (path, text, ident, label) in enumerate(entries, 1):
        where = f"prompt #{n}"
        if text.startswith("file://"):
            loaded = _prompt_file(text[len("file://"):], problems, path, where, base)
            stem = (key_part(ident or "") or key_part(os.path.splitext(os.path.basename(text))[0])
                    or f"prompt-{n}")
            for j, content in enumerate(loaded, 1):
                pid = stem if len(loaded) == 1 else f"{stem}-{j}"
                shown = label if label and len(loaded) == 1 else f"{label} #{j}" if label else pid
                _check_expressions(content, problems, path, where)
                out.append((pid, shown, content))
        else:
            content = _chat(text) or text
            pid = key_part(ident or "") or f"prompt-{n}"
            _check_expressions(content, problems, path, where)
            out.append((pid, label or pid, content))
    for pid, _, _ in out:
        if pid in seen:
            problems.error(("prompts",), "",
                           f"two prompts have the id {pid!r}; give them distinct ids or labels")
        seen.add(pid)
    return out


def _prompt_file(ref: str, problems: Problems, path: tuple, where: str, base: str) -> list[Any]:
    file = ref if os.path.isabs(ref) else os.path.join(base, ref)
    ext = os.path.splitext(file)[1].lower()
    if ext not in _PROMPT_FILE_TEXT + _PROMPT_FILE_CHAT:
        kind = ext or "no extension"
        problems.unsupported(path, where, f"prompt file {ref!r} ({kind}) cannot be read by evaljobs (only "
                                          f"text and JSON/YAML chat files; code prompts are not run)",
                             "use a text or chat file")
        return []
    if not os.path.isfile(file):
        problems.error(path, where, f"prompt file {ref!r} not found (looked for {file})")
        return []
    text = read_text(file)
    if ext in _PROMPT_FILE_TEXT:
        parts = [p.strip() for p in re.split(r"^---\s*$", text, flags=re.M)]
        return [p for p in parts if p]
    try:
        data = json.loads(text) if ext == ".json" else yaml12.load(text)
    except (ValueError, yaml.YAMLError) as exc:
        problems.error(path, where, f"prompt file {ref!r} is not valid {ext[1:].upper()}: "
                                    f"{str(exc).splitlines()[0]}")
        return []
    chat = _chat_messages(data)
    if chat is None:
        problems.error(path, where, f"prompt file {ref!r} must hold a chat: a list of {{role, content}} "
                                    f"with string contents")
        return []
    return [chat]


def _chat(text: str) -> list[dict[str, Any]] | None:
    """A prompt string that is a JSON chat (promptfoo allows it), as messages."""
    stripped = text.strip()
    if not stripped.startswith("["):
        return None
    try:
        return _chat_messages(json.loads(stripped))
    except ValueError:
        return None


def _chat_messages(data: Any) -> list[dict[str, Any]] | None:
    if not isinstance(data, list) or not data:
        return None
    out = []
    for message in data:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            return None
        out.append({"role": message["role"], "content": message["content"]})
    return out


# --------------------------------------------------------------------------- tests and vars


def _tests(raw: Any, problems: Problems, base: str) -> list[tuple[tuple, dict]]:
    if raw is None:
        problems.error((), "", "missing 'tests'")
        return []
    path: tuple = ("tests",)
    if isinstance(raw, str) and raw.startswith("file://"):
        ref = raw[len("file://"):]
        file = ref if os.path.isabs(ref) else os.path.join(base, ref)
        if not file.lower().endswith((".yaml", ".yml", ".json")):
            problems.unsupported(path, "tests", f"tests file {ref!r} is not YAML or JSON (CSV and code are "
                                                f"not read by evaljobs)", "convert it to YAML")
            return []
        if not os.path.isfile(file):
            problems.error(path, "tests", f"tests file {ref!r} not found (looked for {file})")
            return []
        try:
            raw = yaml12.load(read_text(file))
        except yaml.YAMLError as exc:
            problems.error(path, "tests", f"tests file {ref!r} is not valid YAML: {str(exc).splitlines()[0]}")
            return []
    if not isinstance(raw, list):
        problems.error(path, "tests", "tests must be a list of tests (or a file:// YAML file of them)")
        return []
    out = []
    for i, test in enumerate(raw):
        if not isinstance(test, dict):
            problems.error(path + (i,), f"test #{i + 1}",
                           f"must be a mapping with vars and assert, not {test!r}")
            continue
        out.append((path + (i,), test))
    return out


def _vars(raw: Any, problems: Problems, path: tuple, where: str, base: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.error(path, where, "vars must be a mapping of names to values")
        return {}
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if isinstance(value, list):
            problems.unsupported(path + (name,), where, f"var {name!r} is a list (promptfoo runs one test "
                                                        f"per value; evaljobs does not)",
                                 "write one test per value")
            continue
        if isinstance(value, str) and value.startswith("file://"):
            ref = value[len("file://"):]
            file = ref if os.path.isabs(ref) else os.path.join(base, ref)
            if not os.path.isfile(file):
                problems.error(path + (name,), where,
                               f"var {name!r}: file {ref!r} not found (looked for {file})")
                continue
            value = read_text(file).rstrip("\n")
        out[str(name)] = value
    return out


def _fill(text: str, variables: dict[str, Any], problems: Problems, missing_at: tuple[tuple, str],
          bad_at: tuple[tuple, str] | None, what: str) -> str:
    """Render ``{{var}}``s; a missing var is blamed on ``missing_at`` (the test), a template
    expression evaljobs cannot render on ``bad_at`` (where it is written; ``None``: checked elsewhere)."""
    rendered, missing, bad = render(text, variables)
    for name in dict.fromkeys(missing):
        problems.error(*missing_at, f"{what} uses {{{{{name}}}}} but the test has no var {name!r}; add it "
                                    f"under vars (or defaultTest.vars)")
    for expr in dict.fromkeys(bad) if bad_at else ():
        problems.unsupported(*bad_at, f"{what} uses the template expression {expr!r} (only plain "
                                      f"{{{{var}}}} placeholders are supported)", "simplify it")
    return rendered


def _check_expressions(content: Any, problems: Problems, path: tuple, where: str) -> None:
    """Report a prompt's template expressions once (not once per test)."""
    texts = [content] if isinstance(content, str) else [m["content"] for m in content]
    for expr in dict.fromkeys(e for text in texts for e in render(text, {})[2]):
        problems.unsupported(path, where, f"uses the template expression {expr!r} (only plain {{{{var}}}} "
                                          f"placeholders are supported)", "simplify it")


def _metadata_tags(raw: Any) -> list[str]:
    if not isinstance(raw, dict):
        return []
    return [f"{key}:{value}" for key, value in raw.items()
            if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip()]


# --------------------------------------------------------------------------- assertions


def _expect(raw: Any, problems: Problems, path: tuple, where: str, variables: dict[str, Any],
            *, fill_at: tuple[tuple, str] | None = None, ctx: "_AssertContext | None" = None) -> dict[str, Any]:
    """Native ``expect`` for a list of promptfoo assertions.

    ``fill_at`` names the (path, entry) to blame for a missing var, when that is
    not where the assertion is written (defaultTest asserts rendered per test).
    """
    if raw is None:
        return {}
    if not isinstance(raw, list):
        problems.error(path, where, "assert must be a list of assertions")
        return {}
    out: dict[str, Any] = {}
    ctx = ctx or _AssertContext(variables=variables)
    for i, item in enumerate(raw):
        apath = path + (i,)
        if isinstance(item, dict) and "$ref" in item and ctx.refs is not None:
            item = ctx.refs.resolve(item, apath, where)
            if item is None:
                problems.count("refused")
                continue
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            problems.error(apath, where, f"assertion #{i + 1} must be a mapping with a 'type', not {item!r}")
            continue
        check_keys(problems, apath, f"{where}: assertion #{i + 1}", item, _ASSERT_KEYS)
        kind = item["type"]
        for key, why in (("weight", "each assertion counts once here"),
                         ("provider", "the judge model is the run's (judge_model / --judge-model)"),
                         ("rubricPrompt", "evaljobs' judge prompt is used")):
            if item.get(key) is not None and not (key == "weight" and item[key] == 1):
                problems.warn(apath + (key,), where, f"assertion #{i + 1} ({kind}): {key} is not used by "
                                                     f"evaljobs ({why}); ignored")
        value = item.get("value")
        missing_at, bad_at = fill_at or (apath, where), (apath, where)
        if kind not in _CODE_TYPES:  # code is not a template (its own {{ }} and quotes are code)
            if isinstance(value, str):
                value = _fill(value, variables, problems, missing_at, bad_at, f"assertion '{kind}'")
            elif isinstance(value, list):
                value = [_fill(v, variables, problems, missing_at, bad_at, f"assertion '{kind}'")
                         if isinstance(v, str) else v for v in value]
        label = f"{where}: assertion #{i + 1} ({kind})"
        try:
            if _external(kind, value, item, out, ctx, label) or _transformed(kind, value, item, out, ctx, label):
                problems.count("external")
            else:
                _assertion(kind, value, item, out)
                problems.count("mapped")
        except _Unsupported as exc:
            problems.count("refused")
            problems.unsupported(apath, where, f"assertion type {kind!r} {exc.reason}",
                                 "remove it")
            if problems.lenient:
                out.setdefault("assertions", []).append({"kind": "refused", "label": label,
                                                         "reason": f"{kind} {exc.reason}"})
        except _BadValue as exc:
            problems.error(apath, where, f"assertion {kind!r}: {exc.reason}")
    return out


_CODE_TYPES = ("javascript", "not-javascript", "python", "not-python")


@dataclass
class _AssertContext:
    """What an assertion needs besides itself: the test's vars, its transform, the config's folder."""

    variables: dict[str, Any]
    transform: str | None = None
    base: str = "."
    refs: "_Refs | None" = None

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


class _Refs:
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


def _options_transform(test: dict, path: tuple, where: str, problems: Problems) -> str | None:
    options = test.get("options")
    if options is None:
        return None
    if not isinstance(options, dict):
        problems.error(path + ("options",), where, "options must be a mapping")
        return None
    for key in options:
        if key != "transform":
            problems.warn(path + ("options", key), where, f"options.{key} is not used by evaljobs; ignored")
    transform = options.get("transform")
    if transform is not None and (not isinstance(transform, str) or not transform.strip()):
        problems.error(path + ("options", "transform"), where,
                       f"options.transform must be a JavaScript expression (a string), not {transform!r}")
        return None
    return transform


def _external(kind: str, value: Any, item: dict, out: dict[str, Any], ctx: _AssertContext, label: str) -> bool:
    """javascript / python / is-json with a schema: assertions run by ``evaljobs.evaluation.assertions``."""
    negate = kind.startswith("not-")
    base_kind = kind[4:] if negate else kind
    entry: dict[str, Any]
    if base_kind == "javascript":
        if not isinstance(value, str) or not value.strip():
            raise _BadValue(f"value must be JavaScript code (a string), not {value!r}")
        if value.startswith("file://"):
            raise _Unsupported("from a file:// module cannot be run by evaljobs (inline JavaScript is)")
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
    out.setdefault("assertions", []).append(entry)
    return True


def _transformed(kind: str, value: Any, item: dict, out: dict[str, Any], ctx: _AssertContext, label: str) -> bool:
    """A built-in assertion on a transformed output: the native checks, run after the transforms."""
    transforms = ctx.transforms(item)
    if not transforms:
        return False
    if kind in ("llm-rubric", "latency"):
        raise _Unsupported("with a transform cannot be graded by evaljobs (the judge and the latency see "
                           "the answer as it came)")
    checks: dict[str, Any] = {}
    _assertion(kind, value, item, checks)
    out.setdefault("assertions", []).append({"kind": "builtin", "expect": checks, "transforms": transforms,
                                             "label": label})
    return True


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
    if kind == "equals":
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise _Unsupported("with a non-text value (deep JSON equality) cannot be graded by evaljobs")
        add("regex", rf"\A\s*{esc(str(value))}\s*\Z")
    elif kind == "not-equals":
        add("regex", rf"\A(?!\s*{esc(one())}\s*\Z)")
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
        pattern = one()
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _BadValue(f"regex {pattern!r} does not compile in Python: {exc}") from None
        add("regex", pattern if kind == "regex" else _nowhere(pattern))
    elif kind == "starts-with":
        add("regex", rf"\A\s*{esc(one())}")
    elif kind == "not-starts-with":
        add("regex", rf"\A(?!\s*{esc(one())})")
    elif kind in ("is-json", "not-is-json"):
        if value is not None:
            raise _Unsupported("with a JSON schema cannot be graded by evaljobs")
        add("regex", JSON_REGEX if kind == "is-json" else r"\A(?!\s*(?:\{[\s\S]*\}|\[[\s\S]*\])\s*\Z)")
    elif kind == "llm-rubric":
        rubric = one()
        out["judge"] = f"{out['judge']}\n{rubric}" if out.get("judge") else rubric
    elif kind == "similar":
        raise _Unsupported("needs an embedding model to compare meanings, which evaljobs does not have "
                           "(write the expected phrases as icontains, or a rubric as llm-rubric)")
    elif kind == "cost":
        raise _Unsupported("compares promptfoo's price of one call with a threshold; evaljobs reports the "
                           "cost of each pair but does not grade it")
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


def _merge(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
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
