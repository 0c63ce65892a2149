"""ActiveAgent evaluation files (a *suite* or a *catalog*) as native catalog data.

A suite::

    suite: support-agent
    description: optional
    groups:
      - key: billing
        name: Billing
        scenarios:
          - key: refund
            prompt: "I want a refund for order {{order_id}}"
            params: {order_id: "1234"}
            expect: {tools: [lookup_order], contains: [refund], not_contains: [internal]}
            notes: optional
            production_only: false

A catalog::

    catalog: acme-support
    name / description: optional
    products:
      - key: shop
        name: Shop
        sets:
          - key: orders
            name: Orders
            judge: "rubric for the LLM judge"       # optional, for every scenario of the set
            criteria: [contains, llm_judge]          # optional, evaljobs criterion names
            scenarios: [ ...same fields, plus tags (suites accept tags too) ]

How it maps (chosen so that converting is lossless and stable):

* A suite group, or a catalog product/set pair, becomes a native group (named
  ``Group`` / ``Product / Set``) whose tags are the group key, or the product
  and set keys.
* Scenario keys are ``<group>.<scenario>`` and ``<product>.<set>.<scenario>``:
  the foreign keys, so re-importing an edited file keeps every key stable.
* ``params`` fill ``{{name}}`` placeholders in the prompt, messages, expected
  strings and judge rubric, and are kept as tags ``param:<name>=<value>``; the
  native scenario then holds everything the foreign one meant.
* ``production_only: true`` scenarios are left out (and counted) unless
  included on purpose; included ones are tagged ``production_only``.
* Expected tools the scenario does not declare are declared without canned
  results (the agent under test — a host adapter — provides them).
* ``criteria`` are evaljobs criterion names (``contains``, ``llm_judge``...), or
  ActiveAgent criterion hashes ``{key, type: llm_judge, config: {prompt}}`` (the
  prompt becomes the judge rubric); other criterion hashes are refused with a reason.
* A set's ``judge`` is a rubric string, or ActiveAgent's mapping: ``{kind: rules}``
  (no LLM judge) or ``{kind: llm, model: provider/model, prompt: rubric}`` (``model``
  becomes the group's ``judge_model``; without a prompt the judge grades task
  completion, as ActiveAgent's ``Judge#score_task`` does).
* A product's ``agent`` and ``repository`` are kept as tags ``agent:<name>`` and
  ``repository:<name>``. The catalog's ``name`` (its display name) is the native
  name — its key when it has none — and its ``description`` the description.

Graded as ActiveAgent grades (``Diagnosis``): every expectation is a gate
(``expect.gate``), so a scenario fails on an empty answer (``run_error``), a tool
error, no expected tool called — expected tools mean *any of* them —, forbidden
content or missing content, whatever its mean score; a judge grade must reach the
pass threshold (0.7, ActiveAgent's ``PASS_THRESHOLD``) on its own. ``contains`` /
``not_contains`` follow ``Scorer.matches_pattern?``: a case-insensitive substring,
or else a case-insensitive regular expression — plain text stays ``contains``,
anything with regex syntax becomes ``patterns`` / ``forbidden_patterns``.
Its two readings of the answer's text apply too (``expect.diagnose``, see
:mod:`evaljobs.evaluation.diagnosis`): ``missing_capability`` (the answer says no
tool covers the task, unless a tool was called and the score still passes) and
``ungrounded_answer`` (tools were declared, none was called, and the answer
states an id, a date or a count), in Diagnosis's order.
"""
from __future__ import annotations

import copy
from typing import Any

from evaljobs.catalog import patterns
from evaljobs.catalog.criteria import criterion_names, enabled_by_keys, gated_alone, judged_names
from evaljobs.catalog.model import DIAGNOSES
from evaljobs.catalog.importers.shared import Problems, check_keys, key_part, render, strings

_SUITE_KEYS = ("suite", "description", "groups", "version")
_CATALOG_KEYS = ("catalog", "name", "description", "products", "version")
_GROUP_KEYS = ("key", "name", "description", "scenarios")
_PRODUCT_KEYS = ("key", "name", "description", "sets", "agent", "repository")
_SET_KEYS = ("key", "name", "description", "judge", "criteria", "scenarios")
_SCENARIO_KEYS = ("key", "prompt", "messages", "system", "tools", "expect", "expectations", "contains",
                  "not_contains", "notes", "production_only", "tags", "params", "position")
#: ActiveAgent's PASS_THRESHOLD (lib/active_agent/evals.rb).
PASS_THRESHOLD = 0.7
#: The rubric for ``judge: {kind: llm}`` without a prompt: ActiveAgent's task-completion grade.
TASK_COMPLETION = "The answer completes the task the user asked for, correctly and without inventing facts."
_REGEX_SYNTAX = set("\\^$.|?*+()[]{}")
_EXPECT_KEYS = ("tools", "contains", "not_contains", "regex", "judge")

PRODUCTION_TAG = "production_only"
_PLACEHOLDER_TOOL = "Declared by the ActiveAgent import: the agent under test provides this tool."


def convert_suite(data: Any, problems: Problems, *, include_production_only: bool = False
                  ) -> tuple[dict[str, Any], int]:
    """A suite as native data, and how many production-only scenarios were left out."""
    state = _State(problems, include_production_only)
    name = data.get("suite")
    if not isinstance(name, str) or not name.strip():
        problems.error(("suite",), "", f"'suite' must be the suite's name (a non-empty string), not {name!r}")
        name = "suite"
    _top_level(problems, data, _SUITE_KEYS)
    out: dict[str, Any] = {"name": name.strip()}
    if isinstance(data.get("description"), str):
        out["description"] = data["description"]
    groups = []
    for g, raw in _entries(problems, data, "groups", (), "suite"):
        path = ("groups", g)
        where = f"group #{g + 1}"
        gkey = _key(problems, raw, path, where)
        if gkey is None:
            continue
        where = f"group '{gkey}'"
        check_keys(problems, path, where, raw, _GROUP_KEYS)
        scenarios = [s for i, item in _entries(problems, raw, "scenarios", path, where)
                     if (s := state.scenario(item, path + ("scenarios", i), f"{where}: scenario #{i + 1}",
                                             gkey, None)) is not None]
        if scenarios:
            groups.append({"name": _label(raw, gkey), "tags": [gkey], "scenarios": scenarios})
    out["groups"] = state.unique_groups(groups)
    state.finish(out)
    return out, state.excluded


def convert_catalog(data: Any, problems: Problems, *, include_production_only: bool = False
                    ) -> tuple[dict[str, Any], int]:
    """A catalog as native data, and how many production-only scenarios were left out."""
    state = _State(problems, include_production_only)
    name = data.get("catalog")
    if not isinstance(name, str) or not name.strip():
        problems.error(("catalog",), "", f"'catalog' must be the catalog's key (a non-empty string), "
                                         f"not {name!r}")
        name = "catalog"
    _top_level(problems, data, _CATALOG_KEYS)
    display = data.get("name")
    out: dict[str, Any] = {
        "name": display.strip() if isinstance(display, str) and display.strip() else name.strip()
    }
    description = data.get("description")
    if isinstance(description, str) and description.strip():
        out["description"] = description
    groups = []
    for p, product in _entries(problems, data, "products", (), "catalog"):
        ppath = ("products", p)
        pkey = _key(problems, product, ppath, f"product #{p + 1}")
        if pkey is None:
            continue
        pwhere = f"product '{pkey}'"
        check_keys(problems, ppath, pwhere, product, _PRODUCT_KEYS)
        for s, raw_set in _entries(problems, product, "sets", ppath, pwhere):
            spath = ppath + ("sets", s)
            skey = _key(problems, raw_set, spath, f"{pwhere}: set #{s + 1}")
            if skey is None:
                continue
            swhere = f"set '{pkey}.{skey}'"
            check_keys(problems, spath, swhere, raw_set, _SET_KEYS)
            defaults: dict[str, Any] = {}
            judge, judge_model = _set_judge(problems, spath + ("judge",), swhere, raw_set.get("judge"))
            if judge_model:
                defaults["judge_model"] = judge_model
            criteria, rubric = _criteria(problems, spath + ("criteria",), swhere, raw_set.get("criteria"))
            if rubric:
                judge = f"{judge}\n{rubric}" if judge else rubric
            if criteria:
                defaults["criteria"] = criteria
            scenarios = [sc for i, item in _entries(problems, raw_set, "scenarios", spath, swhere)
                         if (sc := state.scenario(item, spath + ("scenarios", i),
                                                  f"{swhere}: scenario #{i + 1}", f"{pkey}.{skey}",
                                                  judge)) is not None]
            if scenarios:
                label = f"{_label(product, pkey)} / {_label(raw_set, skey)}"
                group: dict[str, Any] = {"name": label, "tags": [pkey, skey] + _product_tags(product)}
                if defaults:
                    group["defaults"] = defaults
                group["scenarios"] = scenarios
                groups.append(group)
    out["groups"] = state.unique_groups(groups)
    state.finish(out)
    return out, state.excluded


# --------------------------------------------------------------------------- helpers


class _State:
    def __init__(self, problems: Problems, include_production_only: bool):
        self.problems = problems
        self.include = include_production_only
        self.excluded = 0
        self.total = 0
        self.keys: dict[str, str] = {}
        self.placeholder_tools = 0

    def scenario(self, raw: Any, path: tuple, where: str, prefix: str,
                 set_judge: str | None) -> dict[str, Any] | None:
        """One scenario as native data; ``None`` if it is left out or has problems."""
        problems = self.problems
        skey = _key(problems, raw, path, where)
        if skey is None:
            return None
        key = f"{prefix}.{skey}"
        where = f"scenario '{key}'"
        self.total += 1
        if key in self.keys:
            problems.error(path + ("key",), where, f"duplicate scenario key (also {self.keys[key]}); "
                                                   f"keys must be unique within their group or set")
            return None
        self.keys[key] = where
        check_keys(problems, path, where, raw, _SCENARIO_KEYS)
        production_only = raw.get("production_only", False)
        if not isinstance(production_only, bool):
            problems.error(path + ("production_only",), where,
                           f"production_only must be true or false, not {production_only!r}")
            return None
        if production_only and not self.include:
            self.excluded += 1
            return None

        params = raw.get("params") or {}
        if not isinstance(params, dict) or not all(
                isinstance(v, (str, int, float, bool)) for v in params.values()):
            problems.error(path + ("params",), where, "params must map names to text or numbers "
                                                      "(they fill {{name}} placeholders in the prompt)")
            return None
        before = len(problems.errors)

        def fill(text: str, field: str) -> str:
            rendered, missing, bad = render(text, params)
            for name in missing:
                problems.error(path + (field,), where, f"{field} uses {{{{{name}}}}} but params has no "
                                                       f"{name!r}; add it under params")
            for expr in bad:
                problems.error(path + (field,), where, f"{field} has the template expression {expr!r}; only "
                                                       f"plain {{{{name}}}} placeholders are supported")
            return rendered

        out: dict[str, Any] = {"key": key}
        if raw.get("prompt") is not None and raw.get("messages") is not None:
            problems.error(path + ("messages",), where, "give either 'prompt' or 'messages', not both")
        elif isinstance(raw.get("prompt"), str) and raw["prompt"].strip():
            out["prompt"] = fill(raw["prompt"], "prompt")
        elif isinstance(raw.get("messages"), list) and raw["messages"]:
            out["messages"] = [dict(m, content=fill(m["content"], "messages"))
                               if isinstance(m, dict) and isinstance(m.get("content"), str) else m
                               for m in raw["messages"]]
        else:
            problems.error(path, where, "needs a 'prompt' (a non-empty string) or 'messages'")
        if raw.get("system") is not None:
            out["system"] = raw["system"]
        tools = raw.get("tools")
        if tools is not None and not isinstance(tools, list):
            problems.error(path + ("tools",), where, "tools must be a list of tool definitions")
            tools = None
        tools = list(tools or [])

        # ActiveAgent: top-level tools are expected tools
        if tools and all(isinstance(t, str) for t in tools):
            top_tools, tools = tools, []
        else:
            top_tools = None
        raw_expect = raw.get("expect", raw.get("expectations"))
        if raw_expect is None and any(raw.get(k) is not None for k in ("contains", "not_contains")) \
                or top_tools:  # Scenario.from_hash reads these at the top level too
            raw_expect = {k: v for k, v in (("tools", top_tools), ("contains", raw.get("contains")),
                                            ("not_contains", raw.get("not_contains"))) if v is not None}
        expect = self.expect(raw_expect, path + ("expect",), where, fill, tools)
        if set_judge is not None and "judge" not in expect:  # the scenario's own rubric wins
            expect["judge"] = fill(set_judge, "judge")
        _activeagent_semantics(expect)
        checks = (
            bool(expect.get("tools"))
            + len(expect.get("contains") or [])
            + len(expect.get("patterns") or [])
            + len(expect.get("not_contains") or [])
            + len(expect.get("forbidden_patterns") or [])
            + len(expect.get("regex") or [])
            + bool(expect.get("judge"))
        )
        for _ in range(checks):  # every ActiveAgent expectation maps onto a native check
            problems.count("mapped")
        if tools:
            out["tools"] = copy.deepcopy(tools)
        if expect:
            out["expect"] = expect

        tags = strings(raw.get("tags") or [])
        if tags is None:
            problems.error(path + ("tags",), where, "tags must be a string or a list of strings")
            tags = []
        tags += [f"param:{name}={_text(value)}" for name, value in params.items()]
        if production_only:
            tags.append(PRODUCTION_TAG)
        if tags:
            out["tags"] = tags
        if raw.get("notes") is not None:
            out["notes"] = raw["notes"] if isinstance(raw["notes"], str) else str(raw["notes"])
        return out if len(problems.errors) == before else None

    def expect(self, raw: Any, path: tuple, where: str, fill, tools: list) -> dict[str, Any]:
        problems = self.problems
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            problems.error(path, where, "expect must be a mapping with tools, contains, not_contains")
            return {}
        check_keys(problems, path, f"{where}: expect", raw, _EXPECT_KEYS)
        out: dict[str, Any] = {}
        for name in ("contains", "not_contains", "regex"):
            if raw.get(name) is None:
                continue
            items = strings(raw[name])
            if items is None:
                problems.error(path + (name,), where, f"expect.{name} must be a string or a list of strings")
                continue
            out[name] = [fill(item, name) for item in items] if name != "regex" else items
        if isinstance(raw.get("judge"), str):
            out["judge"] = fill(raw["judge"], "judge")
        expected = raw.get("tools")
        if expected is not None:
            items = expected if isinstance(expected, list) else [expected]
            declared = {t.get("name") for t in tools if isinstance(t, dict)}
            for item in items:
                name = item.get("name") if isinstance(item, dict) else item
                if not isinstance(name, str) or not name:
                    problems.error(path + ("tools",), where, f"expect.tools entries must be tool names or "
                                                             f"{{name, arguments}}, not {item!r}")
                    continue
                if name not in declared:
                    tools.append({"name": name, "description": _PLACEHOLDER_TOOL})
                    declared.add(name)
                    self.placeholder_tools += 1
            out["tools"] = copy.deepcopy(items)
        return out

    def unique_groups(self, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen: set[str] = set()
        for group in groups:
            if group["name"] in seen:  # two groups share a display name: the keys tell them apart
                group["name"] = f"{group['name']} ({'.'.join(group['tags'])})"
            seen.add(group["name"])
        return groups

    def finish(self, out: dict[str, Any]) -> None:
        problems = self.problems
        if self.placeholder_tools:
            problems.warn((), "", f"{self.placeholder_tools} expected tool(s) are not declared in the file; "
                                  f"declared them without canned results (the agent under test provides "
                                  f"them)")
        if not problems.errors and not out["groups"]:
            if self.total and self.excluded == self.total:
                problems.error((), "", f"all {self.total} scenarios are production_only and were left out; "
                                       f"pass --include-production-only to evaluate them")
            else:
                problems.error((), "", "no scenarios; add at least one")


def _top_level(problems: Problems, data: dict, valid: tuple[str, ...]) -> None:
    for key in data:
        if key not in valid:
            problems.warn((key,), "", f"top-level key {key!r} is not used by evaljobs; ignored")


def _entries(problems: Problems, raw: dict, name: str, path: tuple, where: str):
    """(index, mapping) for each entry of the list ``raw[name]``; reports non-mappings."""
    items = raw.get(name)
    if items is None:
        problems.error(path, where, f"missing {name!r}; list them under it")
        return
    if not isinstance(items, list):
        problems.error(path + (name,), where, f"{name!r} must be a list, not {type(items).__name__}")
        return
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            problems.error(path + (name, i), where, f"{name}[{i}] must be a mapping with 'key', not {item!r}")
            continue
        yield i, item


def _key(problems: Problems, raw: dict, path: tuple, where: str) -> str | None:
    value = raw.get("key")
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not key_part(value):
        problems.error(path + ("key",) if "key" in raw else path, where,
                       "missing 'key'" if value is None
                       else f"key must be a non-empty identifier, not {value!r}")
        return None
    return key_part(value)


def _label(raw: dict, key: str) -> str:
    name = raw.get("name")
    return name.strip() if isinstance(name, str) and name.strip() else key


def _criteria(problems: Problems, path: tuple, where: str, raw: Any) -> tuple[list[str], str | None]:
    """evaljobs criterion names, and a rubric from ActiveAgent ``llm_judge`` criterion hashes."""
    if raw is None:
        return [], None
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    rubrics: list[str] = []
    for item in items:
        if isinstance(item, dict):  # ActiveAgent's {key, type, config} criterion
            kind = item.get("type")
            prompt = (
                (item.get("config") or {}).get("prompt") if isinstance(item.get("config"), dict) else None
            )
            if kind == "llm_judge" and isinstance(prompt, str) and prompt.strip():
                rubrics.append(prompt.strip())
            else:
                problems.unsupported(path, where, f"ActiveAgent criterion {item.get('key') or kind!r} (type "
                                                  f"{kind!r}) is not mapped: only llm_judge criteria with a "
                                                  f"config.prompt are", "write it as an expectation")
            continue
        if not isinstance(item, str):
            problems.error(path, where,
                           f"criteria must be a list of criterion names ({', '.join(criterion_names())})")
            return [], None
        if item in criterion_names():
            out.append(item)
        else:
            problems.unsupported(path, where, f"criterion {item!r} is not one evaljobs grades "
                                              f"(known: {', '.join(criterion_names())})",
                                 "use a known criterion (write rubric points into 'judge')")
    if rubrics and out and judged_names().isdisjoint(out):
        out.extend(sorted(judged_names()))
    return out, "\n".join(rubrics) or None


def _set_judge(problems: Problems, path: tuple, where: str, raw: Any) -> tuple[str | None, str | None]:
    """A set's judge: a rubric string, or ``{kind: rules}`` / ``{kind: llm, model, prompt}``."""
    if raw is None:
        return None, None
    if isinstance(raw, str):
        if not raw.strip():
            problems.error(
                path, where, "judge must be a rubric (a non-empty string) or a mapping with 'kind'"
            )
        return (raw if raw.strip() else None), None
    if not isinstance(raw, dict):
        problems.error(
            path, where, f"judge must be a rubric (a string) or a mapping with 'kind', not {raw!r}"
        )
        return None, None
    kind = raw.get("kind")
    check_keys(problems, path, f"{where}: judge", raw, ("kind", "model", "judge_model", "prompt", "rubric"))
    if kind == "rules":  # rule scores only: no LLM judge
        return None, None
    if kind != "llm":
        problems.error(path + ("kind",), where, f"judge.kind must be 'rules' or 'llm', not {kind!r}")
        return None, None
    model = raw.get("model", raw.get("judge_model"))
    if model is not None and (not isinstance(model, str) or not model.strip()):
        problems.error(
            path, where, f"judge.model must be a model spec like 'openai/gpt-4o-mini', not {model!r}"
        )
        model = None
    rubric = raw.get("prompt", raw.get("rubric"))
    if rubric is not None and (not isinstance(rubric, str) or not rubric.strip()):
        problems.error(path, where, f"judge.prompt must be a rubric (a non-empty string), not {rubric!r}")
        rubric = None
    return rubric or TASK_COMPLETION, model


def _product_tags(product: dict[str, Any]) -> list[str]:
    return [f"{name}:{product[name]}" for name in ("agent", "repository")
            if isinstance(product.get(name), str) and product[name].strip()]


def _looks_like_regex(pattern: str) -> bool:
    return any(char in _REGEX_SYNTAX for char in pattern)


def _activeagent_semantics(expect: dict[str, Any]) -> None:
    """Grade as ActiveAgent's Diagnosis does: gates, any-of tools, substring-or-regex patterns."""
    for name, target in (("contains", "patterns"), ("not_contains", "forbidden_patterns")):
        items = expect.get(name) or []
        regexes = []
        for item in items:
            if _looks_like_regex(item):
                if patterns.problem(item):
                    continue  # not a valid regex: ActiveAgent matches it as a substring only
                regexes.append(item)
        if regexes:
            expect[target] = regexes
            plain = [i for i in items if i not in regexes]
            if plain:
                expect[name] = plain
            else:
                expect.pop(name)
    if expect.get("tools"):
        expect["tools_match"] = "any"
    # every check of the answer itself (not empty, tool calls succeeded) and every criterion it expects
    expect["gate"] = [*gated_alone(), *enabled_by_keys(expect)]
    expect["diagnose"] = list(DIAGNOSES)  # ActiveAgent's missing_capability and ungrounded_answer readings


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
