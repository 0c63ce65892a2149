"""YAML 1.2 (core schema) loaders on PyYAML: ``Yes``, ``No``, ``on``, ``off`` stay strings.

PyYAML implements YAML 1.1, where ``body: Yes`` is the boolean ``true``,
``017`` is fifteen, ``1:30`` is ninety and ``2024-01-01`` is a date. promptfoo
(js-yaml), most editors and YAML 1.2 read them as text, the number 17 and text.
A catalog or an imported file must mean the same thing here as in the tool it
came from, so every YAML evaljobs reads goes through these loaders.

Why a resolver on PyYAML rather than another library: the catalog reader walks
PyYAML's event stream to keep line numbers for every key (see
``evaljobs.catalog``), fast with the C parser; swapping only the implicit
resolvers and the integer constructor gives the YAML 1.2 core schema there and
in the plain loaders alike, with no second parser to keep in step.
"""
from __future__ import annotations

import re
from typing import Any, Union, cast

import yaml

from evaljobs.catalog.yaml_bounds import check_expansion

_TAG = "tag:yaml.org,2002:"

#: The YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), plus the merge key.
CORE_RESOLVERS: list[tuple[str, re.Pattern[str], str]] = [
    ("bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), "tTfF"),
    ("null", re.compile(r"^(?:~|null|Null|NULL|)$"), "~nN"),
    ("int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), "-+0123456789"),
    ("float", re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                         r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), "-+0123456789."),
    ("merge", re.compile(r"^(?:<<)$"), "<"),
]


def _resolvers() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    table: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}
    for name, regexp, first in CORE_RESOLVERS:
        for char in first:
            table.setdefault(char, []).append((_TAG + name, regexp))
    table.setdefault(None, []).append((_TAG + "null", CORE_RESOLVERS[1][1]))  # the empty scalar
    return table


_CORE = _resolvers()
_BOOL = {"true": True, "false": False}


#: Most digits of a YAML integer: far past any count, timeout or price, and below the point where
#: Python refuses to convert (4,300 digits) or a conversion costs quadratic time.
MAX_INT_DIGITS = 100


def _construct_int(loader: yaml.SafeLoader | yaml.CSafeLoader, node: yaml.ScalarNode) -> int:
    value = loader.construct_scalar(node)
    digits = value.lstrip("+-")
    if len(digits) > MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"an integer of {len(digits)} digits (at most {MAX_INT_DIGITS}); write a smaller number",
            node.start_mark,
        )
    if value.startswith("0o"):
        return int(value[2:], 8)
    if value.startswith("0x"):
        return int(value[2:], 16)
    return int(value, 10)  # "017" is seventeen in YAML 1.2


def _construct_bool(loader: yaml.SafeLoader | yaml.CSafeLoader, node: yaml.ScalarNode) -> bool:
    return _BOOL[loader.construct_scalar(node).lower()]


_Base = type[Union[yaml.SafeLoader, yaml.CSafeLoader]]


def _make(base: _Base) -> _Base:
    # type() of three arguments is typed as a plain `type`: what it makes is a subclass of base.
    cls = cast(_Base, type(f"Yaml12{base.__name__}", (base,),
                           {"yaml_implicit_resolvers": _CORE, "bool_values": _BOOL}))
    cls.yaml_constructors = dict(base.yaml_constructors)
    cls.add_constructor(_TAG + "int", _construct_int)
    cls.add_constructor(_TAG + "bool", _construct_bool)
    return cls


#: The pure-Python and (when PyYAML has it) C-accelerated YAML 1.2 safe loaders.
SafeLoader: type = _make(yaml.SafeLoader)
FastLoader: type = _make(getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _union(*tables: dict) -> dict:
    out: dict[Any, list] = {}
    for table in tables:
        for first, entries in table.items():
            bucket = out.setdefault(first, [])
            bucket.extend(e for e in entries if e not in bucket)
    return out


#: Writes YAML that reads back the same under YAML 1.2 *and* 1.1: a string either schema would read
#: as something else ('0E0', '0o17', 'yes', '2024-01-01') is quoted. Catalogs that evaljobs writes
#: (catalog convert) therefore mean the same in every tool.
SafeDumper: type = type("Yaml12SafeDumper", (yaml.SafeDumper,),
                        {"yaml_implicit_resolvers": _union(yaml.SafeDumper.yaml_implicit_resolvers, _CORE)})


def dump(data: Any, **options: Any) -> str:
    """``yaml.safe_dump`` whose plain scalars mean the same under YAML 1.2 and 1.1."""
    return yaml.dump(data, Dumper=SafeDumper, **options)


def load(text: str, source: str = "<yaml>") -> Any:
    """``yaml.safe_load`` with YAML 1.2 core-schema scalars, refusing alias bombs (``CatalogError``)."""
    check_expansion(text, source, FastLoader)
    return yaml.load(text, Loader=FastLoader)  # noqa: S506 - a safe loader


__all__ = ["CORE_RESOLVERS", "FastLoader", "SafeDumper", "SafeLoader", "dump", "load"]
