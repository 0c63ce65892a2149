"""A JSON Schema for catalogs, built from the definitions the validator uses.

Why generated: editors (through ``# yaml-language-server: $schema=…``) complete
and check catalogs as they are typed, and a schema written by hand would drift
from the validator. Every key list, enumeration and pattern below is the
validator's own (the key tuples, the criteria's table and their keys' schemas,
``ROLES``, the key and tool-name patterns, the live-tool keys), so a key added
there appears here.

The schema checks structure — keys, types, enumerations, ranges, required keys —
which is what an editor can show while typing. What needs the whole catalog or a
computation (unique keys, regexes that compile, model specs, expected tools that
are declared, YAML duplicate keys) is left to ``evaljobs catalog check``: a
catalog that passes the schema may still be refused, with a one-line reason.
"""
from __future__ import annotations

import json
from typing import Any

from evaljobs.catalog.criteria import criterion_names, expect_fields, gateable_names, value_keys
from evaljobs.catalog.model import (
    DIAGNOSES,
    ROLES,
)
from evaljobs.catalog.toolspec import HTTP_KEYS, HTTP_METHODS, MCP_IMPORT_KEYS, MCP_KEYS
from evaljobs.catalog.validate import (
    _CATALOG_KEYS,
    _GROUP_KEYS,
    _KEY_RE,
    _MAX_INT,
    _MESSAGE_KEYS,
    _TOOL_KEYS,
    _TOOL_NAME_RE,
    MAX_EPOCHS,
    _expect_keys,
    _scenario_keys,
    _setting_keys,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"

_DESCRIPTIONS = {
    "name": "The catalog's name (shown in reports).",
    "description": "Free text about the catalog.",
    "defaults": "Settings every scenario inherits (a group's or a scenario's own settings override them).",
    "scenarios": "The scenarios: each a conversation plus what the answer must satisfy.",
    "groups": "Scenarios that share tags and defaults.",
    "system": "The system prompt.",
    "temperature": "Sampling temperature, 0 to 2.",
    "seed": "The provider's sampling seed (sent to OpenAI-compatible APIs; the Anthropic API has none).",
    "max_turns": "Most model turns per conversation (tool calls take turns).",
    "criteria": "The criteria to grade (default: every criterion that applies).",
    "pass_threshold": "The score (0 to 1, the mean of the criteria) a result needs to pass.",
    "judge_model": "The model that grades `expect.judge` rubrics, e.g. openai/gpt-4o-mini.",
    "epochs": "How many times each scenario × model pair is evaluated (`--epochs` overrides it); "
    "catalog-wide only.",
    "key": "Unique, stable id: it identifies the scenario across runs.",
    "prompt": "The user's message (or give `messages`).",
    "messages": "A conversation to continue (or give `prompt`).",
    "tools": "Tools the model may call: canned answers, an HTTP endpoint, or an MCP server's tools.",
    "expect": "What the answer must satisfy.",
    "tags": "Labels for filtering and reports.",
    "notes": "Free text.",
    "group": "The group this scenario belongs to.",
    "weights": (
        "How much each criterion counts in the score, e.g. {contains: 2, llm_judge: 1} (default 1 each)."
    ),
    "gate": "true (every expectation here fails the scenario on its own) or the criteria that do.",
    "weighted": (
        "true: graded by `assertions` alone, as promptfoo combines a test's assertions (weighted mean score)."
    ),
    "threshold": (
        "With `weighted`: the score that passes, whatever the single assertions say (promptfoo's "
        "test threshold)."
    ),
    "diagnose": (
        "ActiveAgent's heuristics over the answer's text that fail it on their own "
        "(missing_capability, ungrounded_answer)."
    ),
}


def _with_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null: the validator treats a null value as the key being absent.

    A plain ``type`` gains ``"null"`` (so an editor's message names the real
    problem); anything else is wrapped in ``anyOf``.
    """
    kind = schema.get("type")
    if isinstance(kind, str) and "enum" not in schema and "const" not in schema:
        return {**schema, "type": [kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def _pattern(regex: Any) -> str:
    """The validator's fullmatch pattern as an anchored JSON Schema pattern."""
    return f"^(?:{regex.pattern})$"


def _object(keys: tuple[str, ...], properties: dict[str, Any], required: tuple[str, ...] = (),
            title: str | None = None) -> dict[str, Any]:
    missing = [k for k in keys if k not in properties]
    if missing:  # a key the validator knows but this module does not describe yet
        raise AssertionError(f"catalog schema: no definition for keys {missing}")
    out: dict[str, Any] = {"type": "object", "additionalProperties": False}
    if title:
        out["title"] = title
    out["properties"] = {k: ({**properties[k], "description": _DESCRIPTIONS[k]} if k in _DESCRIPTIONS
                             and "description" not in properties[k] else properties[k]) for k in keys}
    if required:
        out["required"] = list(required)
    return out


def _criteria_fields() -> dict[str, Any]:
    """The ``expect`` keys criteria read themselves (``Criterion.fields``), with their schemas."""
    return {f.name: {**f.schema, "description": f.description}
            for f in (*expect_fields(later=False), *expect_fields(later=True))}


def _criteria_keys(*, settings_only: bool = False) -> dict[str, Any]:
    """The keys criteria declare whole, each with its schema (or null) and its description."""
    return {k.name: {**_with_null(k.schema), "description": k.description}
            for k in value_keys(settings_only=settings_only)}


def catalog_schema() -> dict[str, Any]:
    """The catalog JSON Schema (draft 2020-12) as a dict."""
    criteria, gateable = criterion_names(), gateable_names()
    string = {"type": "string"}
    nonempty = {"type": "string", "minLength": 1, "pattern": r"\S"}
    strings = {"anyOf": [nonempty, {"type": "array", "items": nonempty}, {"type": "null"}]}
    headers = {"type": "object", "additionalProperties": string}
    timeout = {"type": "number", "exclusiveMinimum": 0}
    url = {"type": "string", "pattern": r"^https?://[^\s/]+"}

    setting_types: dict[str, Any] = {
        "system": _with_null(string),
        "temperature": _with_null({"type": "number", "minimum": 0, "maximum": 2}),
        "seed": _with_null({"type": "integer", "minimum": 0, "maximum": 2**63 - 1}),
        "max_turns": _with_null({"type": "integer", "minimum": 1, "maximum": _MAX_INT}),
        "criteria": _with_null(
            {
                "anyOf": [
                    {"enum": list(criteria)},
                    {"type": "array", "minItems": 1, "items": {"enum": list(criteria)}},
                ]
            }
        ),
        "pass_threshold": _with_null({"type": "number", "minimum": 0, "maximum": 1}),
        "judge_model": _with_null(nonempty),
        **_criteria_keys(settings_only=True),
        "weights": _with_null(
            {
                "type": "object",
                "minProperties": 1,
                "propertyNames": {"enum": list(criteria)},
                "additionalProperties": {"type": "number", "minimum": 0},
            }
        ),
    }
    settings = _object(_setting_keys(), setting_types, title="Settings")
    catalog_defaults = _object(_setting_keys() + ("epochs",), {
        **setting_types, "epochs": _with_null({"type": "integer", "minimum": 1, "maximum": MAX_EPOCHS})},
        title="Catalog defaults")

    http = _object(HTTP_KEYS, {
        "url": url, "method": {"type": "string", "enum": [*HTTP_METHODS, *(m.lower() for m in HTTP_METHODS)]},
        "headers": headers, "timeout": timeout}, required=("url",), title="HTTP tool")
    mcp = _object(MCP_KEYS, {
        "url": url, "command": {"type": "array", "minItems": 1, "items": nonempty},
        "env": headers, "cwd": nonempty, "headers": headers, "timeout": timeout, "tool": nonempty},
        title="MCP server")
    mcp["oneOf"] = [{"required": ["url"], "not": {"anyOf": [{"required": ["command"]}, {"required": ["env"]},
                                                          {"required": ["cwd"]}]}},
                    {"required": ["command"], "not": {"anyOf": [{"required": ["url"]},
                                                               {"required": ["headers"]}]}}]
    tool = _object(_TOOL_KEYS, {
        "name": {"type": "string", "pattern": _pattern(_TOOL_NAME_RE)},
        "description": _with_null(string),
        "parameters": _with_null({"type": "object", "properties": {"type": {"const": "object"}}}),
        "returns": {},
        "returns_by": _with_null({"type": "object", "additionalProperties": {"type": "object"}}),
        "http": {"$ref": "#/$defs/http"},
        "mcp": {"$ref": "#/$defs/mcp"},
    }, required=("name",), title="Tool")
    tool["not"] = {"required": ["http", "mcp"]}  # one kind of live tool at most
    mcp_import = _object(MCP_IMPORT_KEYS, {
        "mcp": {"$ref": "#/$defs/mcp"},
        "only": {"type": "array", "items": {"type": "string", "pattern": _pattern(_TOOL_NAME_RE)}},
    }, required=("mcp",), title="MCP tool import")
    mcp_import["description"] = "Import an MCP server's tools (their schemas are listed from the server)."

    expect = _object(
        _expect_keys(),
        {
            **_criteria_fields(),
            **_criteria_keys(),
            "gate": _with_null(
                {
                    "anyOf": [
                        {"type": "boolean"},
                        {"enum": list(gateable)},
                        {"type": "array", "items": {"enum": list(gateable)}},
                    ]
                }
            ),
            "weighted": _with_null({"type": "boolean"}),
            "threshold": _with_null({"type": "number", "minimum": 0, "maximum": 1}),
            "diagnose": _with_null(
                {"anyOf": [{"enum": list(DIAGNOSES)}, {"type": "array", "items": {"enum": list(DIAGNOSES)}}]}
            ),
        },
        title="Expect",
    )
    message = _object(_MESSAGE_KEYS, {"role": {"enum": list(ROLES)}, "content": string, "name": string},
                      required=("role", "content"), title="Message")
    scenario = _object(_scenario_keys(), {
        "key": {"type": "string", "pattern": _pattern(_KEY_RE)},
        "prompt": _with_null(string),
        "messages": _with_null({"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/message"}}),
        "tools": _with_null({"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/tool"},
                                                                   {"$ref": "#/$defs/mcp_import"}]}}),
        "expect": _with_null({"$ref": "#/$defs/expect"}),
        "tags": strings,
        "notes": _with_null(string),
        "group": _with_null(nonempty),
        **setting_types,
    }, required=("key",), title="Scenario")
    scenario["anyOf"] = [{"required": ["prompt"]}, {"required": ["messages"]}]
    scenario["not"] = {"required": ["prompt", "messages"],
                       "properties": {"prompt": {"type": "string"}, "messages": {"type": "array"}}}
    group = _object(_GROUP_KEYS, {
        "name": nonempty, "tags": strings, "defaults": _with_null({"$ref": "#/$defs/settings"}),
        "scenarios": {"type": "array", "items": {"$ref": "#/$defs/scenario"}},
    }, required=("name", "scenarios"), title="Group")
    top = _object(_CATALOG_KEYS, {
        "name": nonempty, "description": _with_null(string),
        "defaults": _with_null({"$ref": "#/$defs/catalog_defaults"}),
        "scenarios": _with_null({"type": "array", "items": {"$ref": "#/$defs/scenario"}}),
        "groups": _with_null({"type": "array", "items": {"$ref": "#/$defs/group"}}),
    }, required=("name",))
    top["anyOf"] = [{"required": ["scenarios"], "properties": {"scenarios": {"minItems": 1}}},
                    {"required": ["groups"], "properties": {"groups": {"minItems": 1}}}]
    return {
        "$schema": DRAFT,
        "title": "evaljobs catalog",
        "description": "Scenarios × models evaluated by evaljobs. Checked fully by `evaljobs catalog check`.",
        **top,
        "$defs": {
            "settings": settings,
            "catalog_defaults": catalog_defaults,
            "scenario": scenario,
            "group": group,
            "tool": tool,
            "mcp_import": mcp_import,
            "http": http,
            "mcp": mcp,
            "expect": expect,
            "message": message,
        },
    }


def catalog_schema_json() -> str:
    """The schema as indented JSON text (what ``evaljobs catalog schema`` prints)."""
    return json.dumps(catalog_schema(), indent=2) + "\n"


__all__ = ["catalog_schema", "catalog_schema_json"]
