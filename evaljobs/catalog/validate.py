"""Catalog validation: catalog data in, a :class:`~evaljobs.catalog.model.Catalog` or every problem out.

A catalog is validated in one pass that collects *every* problem (one line
each, with file and line) so a user fixes a broken catalog in one edit, not
one error at a time. Effective values (defaults, group settings) are resolved
into each :class:`Scenario`, so consumers never need the defaults again, and
the resolved form is the canonical ``body`` that the digest covers.

Pure: no I/O. Live tools (``http`` / ``mcp``) are checked with the pure spec
checks of :mod:`evaljobs.catalog.toolspec`; an MCP tool *import* must have been
expanded (:mod:`evaljobs.tools`) before its data gets here.

Kept whole, though longer than most modules: it is one walk over the catalog
(:class:`_Context`) that carries the problem list, the key and group registries
and the line map through every level; split across modules, each part would
need all of that state and the walk would no longer read top to bottom.
"""
from __future__ import annotations

import datetime
import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from evaljobs.catalog.criteria import (
    ValueProblem,
    criterion_names,
    gateable_names,
    expect_keys,
    present_criteria,
    read_expect,
    value_keys,
    weighted_conflicts,
)
from evaljobs.catalog.criteria import criterion as criterion_named
from evaljobs.catalog.criteria import version as criteria_version
from evaljobs.catalog.criteria.base import MAX_INT, is_int, score_threshold
from evaljobs.catalog.digest import build_catalog
from evaljobs.catalog.model import (
    DEFAULT_MAX_TURNS,
    DEFAULT_PASS_THRESHOLD,
    DIAGNOSES,
    ROLES,
    Catalog,
    CatalogError,
    Expect,
    Scenario,
    Tool,
    scalar_key,
)
from evaljobs.catalog.modelspec import ModelSpecError, ProvidersConfig, parse_model_spec
from evaljobs.catalog.text import did_you_mean, escape_breaks, kind_of, quote_hint, show
from evaljobs.catalog.toolspec import LIVE_KINDS, MCP_IMPORT_NOT_EXPANDED, is_mcp_import, validate_live_spec
from evaljobs.collector import gc_paused


def parse_catalog(data: Any, *, source: str = "<catalog>", lines: dict | None = None,
                  providers: ProvidersConfig | None = None, scenario_digests: bool = False) -> Catalog:
    """Validate already-loaded catalog data.

    ``lines`` maps paths into ``data`` to 1-based line numbers, e.g.
    ``("scenarios", 0) -> 7`` and ``("scenarios", 0, "max_turns") -> 9``;
    :func:`loads_catalog` records it while reading the YAML.
    """
    with gc_paused():
        return _parse(data, source, lines or {}, providers, scenario_digests)


def _parse(data: Any, source: str, lines: dict, providers: ProvidersConfig | None,
           scenario_digests: bool = False) -> Catalog:
    ctx = _Context(source, lines, providers)
    if not isinstance(data, dict):
        ctx.add((), "", f"the top level must be a mapping with 'name' and 'scenarios', not {kind_of(data)}")
        raise CatalogError(ctx.problems)
    ctx.unknown_keys((), "", data, _CATALOG_KEYS, what="top-level key")

    name = data.get("name")
    if "name" not in data or name is None:
        ctx.add((), "", "missing 'name'; add a top-level 'name: <catalog name>'")
    elif not isinstance(name, str) or not name.strip():
        ctx.add(("name",), "", f"'name' must be a non-empty string, not {show(name)}")
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        ctx.add(("description",), "", f"'description' must be a string, not {kind_of(description)}")
        description = None

    base = dict(_BASE_SETTINGS)
    defaults = data.get("defaults")
    epochs = 1
    if isinstance(defaults, dict) and "epochs" in defaults:
        defaults = dict(defaults)
        raw_epochs = defaults.pop("epochs")
        if raw_epochs is not None:
            if not _is_int(raw_epochs) or not 1 <= raw_epochs <= MAX_EPOCHS:
                ctx.add(("defaults", "epochs"), "defaults",
                        f"epochs must be a whole number from 1 to {MAX_EPOCHS}, not {show(raw_epochs)}")
            else:
                epochs = raw_epochs
    base.update(ctx.settings_block(("defaults",), "defaults", defaults))

    scenarios: list[Scenario] = []
    entries = 0
    raw_list = data.get("scenarios")
    if raw_list is not None and not isinstance(raw_list, list):
        ctx.add(("scenarios",), "", f"'scenarios' must be a list of scenarios, not {kind_of(raw_list)}")
    elif raw_list:
        entries += len(raw_list)
        for i, raw in enumerate(raw_list):
            ctx.scenario(scenarios, ("scenarios", i), raw, f"scenario #{i + 1}", base, None, ())

    groups = data.get("groups")
    if groups is not None and not isinstance(groups, list):
        ctx.add(("groups",), "", f"'groups' must be a list of groups, not {kind_of(groups)}")
    elif groups:
        entries += ctx.groups(scenarios, groups, base)

    malformed = (raw_list is not None and not isinstance(raw_list, list)) or (
        groups is not None and not isinstance(groups, list))
    if entries == 0 and not malformed:
        ctx.add(("scenarios",) if "scenarios" in data else (), "",
                "no scenarios; add at least one under 'scenarios' (or under a group's 'scenarios')")
    if ctx.problems:
        raise CatalogError(ctx.problems)
    assert isinstance(name, str)  # else a problem was added above
    return build_catalog(name.strip(), description or "", scenarios, source, epochs=epochs,
                         scenario_digests=scenario_digests)


def catalog_from_body(body: dict, source: str = "<snapshot>") -> Catalog:
    """Rebuild a catalog from a stored ``Catalog.body`` (a body is itself a valid catalog), keeping each
    scenario's digest (``Catalog.scenario_digests``: a worker stamps every result row with it)."""
    return parse_catalog(body, source=source, scenario_digests=True)


_CATALOG_KEYS = ("name", "description", "defaults", "scenarios", "groups")
#: The settings' own keys; the keys criteria declare as settings come after them (``_setting_keys``).
_OWN_SETTING_KEYS = ("system", "temperature", "max_turns", "criteria", "pass_threshold", "judge_model",
                     "seed")
_GROUP_KEYS = ("name", "tags", "defaults", "scenarios")
_OWN_SCENARIO_KEYS = ("key", "prompt", "messages", "tools", "expect", "tags", "notes", "group")
_TOOL_KEYS = ("name", "description", "parameters", "returns", "returns_by", "http", "mcp")
#: The keys of ``expect`` that are no criterion's (they say how the criteria combine); the criteria's own
#: come first (``expect_keys``).
_OWN_EXPECT_KEYS = ("gate", "weighted", "threshold", "diagnose")
_MESSAGE_KEYS = ("role", "content", "name")

_BASE_SETTINGS: dict[str, Any] = {"system": None, "temperature": None, "max_turns": DEFAULT_MAX_TURNS,
                                  "criteria": None, "pass_threshold": DEFAULT_PASS_THRESHOLD,
                                  "judge_model": None, "weights": None, "seed": None}


def _setting_keys() -> tuple[str, ...]:
    """Every settings key: the settings' own, then the criteria's (``weights`` last, as it always was)."""
    return _key_lists(criteria_version())[0]


def _scenario_keys() -> tuple[str, ...]:
    return _key_lists(criteria_version())[1]


def _expect_keys() -> tuple[str, ...]:
    return _key_lists(criteria_version())[2]


@functools.lru_cache(maxsize=4)
def _key_lists(version: int) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The settings, scenario and expect keys for one version of the criteria's table (asked per scenario)."""
    settings = _OWN_SETTING_KEYS + tuple(k.name for k in value_keys(settings_only=True)) + ("weights",)
    expect = expect_keys() + _OWN_EXPECT_KEYS
    return settings, _OWN_SCENARIO_KEYS + settings, expect

_KEY_RE = re.compile(r"[A-Za-z0-9_.:/-]+")


def path_safe_key(key: str) -> bool:
    """Whether ``key`` is its own page's address: no part between slashes that is empty, '.' or '..'.

    Browsers (and the URL standard) resolve ``z/../victim`` to ``victim`` and ``..`` to the run's
    page before asking, and no percent-encoding escapes that (``%2E`` is a dot to them too).
    """
    return all(part not in ("", ".", "..") for part in key.split("/"))


def safe_key(key: str) -> str:
    """``key`` with its empty, '.' and '..' parts dropped (a suggestion; the importers use it)."""
    return "/".join(part for part in key.split("/") if part not in ("", ".", "..")) or "scenario"


_TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_DEPTH = 100
_MAX_INT = MAX_INT
#: The most epochs a catalog (or ``--epochs``) may ask for: each epoch is a full pass of provider calls.
MAX_EPOCHS = 1000


class _Bad(Exception):
    """One problem with a value; ``subpath`` points inside it (for a better line number)."""

    def __init__(self, message: str, subpath: tuple = ()):
        super().__init__(message)
        self.message = message
        self.subpath = subpath


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_is_int = is_int


def _check_system(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{name} must be a string (the system prompt), not {kind_of(value)}")
    return value


def _check_temperature(name: str, value: Any) -> float:
    if not _is_number(value) or not (0 <= value <= 2):
        raise _Bad(f"{name} must be a number from 0 to 2, not {show(value)}")
    return float(value)


def _check_seed(name: str, value: Any) -> int:
    if not _is_int(value) or not (0 <= value < 2**63):
        raise _Bad(f"{name} must be an integer from 0 to 2^63-1 (the provider's sampling seed), "
                   f"not {show(value)}")
    return value


def _check_max_turns(name: str, value: Any) -> int:
    if not _is_int(value) or value < 1:
        raise _Bad(f"{name} must be an integer >= 1, not {show(value)}")
    return value


def _check_threshold(name: str, value: Any) -> float:
    try:
        return score_threshold(name, value)
    except ValueProblem as exc:
        raise _Bad(str(exc)) from None


def _check_criteria(name: str, value: Any) -> tuple[str, ...]:
    known = criterion_names()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(c, str) for c in items):
        raise _Bad(f"{name} must be a list of criterion names ({', '.join(known)}), not {show(value)}")
    if not items:
        raise _Bad(f"{name} is empty; list at least one criterion, "
                   f"or omit it to apply every one that applies")
    unknown = [item for item in items if item not in known]
    if len(unknown) == 1:
        raise _Bad(f"{name}: unknown criterion {unknown[0]!r}{did_you_mean(unknown[0], known, 'known')}")
    if unknown:
        raise _Bad(f"{name}: unknown criteria {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
    return tuple(c for c in known if c in items)


def _check_weights(name: str, value: Any) -> tuple[tuple[str, float], ...]:
    """``{criterion: weight}``: how much each criterion counts in the score (default 1 each)."""
    if not isinstance(value, dict) or not value:
        raise _Bad(f"{name} must map criterion names to weights, e.g. {{contains: 2, llm_judge: 1}}, "
                   f"not {show(value)}")
    out = []
    known = criterion_names()
    for criterion, weight in value.items():
        if criterion not in known:
            raise _Bad(
                f"{name}: unknown criterion {criterion!r}{did_you_mean(str(criterion), known, 'known')}"
            )
        if not _is_number(weight) or not math.isfinite(weight) or weight < 0:
            raise _Bad(f"{name}.{criterion} must be a number >= 0, not {show(weight)}")
        out.append((criterion, float(weight)))
    if not any(w > 0 for _, w in out):
        raise _Bad(f"{name}: at least one weight must be above 0")
    return tuple(sorted(out))


_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "system": _check_system, "temperature": _check_temperature, "max_turns": _check_max_turns,
    "criteria": _check_criteria, "pass_threshold": _check_threshold, "weights": _check_weights,
    "seed": _check_seed,
}


def _check(name: str, value: Any) -> Any:
    """A setting's value checked by its own check, or by the criterion that declares it."""
    own = _CHECKS.get(name)
    if own is not None:
        return own(name, value)
    key = next(k for k in value_keys() if k.name == name)
    try:
        return key.check(name, value)
    except ValueProblem as exc:
        raise _Bad(str(exc)) from None


class _Context:
    """Collects problems while walking the catalog data."""

    def __init__(self, source: str, lines: dict, providers: ProvidersConfig | None):
        self.source = source
        self.lines = lines
        self.providers = providers
        self.problems: list[str] = []
        #: Each scenario key's line (its ``where`` follows from the key: 100,000 of them are kept).
        self.keys: dict[str, int | None] = {}
        self.group_names: dict[str, int | None] = {}

    # -- reporting

    def line(self, path: tuple) -> int | None:
        while path:
            try:
                line = self.lines.get(path)
            except TypeError:  # unhashable part in a user-supplied path
                line = None
            if line is not None:
                return line
            path = path[:-1]
        return None

    def add(self, path: tuple, where: str, what: str) -> None:
        line = self.line(path)
        prefix = f"{self.source}:{line}" if line else self.source
        self.problems.append(escape_breaks(f"{prefix}: {where}: {what}" if where else f"{prefix}: {what}"))

    def unknown_keys(self, path: tuple, where: str, raw: dict, valid: tuple[str, ...],
                     what: str = "key") -> None:
        for key in raw:
            if key not in valid:
                self.add(path + (key,) if isinstance(key, str) else path, where,
                         f"unknown {what} {show(key)}{did_you_mean(key, valid, 'valid keys')}")

    # -- settings (defaults, group defaults, scenario overrides)

    def settings_block(self, path: tuple, where: str, raw: Any) -> dict[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add(path, where,
                     f"must be a mapping of settings ({', '.join(_setting_keys())}), not {kind_of(raw)}")
            return {}
        self.unknown_keys(path, where, raw, _setting_keys())
        return self.settings(path, where, raw)

    def settings(self, path: tuple, where: str, raw: dict) -> dict[str, Any]:
        """The valid, explicitly set settings in ``raw`` (``null`` means "inherit")."""
        out: dict[str, Any] = {}
        for name in _setting_keys():
            value = raw.get(name)
            if value is None:
                continue
            try:
                out[name] = self.judge_model(value) if name == "judge_model" else _check(name, value)
            except _Bad as exc:
                self.add(path + (name,), where, exc.message)
        return out

    def judge_model(self, value: Any) -> str:
        if not isinstance(value, str):
            raise _Bad(f"judge_model must be a model spec string like 'openai/gpt-4o-mini', "
                       f"not {show(value)}")
        try:
            return parse_model_spec(value, self.providers).spec
        except ModelSpecError as exc:
            raise _Bad(f"judge_model: {exc}") from None

    # -- groups and scenarios

    def groups(self, out: list[Scenario], groups: list, base: dict[str, Any]) -> int:
        entries = 0
        for g, raw in enumerate(groups):
            path = ("groups", g)
            where = f"group #{g + 1}"
            if not isinstance(raw, dict):
                self.add(path, where, f"must be a mapping with 'name' and 'scenarios', not {kind_of(raw)}")
                continue
            name = raw.get("name")
            if not isinstance(name, str) or not name.strip():
                self.add(path + ("name",) if "name" in raw else path, where,
                         "missing 'name'" if name is None
                         else f"name must be a non-empty string, not {show(name)}")
                name = None
            else:
                where = f"group '{name}'"
                if name in self.group_names:
                    first = self.group_names[name]
                    at = f" (first at line {first})" if first else ""
                    self.add(path, where, f"duplicate group name{at}; merge the two groups or rename one")
                self.group_names.setdefault(name, self.line(path))
            self.unknown_keys(path, where, raw, _GROUP_KEYS)
            tags = self.strings(path + ("tags",), where, "tags", raw.get("tags"))
            settings = dict(base)
            settings.update(self.settings_block(path + ("defaults",), f"{where}: defaults",
                                                raw.get("defaults")))
            items = raw.get("scenarios")
            if items is None:
                self.add(path, where, "missing 'scenarios'; list the group's scenarios under it")
            elif not isinstance(items, list):
                self.add(path + ("scenarios",), where, f"'scenarios' must be a list, not {kind_of(items)}")
            else:
                entries += len(items)
                for i, item in enumerate(items):
                    self.scenario(out, path + ("scenarios", i), item, f"{where}: scenario #{i + 1}",
                                  settings, name or "", tags)
        return entries

    def scenario(self, out: list[Scenario], path: tuple, raw: Any, where: str, settings: dict[str, Any],
                 group: str | None, group_tags: tuple[str, ...]) -> None:
        """Validate one scenario; append it to ``out`` when it has no problems."""
        before = len(self.problems)
        if not isinstance(raw, dict):
            self.add(path, where, f"must be a mapping with 'key' and 'prompt', not {kind_of(raw)}")
            return
        key = raw.get("key")
        if key is None:
            self.add(path, where, "missing 'key'; give every scenario a unique key like 'refund.late_order'")
        elif not isinstance(key, str) or not _KEY_RE.fullmatch(key):
            self.add(path + ("key",), where, f"key {show(key)} must be a string of letters, digits and "
                                             f"_ . : / - (quote it if YAML reads it as a number)")
        elif not path_safe_key(key):
            self.add(
                path + ("key",),
                where,
                f"key {show(key)} has an empty, '.' or '..' part between slashes; "
                f"a key is also the viewer's address of its page (a browser "
                f"would open another page): rename it, e.g. {show(safe_key(key))}",
            )
        else:
            where = f"scenario '{key}'"
            line = self.line(path)
            if key in self.keys:
                first_line = self.keys[key]
                first = f"line {first_line}" if first_line else where  # the first's where is this one
                self.add(path, where, f"duplicate key (first defined at {first}); "
                                      f"scenario keys must be unique across the catalog: rename one")
            else:
                self.keys[key] = line
        self.unknown_keys(path, where, raw, _scenario_keys())

        effective = dict(settings)
        explicit = self.settings(path, where, raw)
        messages, lifted = self.conversation(path, where, raw, explicit)
        if lifted is not None:
            explicit["system"] = lifted
        effective.update(explicit)

        tools, declared = self.tools(path + ("tools",), where, raw.get("tools"))
        if raw.get("expect") == {}:
            # it reads as "checked" and checks nothing: any non-empty answer passed with score 1.00
            # (a null `expect:` means absent, as every null key of a catalog does: a smoke scenario)
            self.add(path + ("expect",), where, "expect is empty, so any non-empty answer would pass; add a "
                                                "check (contains, regex, tools, judge, …), or remove the "
                                                "'expect' key for a smoke scenario that only needs an answer")
        expect = self.expect(path + ("expect",), where, raw.get("expect"), declared, effective, explicit)
        tags = self.strings(path + ("tags",), where, "tags", raw.get("tags"))
        notes = raw.get("notes")
        if notes is not None and not isinstance(notes, str):
            self.add(path + ("notes",), where, f"notes must be a string, not {kind_of(notes)}")
        own_group = raw.get("group")
        if own_group is not None:
            if not isinstance(own_group, str) or not own_group.strip():
                self.add(path + ("group",), where,
                         f"group must be a non-empty string, not {show(own_group)}")
            elif group is not None and own_group != group:
                self.add(path + ("group",), where, f"group is {own_group!r} but the scenario is inside group "
                                                   f"{group!r}; remove its 'group' key")
            elif group is None:
                group = own_group
        if len(self.problems) > before:
            return
        assert isinstance(key, str)  # else a problem was added above
        out.append(Scenario(
            key=key, messages=messages, system=effective["system"] or None,
            tools=tools, expect=expect, tags=tuple(sorted(set(group_tags) | set(tags))), notes=notes or "",
            group=group or None, temperature=effective["temperature"], max_turns=effective["max_turns"],
            criteria=effective["criteria"], pass_threshold=effective["pass_threshold"],
            weights=effective["weights"] or (), seed=effective["seed"],
            line=self.line(path), judge_model=effective["judge_model"]))

    def conversation(self, path: tuple, where: str, raw: dict,
                     explicit: dict[str, Any]) -> tuple[tuple[dict[str, Any], ...], str | None]:
        """The messages to send, and a leading system message lifted out of them (if any)."""
        has_prompt, has_messages = raw.get("prompt") is not None, raw.get("messages") is not None
        if has_prompt and has_messages:
            self.add(path + ("messages",), where, "give either 'prompt' or 'messages', not both")
            return (), None
        if not has_prompt and not has_messages:
            self.add(path, where, "missing 'prompt' (the user's message) or 'messages' (a conversation)")
            return (), None
        if has_prompt:
            prompt = raw["prompt"]
            if not isinstance(prompt, str):
                self.add(path + ("prompt",), where,
                         f"prompt must be a string, not {kind_of(prompt)}{quote_hint(prompt)}")
            elif not prompt.strip():
                self.add(path + ("prompt",), where, "prompt is empty; write the user's message")
            else:
                return ({"role": "user", "content": prompt},), None
            return (), None
        items = raw["messages"]
        mpath = path + ("messages",)
        if not isinstance(items, list) or not items:
            self.add(mpath, where, "messages must be a non-empty list of {role, content}"
                     + ("" if isinstance(items, list) else f", not {kind_of(items)}"))
            return (), None
        messages: list[dict[str, Any]] = []
        ok = True
        for i, item in enumerate(items):
            ipath = mpath + (i,)
            label = f"messages[{i}]"
            if not isinstance(item, dict):
                self.add(ipath, where, f"{label} must be a mapping {{role, content}}, not {kind_of(item)}")
                ok = False
                continue
            self.unknown_keys(ipath, f"{where}: {label}", item, _MESSAGE_KEYS)
            role, content = item.get("role"), item.get("content")
            if role not in ROLES:
                self.add(ipath, where, f"{label}: role must be one of {', '.join(ROLES)}, not {show(role)}")
                ok = False
            if not isinstance(content, str):
                self.add(ipath, where, f"{label}: content must be a string, not {kind_of(content)}"
                                       f"{quote_hint(content)}")
                ok = False
            elif role == "user" and not content.strip():
                self.add(ipath, where, f"{label}: user message is empty; write its content")
                ok = False
            name = item.get("name")
            if name is not None and not isinstance(name, str):
                self.add(ipath, where, f"{label}: name must be a string, not {kind_of(name)}")
                ok = False
            message = {"role": role, "content": content}
            if name is not None:
                message["name"] = name
            messages.append(message)
        if not ok:
            return (), None
        lifted = None
        if messages[0]["role"] == "system":
            if raw.get("system") is not None:
                self.add(mpath, where, "has both 'system' and a leading system message; keep one")
                return (), None
            # Further system messages stay in the conversation as written (OpenAI evals samples have
            # several); a provider that takes one system prompt gets them merged by its adapter.
            lifted = messages.pop(0)["content"]
        if not any(m["role"] == "user" for m in messages):
            self.add(mpath, where, "messages need at least one user message")
            return (), None
        return tuple(messages), lifted

    def tools(self, path: tuple, where: str, raw: Any) -> tuple[tuple[Tool, ...], list[str]]:
        """The valid tools, and every declared name (so expectations are checked even if a tool is bad)."""
        if raw is None:
            return (), []
        if not isinstance(raw, list):
            self.add(path, where, f"tools must be a list of tools, not {kind_of(raw)}")
            return (), []
        tools: list[Tool] = []
        names: dict[str, int] = {}
        for i, item in enumerate(raw):
            tpath = path + (i,)
            twhere = f"{where}: tool #{i + 1}"
            if not isinstance(item, dict):
                self.add(tpath, twhere, f"must be a mapping with 'name', not {kind_of(item)}")
                continue
            if is_mcp_import(item):
                self.add(tpath, twhere, MCP_IMPORT_NOT_EXPANDED)
                only = item.get("only")  # its tools exist: do not also report expectations naming them
                for listed in only if isinstance(only, list) else ():
                    if isinstance(listed, str):
                        names.setdefault(listed, i + 1)
                continue
            before = len(self.problems)
            name = item.get("name")
            if not isinstance(name, str) or not _TOOL_NAME_RE.fullmatch(name):
                self.add(tpath + ("name",) if "name" in item else tpath, twhere,
                         "missing 'name'" if name is None else
                         f"name {show(name)} must be 1-64 letters, digits, '_' or '-'")
            else:
                twhere = f"{where}: tool '{name}'"
                if name in names:
                    self.add(tpath, twhere, f"duplicate tool name (also tool #{names[name]}); "
                                            f"tool names must be unique within a scenario")
                names.setdefault(name, i + 1)
            self.unknown_keys(tpath, twhere, item, _TOOL_KEYS)
            description = item.get("description")
            if description is not None and not isinstance(description, str):
                self.add(tpath + ("description",), twhere,
                         f"description must be a string, not {kind_of(description)}")
            parameters = item.get("parameters")
            if parameters is None:
                parameters = {"type": "object", "properties": {}}
            elif not isinstance(parameters, dict):
                self.add(tpath + ("parameters",), twhere,
                         f"parameters must be a JSON-schema object (a mapping), not {kind_of(parameters)}")
            else:
                parameters = self.json_value(tpath + ("parameters",), twhere, "parameters", parameters)
                if isinstance(parameters, dict) and parameters.get("type", "object") != "object":
                    self.add(tpath + ("parameters", "type"), twhere,
                             f"parameters.type must be 'object' (function arguments are an object), "
                             f"not {show(parameters.get('type'))}")
            returns = self.json_value(tpath + ("returns",), twhere, "returns", item.get("returns"))
            returns_by = self.returns_by(tpath + ("returns_by",), twhere, item.get("returns_by"), parameters)
            live = self.live_spec(tpath, twhere, item)
            if len(self.problems) == before:
                assert isinstance(name, str)  # else a problem was added above
                tools.append(Tool(name=name, description=description or "", parameters=parameters,
                                  returns=returns, returns_by=returns_by, **live))
        return tuple(tools), list(names)

    def live_spec(self, path: tuple, where: str, item: dict) -> dict[str, Any]:
        """``{"http": spec}`` or ``{"mcp": spec}`` for a live tool (answered by its endpoint), else ``{}``."""
        kinds = [kind for kind in LIVE_KINDS if item.get(kind) is not None]
        if not kinds:
            return {}
        if len(kinds) > 1:
            self.add(path, where, "give either 'http' or 'mcp', not both")
            return {}
        kind = kinds[0]
        canned = [key for key in ("returns", "returns_by") if item.get(key) is not None]
        if canned:
            self.add(path + (canned[0],), where, f"a live tool is answered by its {kind} endpoint; "
                                                 f"remove '{canned[0]}' (or '{kind}' to keep it canned)")
        for problem in validate_live_spec(kind, item[kind]):
            self.add(path + (kind,), where, problem)
        return {kind: self.json_value(path + (kind,), where, kind, item[kind])}

    def returns_by(self, path: tuple, where: str, raw: Any,
                   parameters: Any) -> dict[str, dict[str, Any]] | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            self.add(path, where, "returns_by must map argument name -> {argument value: result}, "
                                  f"not {kind_of(raw)}")
            return None
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        out: dict[str, dict[str, Any]] = {}
        for arg, table in raw.items():
            apath = path + (arg,) if isinstance(arg, str) else path
            if not isinstance(arg, str):
                self.add(apath, where, f"returns_by: argument name {show(arg)} must be a string")
                continue
            if isinstance(properties, dict) and properties and arg not in properties:
                self.add(apath, where, f"returns_by: {arg!r} is not a parameter of this tool "
                                       f"(parameters: {', '.join(map(str, properties))})")
                continue
            if not isinstance(table, dict):
                self.add(apath, where,
                         f"returns_by.{arg} must map argument value -> result, not {kind_of(table)}")
                continue
            inner: dict[str, Any] = {}
            for value, result in table.items():
                if value is not None and not isinstance(value, (str, int, float, bool)):
                    self.add(apath, where, f"returns_by.{arg}: argument value {show(value)} must be a "
                                           f"string or number")
                    continue
                key = value if isinstance(value, str) else scalar_key(value)
                if key in inner:
                    self.add(apath, where, f"returns_by.{arg}: value {key!r} is listed twice")
                    continue
                inner[key] = self.json_value(apath + (value,), where, f"returns_by.{arg}.{key}", result)
            out[arg] = inner
        return out or None

    def expect(self, path: tuple, where: str, raw: Any, declared: list[str],
               effective: dict[str, Any], explicit: dict[str, Any]) -> Expect:
        own: dict[str, Any] = {}
        if raw is not None and not isinstance(raw, dict):
            self.add(path, where,
                     f"expect must be a mapping ({', '.join(_expect_keys())}), not {kind_of(raw)}")
            raw = None
        raw = raw or {}
        self.unknown_keys(path, f"{where}: expect", raw, _expect_keys())
        for key in value_keys():
            name = key.name
            if raw.get(name) is None:
                continue
            try:
                own[name] = key.check(f"expect.{name}", raw[name])
            except ValueProblem as exc:
                self.add(path + (name,), where, str(exc))
                continue
            if name in explicit and explicit[name] != own[name]:
                self.add(path + (name,), where, f"{name} is set both on the scenario ({explicit[name]}) and "
                                                f"in expect ({own[name]}); keep one")
        fields = read_expect(self, path, where, raw, declared)
        weighted, threshold = raw.get("weighted", False), raw.get("threshold")
        if not isinstance(weighted, bool):
            self.add(
                path + ("weighted",), where, f"expect.weighted must be true or false, not {show(weighted)}"
            )
            weighted = False
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                      or not 0 <= threshold <= 1):
            self.add(
                path + ("threshold",),
                where,
                f"expect.threshold must be a number from 0 to 1, not {show(threshold)}",
            )
            threshold = None
        # the keys of every criterion but the one grading weighted lists; empty lists: a snapshot's body
        conflicts = (*weighted_conflicts(), "gate") if weighted else ()
        mixed = [k for k in conflicts if raw.get(k) not in (None, [])]
        if mixed:
            self.add(
                path + ("weighted",),
                where,
                f"a weighted expect is graded by its assertions alone; write "
                f"{', '.join(mixed)} as assertions entries or drop 'weighted'",
            )
        if threshold is not None and not weighted:
            self.add(path + ("threshold",), where, "expect.threshold applies to a weighted assertion list; "
                                                   "add 'weighted: true' or use pass_threshold")
        out = Expect(
            **fields,
            weighted=weighted,
            threshold=float(threshold) if threshold is not None else None,
            diagnose=self.diagnose(path + ("diagnose",), where, raw.get("diagnose")),
            values={name: value for name, value in ((key.name, own.get(key.name, effective.get(key.name)))
                                                    for key in value_keys()) if value is not None},
        )
        gate = raw.get("gate")
        if gate is None or gate is False:  # no gates: the expectation is complete (most scenarios)
            return out
        return replace(out, gates=self.gates(path + ("gate",), where, gate, out))

    def diagnose(self, path: tuple, where: str, raw: Any) -> tuple[str, ...]:
        names = self.strings(path, where, "expect.diagnose", raw)
        for name in names:
            if name not in DIAGNOSES:
                self.add(
                    path,
                    where,
                    f"expect.diagnose: unknown heuristic {name!r}{did_you_mean(name, DIAGNOSES, 'known')}",
                )
        return tuple(d for d in DIAGNOSES if d in names)

    def gates(self, path: tuple, where: str, raw: Any, expect: Expect) -> tuple[str, ...]:
        """``gate: true`` (every expectation written in this block) or a list of criterion names."""
        if raw is None or raw is False:
            return ()
        present = present_criteria(expect)
        gateable = gateable_names()
        if raw is True:
            return present
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            self.add(path, where, f"expect.gate must be true (every expectation is a gate) or a list of "
                                  f"criterion names ({', '.join(gateable)}), not {show(raw)}")
            return ()
        out = []
        for item in items:
            if item not in gateable:
                self.add(
                    path,
                    where,
                    f"expect.gate: unknown criterion {item!r}{did_you_mean(item, gateable, 'known')}",
                )
            elif item not in present and not criterion_named(item).gate_alone:
                self.add(
                    path,
                    where,
                    f"expect.gate names {item!r}, but this scenario expects nothing for it; "
                    f"add the expectation or remove it from gate",
                )
            elif item not in out:
                out.append(item)
        return tuple(c for c in gateable if c in out)

    def strings(self, path: tuple, where: str, what: str, raw: Any) -> tuple[str, ...]:
        """A string or a list of non-empty strings, de-duplicated (order kept)."""
        if raw is None:
            return ()
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, list):
            self.add(path, where, f"{what} must be a string or a list of strings, not {kind_of(raw)}")
            return ()
        out: list[str] = []
        for i, item in enumerate(items):
            if not isinstance(item, str) or not item.strip():
                self.add(path + (i,) if isinstance(raw, list) else path, where,
                         f"{what} entries must be non-empty strings, not {show(item)}{quote_hint(item)}")
            elif item not in out:
                out.append(item)
        return tuple(out)

    def json_value(self, path: tuple, where: str, what: str, value: Any) -> Any:
        try:
            return _json(value, what, (), 0)
        except _Bad as exc:
            self.add(path + exc.subpath, where, exc.message)
            return None


def _json(value: Any, what: str, subpath: tuple, depth: int) -> Any:
    """``value`` as plain JSON data (tuples become lists, scalar keys strings); else ``_Bad``."""
    if depth > _MAX_DEPTH:
        raise _Bad(f"{what} is nested more than {_MAX_DEPTH} levels deep", subpath)
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        if not -_MAX_INT <= value <= _MAX_INT:
            raise _Bad(f"{what} is an integer too large for JSON (beyond 64 bits); quote it", subpath)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Bad(f"{what} is {value!r}, which JSON cannot represent; use a finite number or a string",
                       subpath)
        return value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, str):
                text = key
            elif key is None:
                text = "null"
            elif isinstance(key, bool) or _is_int(key) or (isinstance(key, float) and math.isfinite(key)):
                text = json.dumps(key)
            else:
                raise _Bad(f"{what} has key {show(key)}, which is not a JSON key; quote it", subpath)
            if text in out:
                raise _Bad(f"{what} has key {text!r} twice (after converting keys to strings)", subpath)
            out[text] = _json(item, f"{what}.{text}", subpath + (key,), depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_json(item, f"{what}[{i}]", subpath + (i,), depth + 1) for i, item in enumerate(value)]
    if isinstance(value, (datetime.date, datetime.datetime)):
        raise _Bad(f"{what} is a date ({value.isoformat()}), which is not JSON; quote it: "
                   f"'{value.isoformat()}'", subpath)
    if isinstance(value, (set, frozenset)):
        raise _Bad(f"{what} is a set, which is not JSON; use a list", subpath)
    if isinstance(value, (bytes, bytearray)):
        raise _Bad(f"{what} is binary data, which is not JSON; use a (base64) string", subpath)
    raise _Bad(f"{what} is a {type(value).__name__}, which is not JSON; use strings, numbers, booleans, "
               f"null, lists and mappings", subpath)


__all__ = ["catalog_from_body", "parse_catalog"]
