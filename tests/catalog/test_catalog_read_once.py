"""A native YAML catalog is read once, by the catalog's own reader (issue 42: 100,000 scenarios).

PyYAML's pure-Python composer, which format detection used to read every file with, took minutes
on a dataset-sized catalog, and the catalog was then read a second time to be validated. What
detection reads must be exactly what validation gets: data, the line of every key, duplicate keys.
"""
from __future__ import annotations

from evaljobs.catalog import read_catalog
from evaljobs.catalog.importers import load_any

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
    assert imported.native.lines[("scenarios", 1, "max_turns")] == 8

