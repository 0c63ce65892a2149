"""promptfoo configs (``promptfooconfig.yaml``) as native catalog data.

Every prompt × every test becomes one scenario, keyed
``<prompt id>.<test>`` where the prompt id is its ``id``/``label`` (or
``prompt-<n>``) and the test part is its ``description`` slugged (or
``test-<n>``); both are stable as long as the config's ids and descriptions
are. Each prompt is a native group. ``vars`` fill the prompt's Nunjucks template
(:mod:`.promptfoo_templates`), list and ``file://`` glob vars run the test once
per value (:mod:`.promptfoo_tests`), ``defaultTest`` vars and asserts are merged
into every test, and the test's description is kept as the scenario's notes.

Prompts may be strings, ``{id|label, raw}`` objects, a ``{file://path: label}``
mapping or ``file://`` references relative to the config: ``.txt``/``.md``
(several prompts separated by a line ``---``), ``.json``/``.yaml`` (a chat:
a list of ``{role, content}``). A prompt string holding a JSON chat is a chat.

Every test is graded as promptfoo grades it (``runAssertions``/``AssertionsResult``):
its assertions alone, as a weighted list (``expect.weighted``: each entry's score
and weight, an ``assert-set`` a nested list, the test's ``threshold``); a test
with no assertions passes. Each assertion is one entry
(:mod:`.promptfoo_assertions`): exact ``equals``/``starts-with``, case-sensitive
``contains`` as escaped regexes, ``regex`` with JavaScript's semantics
(:mod:`.js_regex`), ``is-json``/``contains-json``/``levenshtein``/``rouge-n``/``bleu``
computed as promptfoo computes them (``evaljobs.evaluation.promptfoo_checks``),
``llm-rubric`` for the judge, ``latency``.

Run outside Python's graders (``evaljobs.evaluation.assertions``): ``javascript`` (inline,
or a ``file://x.js[:function]`` module whose source is stored in the catalog; in Node),
``python`` (inline or ``file://x.py[:function]``, whose source is stored in the catalog;
in a subprocess), ``is-json`` with a schema (``jsonschema``), and any built-in assertion
on a transformed output: the test's ``options.transform`` (or ``defaultTest``'s) then
the assertion's own ``transform`` run in Node first, as promptfoo applies them.

``$ref: '#/assertionTemplates/<name>'`` (any JSON pointer into the same file)
is replaced by what it points to; siblings of ``$ref`` refine it.

Refused, with the reason (docs/catalogs.md has the table): ``similar`` (needs an
embedding model), ``cost`` (not graded per pair), ``file://`` transforms, an
``llm-rubric`` with a ``rubricPrompt`` or a transform, unknown types, template
filters evaljobs does not render: an error naming the file, line, test and what,
or under ``--lenient`` skipped with a warning — the test that lost it is then
not gradable, never graded on what is left. ``providers`` are ignored (choose
models with ``-m``), with a warning.

YAML is read as YAML 1.2, as promptfoo reads it: ``body: Yes`` is the text "Yes".
"""
from __future__ import annotations

import copy
import glob
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import yaml

from evaljobs.catalog import yaml12
from evaljobs.catalog.importers.promptfoo_assertions import (
    AssertContext,
    Refs,
    convert_assertions,
    fill,
    options_transform,
)
from evaljobs.catalog.importers.promptfoo_templates import check_template, needs_engine
from evaljobs.catalog.importers.promptfoo_tests import Source, combinations, raw_vars, read_tests
from evaljobs.catalog.importers.shared import Problems, check_keys, key_part, read_text, slug

_TOP_KEYS = ("description", "prompts", "tests", "defaultTest", "assertionTemplates")
_IGNORED_TOP = ("providers", "outputPath", "evaluateOptions", "env", "sharing", "commandLineOptions",
                "writeLatestResults", "tags", "metadata", "$schema", "derivedMetrics")
_TEST_KEYS = ("description", "vars", "assert", "threshold", "metadata", "options")
#: promptfoo's own test keys (TestCaseSchema, src/types/index.ts): any other key of a test is dropped by its
#: schema (a z.object, not strict), e.g. the ``type: assert-set`` of promptfoo/examples/french-greeting-test.
_PROMPTFOO_TEST_KEYS = _TEST_KEYS + ("provider", "providers", "prompts", "providerOutput",
                                     "assertScoringFunction")
_DEFAULT_TEST_KEYS = ("vars", "assert", "threshold", "options", "metadata")
_PROMPT_FILE_TEXT = (".txt", ".md", ".prompt", ".j2", ".njk")
_PROMPT_FILE_CHAT = (".json", ".yaml", ".yml")

def convert_promptfoo(data: Any, problems: Problems) -> dict[str, Any]:
    """A promptfoo config as native catalog data (problems collected in ``problems``)."""
    base = os.path.dirname(os.path.abspath(problems.source))
    problems.count_refusals = True  # every part dropped under --lenient is counted as refused
    for key in data:
        if key in _IGNORED_TOP:
            problems.warn((key,), "", f"{key!r} is ignored by evaljobs"
                          + ("; choose the models with -m" if key == "providers" else "")
                          + (" (named metrics do not change a verdict)" if key == "derivedMetrics" else ""))
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
    tests = read_tests(data.get("tests"), problems, base)

    default_vars = raw_vars(default.get("vars"), problems, ("defaultTest", "vars"), "defaultTest")
    refs = Refs(data, problems)
    converted = []
    for source in tests:
        path, test = source.path, source.test
        raw = dict(default_vars)
        raw.update(raw_vars(test.get("vars"), problems, path + ("vars",), source.where))
        runs = combinations(raw, problems, path + ("vars",), source.where, base)
        for n, variables in enumerate(runs, 1):
            converted.append(_test(source, default, variables, problems, base, refs))
            if len(runs) > 1:  # promptfoo runs the test once per combination of list/glob values
                converted[-1].key = f"{converted[-1].key}-{n}"
    seen: set[str] = set()
    for made in converted:  # two tests share a description: number the later ones
        if made.key in seen:
            made.key = f"{made.key}-{made.index + 1}"
        seen.add(made.key)

    groups = []
    for pid, plabel, content, parse_json, at in prompts:
        scenarios = [_scenario(pid, content, test, problems, parse_json, at) for test in converted]
        if scenarios:
            groups.append({"name": plabel, "tags": [f"prompt:{pid}"], "scenarios": scenarios})
    out["groups"] = groups
    if prompts and all(parse_json for *_, parse_json, _at in prompts) and problems.counts.get("mapped"):
        # Every prompt's answer is parsed as JSON first (in Node): no assertion runs as a native check.
        problems.counts["external"] = problems.counts.get("external", 0) + problems.counts["mapped"]
        problems.counts["mapped"] = 0
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
    #: The same assertions as a weighted list (one entry each), whether or not ``expect`` is that list.
    entries: list


def _test(source: Source, default: dict, variables: dict[str, Any], problems: Problems,
          base: str, refs: Refs) -> _Test:
    path, test, where = source.path, source.test, source.where
    label = test.get("description") if isinstance(test.get("description"), str) else None
    for key in test:
        if key not in _PROMPTFOO_TEST_KEYS:
            problems.warn(
                path + (key,),
                where,
                f"key {key!r} is not a promptfoo test key: promptfoo ignores it, and so does evaljobs",
            )
    check_keys(
        problems, path, where, {k: v for k, v in test.items() if k in _PROMPTFOO_TEST_KEYS}, _TEST_KEYS
    )
    # promptfoo merges the test's options over defaultTest's: the test's transform wins.
    transform = options_transform(test, path, where, problems)
    if transform is None:
        transform = options_transform(default, ("defaultTest",), "defaultTest", problems)
    ctx = AssertContext(variables=variables, transform=transform, base=base, refs=refs,
                        rubric_prompt=_rubric_prompt(test, default))
    # defaultTest's asserts are rendered with each test's vars; their own problems are reported once.
    # the same assertions, one weighted-list entry each (defaultTest's first, as promptfoo)
    entries: list = []
    convert_assertions(default.get("assert"), problems, ("defaultTest", "assert"), "defaultTest", variables,
                       fill_at=(path, f"{where} (defaultTest.assert)"), ctx=ctx, entries=entries)
    convert_assertions(
        test.get("assert"), problems, path + ("assert",), where, variables, ctx=ctx, entries=entries
    )
    threshold = test.get("threshold", default.get("threshold"))
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 <= threshold <= 1):
        problems.error(path + ("threshold",), where,
                       f"threshold must be a number from 0 to 1, not {threshold!r}")
        threshold = None
    lost = [p for p in problems.dropped if p and (path[:len(p)] == p or p[:len(path)] == path
                                                  or p[0] == "defaultTest")]
    if lost and not any(e.get("kind") == "refused" for e in entries):
        entries.append({"kind": "refused", "label": where,
                        "reason": f"part of the test was dropped under --lenient ({_path_text(lost[0])})"})
    # Every test is graded as promptfoo grades it (runAssertions / AssertionsResult, src/assertions/index.ts):
    # its assertion list alone, each assertion's own score and weight, the test's threshold. No criterion of
    # evaljobs' own (such as "an answer came back") counts, and a test with no assertions passes.
    expect = {"weighted": True, "assertions": entries}
    if threshold is not None:
        expect["threshold"] = float(threshold)
    return _Test(
        index=source.index,
        key=slug(label or "") or source.name,
        path=path,
        where=where,
        description=label,
        variables=variables,
        expect=expect,
        threshold=threshold,
        tags=_metadata_tags(test.get("metadata")),
        entries=entries,
    )


def _rubric_prompt(test: dict, default: dict) -> str | None:
    """Where the test's ``options.rubricPrompt`` comes from (promptfoo merges the test's options over
    defaultTest's), or ``None``."""
    for options, where in ((test.get("options"), "options.rubricPrompt"),
                           (default.get("options"), "defaultTest's options.rubricPrompt")):
        if isinstance(options, dict) and options.get("rubricPrompt") is not None:
            return where
    return None


def _scenario(pid: str, content: Any, test: _Test, problems: Problems, parse_json: bool = False,
              at: tuple[tuple, str] | None = None) -> dict[str, Any]:
    """One prompt x one test (``parse_json``: the prompt asks for a JSON-schema answer, which promptfoo's
    provider parses before the assertions see it: they get the parsed value here too; ``at``: where the prompt
    is written, blamed once for a template evaljobs cannot render whatever the vars)."""
    scenario: dict[str, Any] = {"key": f"{pid}.{test.key}"}
    blame, what = (test.path, test.where), f"prompt '{pid}'"
    texts = [content] if isinstance(content, str) else [m["content"] for m in content]
    # A refusal that does not depend on the vars (an unknown filter, a syntax error) is reported once, at the
    # prompt; one that does (``load`` of a var that is not JSON) at the test whose vars it is.
    bad_at = at if at and any(needs_engine(t) and check_template(t) for t in texts) else blame
    dropped = len(problems.dropped)
    if isinstance(content, str):
        rendered = fill(content, test.variables, problems, blame, bad_at, what)
        # promptfoo's OpenAI provider sends a prompt that parses as JSON as the messages (parseChatPrompt): a
        # prompt that becomes a JSON chat once its vars are in is a chat.
        chat = _chat(rendered)
        scenario["messages" if chat else "prompt"] = chat or rendered
    else:
        scenario["messages"] = [dict(m, content=fill(m["content"], test.variables, problems, blame, bad_at,
                                                      what)) for m in content]
    # each scenario owns its data
    entries = _parsed(test.entries) if parse_json else copy.deepcopy(test.entries)
    if len(problems.dropped) > dropped:  # the prompt itself could not be rendered (--lenient)
        entries.append({"kind": "refused", "label": test.where, "reason": f"{what} could not be rendered"})
    scenario["expect"] = dict(test.expect, assertions=entries)
    if test.tags:
        scenario["tags"] = list(test.tags)
    if test.description:
        scenario["notes"] = test.description
    return scenario


#: promptfoo's OpenAI provider, for a ``response_format`` of type ``json_schema``: ``output =
#: JSON.parse(output)`` when it parses (the text is kept when it does not).
PARSE_JSON = (
    "typeof output === 'string' ? (() => { try { return JSON.parse(output); } catch (e) { return output; } "
    "})() : output"
)


def _parsed(entries: list) -> list:
    """Weighted entries that see the parsed answer: a JSON parse leads every transform chain (in Node)."""
    out = copy.deepcopy(entries)
    for entry in out:
        kind = entry.get("kind")
        if kind == "set":
            entry["assertions"] = _parsed(entry.get("assertions") or [])
        elif kind not in ("judge", "latency", "cost", "refused"):
            # the judge, the latency and the cost see the answer as it came
            entry["transforms"] = [PARSE_JSON] + list(entry.get("transforms") or [])
    return out


def _prompt_config(config: Any, problems: Problems, path: tuple, where: str) -> bool:
    """A prompt's ``config`` (provider options): only a JSON-schema ``response_format`` changes a verdict."""
    if config is None:
        return False
    if not isinstance(config, dict):
        problems.error(path + ("config",), where, "config must be a mapping of provider options")
        return False
    for key in config:
        if key != "response_format":
            problems.warn(
                path + ("config", key),
                where,
                f"config.{key} is a provider option evaljobs does not send; ignored",
            )
    fmt = config.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        problems.warn(path + ("config", "response_format"), where,
                      "config.response_format is not sent to the model (ask for JSON in the prompt); the "
                      "answer is parsed as JSON before the assertions, as promptfoo's provider does")
        return True
    if fmt is not None:
        problems.warn(
            path + ("config", "response_format"),
            where,
            "config.response_format is not sent to the model; ignored",
        )
    return False


# --------------------------------------------------------------------------- prompts


def _prompts(raw: Any, problems: Problems, base: str) -> list[tuple[str, str, Any, bool, tuple[tuple, str]]]:
    """``(id, label, content, parse_json, (path, where))`` per prompt; content is a string or a list of chat
    messages."""
    if raw is None:
        problems.error((), "", "missing 'prompts'")
        return []
    # (path, text or ref, id, label, parse)
    entries: list[tuple[tuple, Any, str | None, str | None, bool]] = []
    if isinstance(raw, str):
        entries.append((("prompts",), raw, None, None, False))
    elif isinstance(raw, dict):  # {file://path or text: label}
        for ref, label in raw.items():
            label = label if isinstance(label, str) and label.strip() else None
            entries.append((("prompts", ref), ref, label, label, False))
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            path = ("prompts", i)
            if isinstance(item, str):
                entries.append((path, item, None, None, False))
            elif isinstance(item, dict):
                check_keys(problems, path, f"prompt #{i + 1}", item, ("id", "label", "raw", "config"))
                parse_json = _prompt_config(item.get("config"), problems, path, f"prompt #{i + 1}")
                ident, label, text = item.get("id"), item.get("label"), item.get("raw")
                if text is None and isinstance(ident, str) and ident.startswith("file://"):
                    text, ident = ident, None
                if not isinstance(text, str) or not text.strip():
                    problems.error(path, f"prompt #{i + 1}",
                                   "needs 'raw' (the prompt text) or a file:// 'id'")
                    continue
                label = label if isinstance(label, str) and label.strip() else None
                ident = ident if isinstance(ident, str) and ident.strip() else label
                entries.append((path, text, ident, label, parse_json))
            else:
                problems.error(path, f"prompt #{i + 1}",
                               f"must be a string or {{id, label, raw}}, not {item!r}")
    else:
        problems.error(("prompts",), "", "prompts must be a list of prompts")
        return []

    out: list[tuple[str, str, Any, bool, tuple[tuple, str]]] = []
    seen: set[str] = set()
    for n, (path, text, ident, label, parse_json) in enumerate(entries, 1):
        where = f"prompt #{n}"
        if text.startswith("file://"):
            ref = text[len("file://"):]
            # promptfoo reads a prompt path as a glob
            # (promptfoo/examples/config-separate-test-configs: prompt*.txt)
            matched = sorted(glob.glob(ref if os.path.isabs(ref) else os.path.join(base, ref)))
            refs = [os.path.relpath(m, base) for m in matched] if glob.has_magic(ref) and matched else [ref]
            for file_ref in refs:
                loaded = _prompt_file(file_ref, problems, path, where, base)
                stem = (key_part(ident or "") if len(refs) == 1 else "") or key_part(
                    os.path.splitext(os.path.basename(file_ref))[0]) or f"prompt-{n}"
                for j, content in enumerate(loaded, 1):
                    pid = stem if len(loaded) == 1 else f"{stem}-{j}"
                    shown = label if label and len(loaded) == 1 else f"{label} #{j}" if label else pid
                    out.append((pid, shown, content, parse_json, (path, where)))
        else:
            content = _chat(text) or text
            pid = key_part(ident or "") or f"prompt-{n}"
            out.append((pid, label or pid, content, parse_json, (path, where)))
    for pid, *_ in out:
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
        parts = [p.strip() for p in re.split(r"^---\s*$", text, flags=re.MULTILINE)]
        return [_chat(p) or p for p in parts if p]  # a part that is a JSON chat is a chat, as in promptfoo
    try:
        data = json.loads(text) if ext == ".json" else yaml12.load(text)
    except (ValueError, yaml.YAMLError, RecursionError) as exc:
        problems.error(path, where, f"prompt file {ref!r} is not valid {ext[1:].upper()}: "
                                    f"{(str(exc).splitlines() or ['nested too deeply'])[0]}")
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
    except (ValueError, RecursionError):
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


def _path_text(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _metadata_tags(raw: Any) -> list[str]:
    if not isinstance(raw, dict):
        return []
    return [f"{key}:{value}" for key, value in raw.items()
            if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip()]


