"""A native YAML catalog is read once, by the catalog's own reader (issue 42: 100,000 scenarios).

PyYAML's pure-Python composer, which format detection used to read every file with, took minutes
on a dataset-sized catalog, and the catalog was then read a second time to be validated. What
detection reads must be exactly what validation gets: data, the scenarios' lines, duplicate keys.

A valid catalog needs no other line (900,000 keys and items of 100,000 scenarios took more memory
than the scenarios): the reader keeps the scenarios' lines only, and the text is read again for
the others when a message names them, so every message names the same line as before.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from evaljobs.catalog import (
    CatalogError,
    loads_catalog,
    parse_catalog,
    parse_source,
    read_catalog,
    reads_catalog,
)
from evaljobs.catalog.digest import digest_of
from evaljobs.catalog.importers import load_any
from evaljobs.checks import check_catalog

CATALOG = ("name: twice\nscenarios:\n  - key: a\n    prompt: hi\n    expect: {contains: [hi]}\n"
           "  - key: b\n    prompt: 'no'\n    max_turns: no\n")


def test_a_native_catalog_is_read_by_the_catalog_reader_with_its_lines(tmp_path):
    path = tmp_path / "cat.yaml"
    path.write_text(CATALOG, encoding="utf-8")
    imported = load_any(path)
    again = read_catalog(path)
    assert imported.native is not None
    assert imported.native.data == again.data == imported.data
    assert imported.native.lines == again.lines
    assert imported.native.with_every_line().lines[("scenarios", 1, "max_turns")] == 8
    with pytest.raises(CatalogError) as raised:
        check_catalog(path)
    assert raised.value.problems == [f"{path}:8: scenario 'b': max_turns must be an integer >= 1, not 'no'"]


GROUPED = ("name: lines\ndefaults: {max_turns: 2}\nscenarios:\n  - key: a\n    prompt: hi\n"
           "    tags: [x, y]\n    expect: {contains: [hi]}\n"
           "groups:\n  - name: g\n    scenarios:\n      - key: g.a\n        prompt: there\n"
           "      - {key: g.b, prompt: again}\n")


@pytest.mark.parametrize("name", ["lines.yaml", "lines.json"])
def test_a_valid_catalog_keeps_only_its_scenarios_lines(name):
    text = GROUPED if name.endswith(".yaml") else (
        '{"name": "lines",\n "scenarios": [\n  {"key": "a", "prompt": "hi",\n   "tags": ["x"]}]}\n')
    source = reads_catalog(text, source=name)
    expected = ({("scenarios", 0): 4, ("groups", 0, "scenarios", 0): 11, ("groups", 0, "scenarios", 1): 13}
                if name.endswith(".yaml") else {("scenarios", 0): 3})
    assert source.lines == expected
    every = source.with_every_line()
    prompt_line = 5 if name.endswith(".yaml") else 3
    assert every.text is None and every.lines[("scenarios", 0, "prompt")] == prompt_line
    catalog = loads_catalog(text, source=name)
    assert [s.line for s in catalog.scenarios] == [
        expected[("scenarios", 0)], *([11, 13] if name.endswith(".yaml") else [])]


@pytest.mark.parametrize(("text", "problems"), [
    # deep in a scenario: the line of the entry itself, not its scenario's
    (GROUPED.replace("tags: [x, y]", "tags: [x, 3]"),
     ["lines.yaml:6: scenario 'a': tags entries must be non-empty strings, not 3; quote it to make it text"]),
    (GROUPED.replace("prompt: there", "prompt: there\n        max_turns: 0"),
     ["lines.yaml:13: scenario 'g.a': max_turns must be an integer >= 1, not 0"]),
    # a duplicate key names its first line, with validation's problems after it
    (GROUPED.replace("    tags: [x, y]\n", "    tags: [x, y]\n    prompt: again\n"),
     ["lines.yaml:7: duplicate key 'prompt' in the same mapping (first at line 5); remove one: only the "
      "last would be used"]),
    # the first of two names its line
    (GROUPED + "  - {name: g, scenarios: [{key: a, prompt: x}]}\n",
     ["lines.yaml:14: group 'g': duplicate group name (first at line 9); merge the two groups or rename one",
      "lines.yaml:14: scenario 'a': duplicate key (first defined at line 4); scenario keys must be unique "
      "across the catalog: rename one"]),
])
def test_messages_name_every_line_as_before(text, problems):
    with pytest.raises(CatalogError) as raised:
        loads_catalog(text, source="lines.yaml")
    assert raised.value.problems == problems


def test_loading_a_catalog_builds_no_body_until_one_is_asked_for():
    catalog = loads_catalog(GROUPED, source="lines.yaml")
    assert "body" not in vars(catalog) and "_body" not in vars(catalog)
    body = catalog.body
    assert catalog.body is body
    assert [s["key"] for s in body["scenarios"]] == ["a", "g.a", "g.b"]
    assert digest_of(body) == catalog.digest  # the digest hashed in pieces is the body's


#: The example catalogs (but the one whose tools are listed from a live MCP server when it is run).
EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "examples" / "catalogs").glob("*.yaml")
                  if p.name != "tools_mcp.yaml")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_digest_hashed_in_pieces_is_the_digest_of_the_whole_body(path):
    # what reuse and compare rely on: the digest is still sha256 of the body's canonical JSON
    source = read_catalog(path)
    catalog = parse_source(source)
    assert catalog.digest == digest_of(catalog.body)
    data = dict(source.data, defaults={**(source.data.get("defaults") or {}), "epochs": 3})
    epochs = parse_catalog(data, source=str(path))  # the body has a key before "name" ("defaults")
    assert epochs.digest == digest_of(epochs.body) != catalog.digest
