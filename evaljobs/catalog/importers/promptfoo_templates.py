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

Rendering is bounded (issue 40, item 10), because a template is code from the config's
author and runs at import, in ``catalog check`` and ``run`` alike: nested ``range(100000)``
loops, ``'x' * 400000000`` or ``10 ** (10 ** 9)`` grew memory by 80 MB/s and a 400 MB prompt
was accepted. The sandboxed environment here stops a rendering, with
:class:`TemplateTooLarge`'s one line, when any string, list or output passes
:data:`MAX_RENDERED` characters (checked *before* ``*``, ``+``, ``~``, ``%``, the padding
string methods, ``replace`` and ``join`` build it), an integer passes :data:`MAX_INT_BITS`
bits, or the rendering passes :data:`MAX_RENDER_SECONDS` (every loop's iterator and every call
looks at the clock). Jinja2's ``lipsum``, ``dict`` and ``namespace`` globals, which Nunjucks
does not have (``namespace`` would let a loop double a string), are not offered.
"""
from __future__ import annotations

import io
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from evaljobs.catalog.importers.shared import render

#: Nunjucks filters whose Jinja2 namesake gives the same text for the values a promptfoo var holds
#: (strings, numbers, lists, mappings), plus promptfoo's own ``load``/``dump``.
FILTERS = ("abs", "default", "d", "dump", "first", "float", "int", "join", "last", "length", "list", "load",
           "lower", "replace", "reverse", "safe", "string", "trim", "upper")

_FILTER_USE = re.compile(r"\|\s*([A-Za-z_][A-Za-z0-9_]*)")
_BLOCK = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)
_PLAIN = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


#: Most characters of a rendered template, or of any string or list built while rendering it (the
#: interactive path's answer cap: far above any real prompt).
MAX_RENDERED = 10_000_000
#: Most bits of an integer built while rendering (about 20,000 digits).
MAX_INT_BITS = 65_536
#: Longest one template may take to render at import.
MAX_RENDER_SECONDS = 5.0
#: Iterations of a loop between two looks at the clock.
_EVERY = 1024


class TemplateRefused(Exception):
    """A template evaljobs will not render (an unknown filter, a syntax error, no Jinja2): one line why."""


class TemplateTooLarge(TemplateRefused):
    """A rendering that passed a bound (size, integer, time): stopped before it could exhaust memory."""


_bounds = threading.local()


def _tick() -> None:
    deadline = getattr(_bounds, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise TemplateTooLarge(f"took more than {MAX_RENDER_SECONDS:g} s")


def _size_ok(size: int, what: str) -> None:
    if size > MAX_RENDERED:
        raise TemplateTooLarge(f"would build {what} of {size:,} characters (at most {MAX_RENDERED:,})")


def _checked_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse ``left OPERATOR right`` when its result would pass a bound, before it is computed."""
    ints = isinstance(left, int) and isinstance(right, int)
    if operator == "**" and ints and right > 0 and abs(left) > 1:
        bits = right * abs(left).bit_length()
        if bits > MAX_INT_BITS:
            raise TemplateTooLarge(f"would compute {left} ** {right}, an integer of about {bits:,} bits "
                                   f"(at most {MAX_INT_BITS:,})")
    elif operator == "*" and ints:
        if left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise TemplateTooLarge(f"would compute an integer of over {MAX_INT_BITS:,} bits")
    elif operator == "*":
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                _size_ok(len(seq) * count, "a string or list")
    elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
        _size_ok(len(left) + len(right), "a string or list")
    elif operator == "%" and isinstance(left, str):
        widths = [int(w) for w in re.findall(r"\d+", left)] + [
            v for v in (right if isinstance(right, tuple) else (right,)) if isinstance(v, int)]
        if any(w > MAX_RENDERED for w in widths) or "*" in left:
            raise TemplateTooLarge("would format a string with a width past the bound (or a '*' width)")


#: String methods whose result grows with an integer argument, or with their arguments' sizes.
_PADDING = ("ljust", "rjust", "center", "zfill", "expandtabs")


def _checked_call(function: Any, args: tuple, kwargs: dict) -> None:
    """Refuse a call from the template whose arguments or result would pass a bound."""
    _tick()
    values = list(args) + list(kwargs.values())
    for value in values:
        if isinstance(value, (str, list, tuple)):
            _size_ok(len(value), "an argument")
        elif isinstance(value, int) and value > MAX_RENDERED and not isinstance(value, bool):
            raise TemplateTooLarge(f"passes {value:,} to a call (at most {MAX_RENDERED:,})")
    owner, name = getattr(function, "__self__", None), getattr(function, "__name__", "")
    if isinstance(owner, str) and name in ("format", "format_map"):
        raise TemplateTooLarge("calls str.format, which Nunjucks has not")
    if isinstance(owner, str) and name == "replace" and len(args) >= 2:
        _replace(owner, *args[:3])
    elif isinstance(owner, str) and name == "join" and args:
        _join(args[0], owner)
    elif isinstance(owner, str) and name in _PADDING:
        widths = sum(v for v in values if isinstance(v, int))
        _size_ok(len(owner) * (8 if name == "expandtabs" else 1) + widths, "a string")


def _replace(text: Any, old: Any, new: Any, count: Any = None) -> str:
    """``replace``, refused before it would build a string past the bound."""
    _tick()
    text, old, new = str(text), str(old), str(new)
    times = (text.count(old) if old else len(text) + 1)
    if isinstance(count, int) and count >= 0:
        times = min(times, count)
    _size_ok(len(text) + times * max(0, len(new) - len(old)), "a string")
    return text.replace(old, new) if count is None else text.replace(old, new, count)


def _join(items: Any, separator: Any = "", attribute: Any = None) -> str:
    """``join`` (Jinja2's, which Nunjucks' matches), refused before it would build a string past the bound."""
    values = [str(v if attribute is None else (v.get(attribute) if isinstance(v, dict) else v))
              for v in _bounded_loop(items)]
    _size_ok(sum(len(v) for v in values) + len(str(separator)) * max(0, len(values) - 1), "a string")
    return str(separator).join(values)


def _bounded_loop(items: Any) -> Iterator[Any]:
    """What a ``{% for %}`` walks: the same items, the clock looked at as they go."""
    for index, item in enumerate(items):
        if not index % _EVERY:
            _tick()
        yield item


def _bounded_concat(parts: Iterable[Any]) -> str:
    """``a ~ b``: Jinja2's ``str_join``, refused before it would build a string past the bound."""
    texts = [str(p) for p in parts]
    _size_ok(sum(len(t) for t in texts), "a string")
    return "".join(texts)


def _bounded_range(*args: int) -> range:
    """``range``: Jinja2's sandbox bound (100,000 items), and the clock."""
    from jinja2.sandbox import safe_range

    _tick()
    return safe_range(*args)


def _dump(value: Any, indent: Any = None) -> str:
    """Nunjucks' ``dump``: ``JSON.stringify(value, null, indent)`` (no spaces after separators)."""
    if isinstance(indent, int) and indent > 0:  # JSON.stringify indents by at most 10 spaces
        return json.dumps(value, indent=min(indent, 10), ensure_ascii=False)
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


def _bounded_environment_class():
    """The sandboxed environment whose every loop, call, concatenation and size-changing operator is
    bounded (see the module's docstring)."""
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(("*", "**", "+", "%"))

        def call_binop(self, context, operator, left, right):
            _checked_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805
            _checked_call(__obj, args, kwargs)
            return super().call(__context, __obj, *args, **kwargs)

        def _generate(self, source, name, filename, defer_init=False):
            # Every loop walks its items through _bounded_loop, every `~` joins through _bounded_concat.
            for loop in source.find_all(nodes.For):
                loop.iter = nodes.Filter(loop.iter, "evaljobs_loop", [], [], None, None, lineno=loop.lineno)
            for concat in list(source.find_all(nodes.Concat)):
                parts = nodes.List(concat.nodes, lineno=concat.lineno)
                joined = nodes.Filter(parts, "evaljobs_concat", [], [], None, None, lineno=concat.lineno)
                concat.nodes = [joined]
            return super()._generate(source, name, filename, defer_init=defer_init)

    return BoundedEnvironment


def _environment():
    global _ENV
    if _ENV is None:
        try:
            environment_class = _bounded_environment_class()
        except ImportError:  # the optional 'imports' extra
            raise TemplateRefused("needs Jinja2 to render its Nunjucks template: "
                                  "pip install 'evaljobs[imports]'") from None
        env = environment_class(autoescape=False, keep_trailing_newline=True, finalize=_js_text)
        env.filters = {name: env.filters[name] for name in FILTERS if name in env.filters}
        # promptfoo's load (JSON.parse), and Nunjucks' own where Jinja2's namesake reads a value otherwise.
        env.filters.update(load=json.loads, dump=_dump, int=_int, float=_float, reverse=_reverse, list=_list,
                           string=_js_text, replace=_replace, join=_join, evaljobs_loop=_bounded_loop,
                           evaljobs_concat=_bounded_concat)
        # Nunjucks' globals (range, cycler, joiner): not Jinja2's lipsum, dict, namespace
        env.globals = {"range": _bounded_range, "cycler": env.globals["cycler"],
                       "joiner": env.globals["joiner"]}
        _ENV = env
    return _ENV


#: Templates that ran out of time once (a config renders its prompt once a test): refused at once after.
_TOO_SLOW: set[str] = set()


def _render(env: Any, text: str, variables: dict[str, Any]) -> str:
    """Render within the bounds: the clock set for this thread, the output counted as it is produced."""
    if text in _TOO_SLOW:
        raise TemplateTooLarge(f"took more than {MAX_RENDER_SECONDS:g} s (for an earlier test)")
    outer = getattr(_bounds, "deadline", None)
    _bounds.deadline = time.monotonic() + MAX_RENDER_SECONDS
    try:
        out, size = io.StringIO(), 0
        for chunk in env.from_string(text).generate(**variables):
            size += len(chunk)
            _size_ok(size, "a text")
            out.write(chunk)
        return out.getvalue()
    except TemplateTooLarge as exc:
        if "took more than" in str(exc) and len(_TOO_SLOW) < 1000:
            _TOO_SLOW.add(text)
        raise
    finally:
        _bounds.deadline = outer


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
        return _render(env, text, variables), missing, None
    except TemplateTooLarge as exc:
        return text, missing, f"is refused: rendering it {exc}"
    except Exception as exc:  # noqa: BLE001 -- whatever a filter raises on a value it cannot take (load of a
        # text that is not JSON): one line naming it, never a traceback
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        return text, missing, f"cannot be rendered with its vars ({reason})"


__all__ = ["FILTERS", "MAX_INT_BITS", "MAX_RENDERED", "MAX_RENDER_SECONDS", "TemplateRefused",
           "TemplateTooLarge", "check_template", "needs_engine", "render_template"]
