"""promptfoo's Nunjucks templates (prompts, assertion values), rendered as promptfoo renders them.

promptfoo renders every prompt and assertion value with Nunjucks, autoescape
off, plus its own filters ``load`` (``JSON.parse``) and ``dump``
(``JSON.stringify``) (``src/util/templates.ts`` ``getNunjucksEngine``).
A plain ``{{ name }}`` is substituted directly; anything else (filters,
attribute access, ``{% if %}``/``{% for %}``) is rendered by a *sandboxed*
Jinja2 environment, whose syntax and semantics are Nunjucks' for the filters
listed in :data:`FILTERS`. A filter outside that list is refused by name
rather than rendered with Jinja2's possibly different meaning.

Jinja2 comes with the ``imports`` extra (``pip install 'evaljobs[imports]'``);
it is imported only when a template needs it.
"""
from __future__ import annotations

import json
import re
from typing import Any

from evaljobs.catalog.importers.shared import render

#: Nunjucks filters whose Jinja2 namesake gives the same text for the values a promptfoo var holds
#: (strings, numbers, lists, mappings), plus promptfoo's own ``load``/``dump``.
FILTERS = ("abs", "default", "d", "dump", "first", "float", "int", "join", "last", "length", "list", "load",
           "lower", "replace", "reverse", "safe", "string", "trim", "upper")

_FILTER_USE = re.compile(r"\|\s*([A-Za-z_][A-Za-z0-9_]*)")
_BLOCK = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)
_PLAIN = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class TemplateRefused(Exception):
    """A template evaljobs will not render (an unknown filter, a syntax error, no Jinja2): one line why."""


def _dump(value: Any, indent: Any = None) -> str:
    """Nunjucks' ``dump``: ``JSON.stringify(value, null, indent)`` (no spaces after separators)."""
    if isinstance(indent, int) and indent > 0:
        return json.dumps(value, indent=indent, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _js_text(value: Any) -> str:
    """A value as Nunjucks prints it: JavaScript's ``String(value)`` for the scalars, JSON otherwise."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return "[object Object]" if isinstance(value, dict) else ",".join(_js_text(v) for v in value)
    return str(value)


_JS_INT = re.compile(r"\s*([+-]?\d+)")
_JS_FLOAT = re.compile(r"\s*([+-]?(?:Infinity|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?))")


def _int(value: Any, default: Any = None) -> Any:
    """Nunjucks' ``int``: ``parseInt(String(value), 10)``, else the default (``"3.7a"`` is 3)."""
    match = _JS_INT.match(_js_text(value))
    return int(match.group(1)) if match else default


def _float(value: Any, default: Any = None) -> Any:
    """Nunjucks' ``float``: ``parseFloat(String(value))``, else the default."""
    match = _JS_FLOAT.match(_js_text(value))
    return float(match.group(1).replace("Infinity", "inf")) if match else default


def _reverse(value: Any) -> Any:
    """Nunjucks' ``reverse``: a string reversed, a list copied reversed."""
    return value[::-1] if isinstance(value, (str, list)) else list(reversed(list(value)))


def _list(value: Any) -> list:
    """Nunjucks' ``list``: a string's characters, a mapping's ``{key, value}`` pairs, a list as it is."""
    if isinstance(value, dict):
        return [{"key": k, "value": v} for k, v in value.items()]
    return list(value)


_ENV = None


def _environment():
    global _ENV
    if _ENV is None:
        try:
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:  # the optional 'imports' extra
            raise TemplateRefused("needs Jinja2 to render its Nunjucks template: "
                                  "pip install 'evaljobs[imports]'") from None
        env = ImmutableSandboxedEnvironment(autoescape=False, keep_trailing_newline=True,
                                            finalize=_js_text)
        env.filters = {name: env.filters[name] for name in FILTERS if name in env.filters}
        # promptfoo's load (JSON.parse), and Nunjucks' own where Jinja2's namesake reads a value otherwise.
        env.filters.update(load=json.loads, dump=_dump, int=_int, float=_float, reverse=_reverse, list=_list,
                           string=_js_text)
        _ENV = env
    return _ENV


def needs_engine(text: str) -> bool:
    """Whether the template holds more than plain ``{{ name }}`` placeholders."""
    return bool(render(text, {})[2]) or "{%" in text


def check_template(text: str) -> str | None:
    """Why this template cannot be rendered here (``None``: it can): an unknown filter, a syntax error."""
    for block in _BLOCK.findall(text):
        for name in _FILTER_USE.findall(re.sub(r"\|\|", " ", block)):
            if name not in FILTERS:
                return (f"uses the Nunjucks filter {name!r}, which evaljobs does not render (known: "
                        f"{', '.join(FILTERS)})")
    try:
        _environment().parse(text)
    except TemplateRefused as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 -- jinja2.TemplateSyntaxError, imported only when needed
        return f"has a template construct evaljobs cannot read ({str(exc).splitlines()[0]})"
    return None


def render_template(text: str, variables: dict[str, Any]) -> tuple[str, list[str], str | None]:
    """``(text, missing var names, refusal)``: the rendered template, as promptfoo renders it."""
    if not needs_engine(text):  # plain {{ name }}s, printed as Nunjucks prints a value (3.0 is "3")
        _, missing, _ = render(text, variables)
        def value(match: re.Match) -> str:
            name = match.group(1)
            return _js_text(variables[name]) if name in variables else match.group(0)

        rendered = _PLAIN.sub(value, text)
        return rendered, missing, None
    problem = check_template(text)
    if problem:
        return text, [], problem
    env = _environment()
    from jinja2 import meta, nodes

    tree = env.parse(text)
    # A var used only through `default` may be missing (Nunjucks then prints the default); any other use of a
    # missing var is reported (Nunjucks would print nothing, which is rarely what the config means).
    uses = [n.name for n in tree.find_all(nodes.Name) if n.ctx == "load"]
    defaulted = [f.node.name for f in tree.find_all(nodes.Filter)
                 if f.name in ("default", "d") and isinstance(f.node, nodes.Name)]
    missing = sorted(n for n in meta.find_undeclared_variables(tree)
                     if n not in variables and uses.count(n) > defaulted.count(n))
    try:
        return env.from_string(text).render(**variables), missing, None
    except Exception as exc:  # noqa: BLE001 -- whatever a filter raises on a value it cannot take (load of a
        # text that is not JSON): one line naming it, never a traceback
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        return text, missing, f"cannot be rendered with its vars ({reason})"


__all__ = ["FILTERS", "TemplateRefused", "check_template", "needs_engine", "render_template"]
