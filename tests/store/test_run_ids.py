"""Run ids as people type them: `latest`, a whole id, a unique prefix (with or without `r_`)."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.errors import UsageError
from evaljobs.store import runs as store_runs
from evaljobs.store.lookup import resolve_run_id

CATALOG = "name: ids\nscenarios:\n  - {key: a, prompt: hi}\n"


@pytest.fixture
def runs(db_url, monkeypatch):
    """Four runs with chosen ids (run ids are r_ + secrets.token_hex(6)), oldest first."""
    store.connect(db_url)
    chosen = iter(["abc111aaaaaa", "abc222bbbbbb", "def333cccccc", "0a0a0a0a0a0a"])
    # Only the store's `secrets` (a namespace of its own): a thread left by an earlier test that
    # draws a token meanwhile must neither take a chosen id nor run the iterator dry.
    monkeypatch.setattr(store_runs, "secrets", SimpleNamespace(token_hex=lambda n=None: next(chosen)))
    catalog = loads_catalog(CATALOG, source="ids.yaml")
    made = [store.create_run(catalog, ["sim/a"], strategy="sequential").id for _ in range(4)]
    monkeypatch.undo()
    return made


def test_empty_database_has_no_latest(db_url) -> None:
    store.connect(db_url)
    with pytest.raises(store.UnknownRun, match=r"no runs yet, so no 'latest' run"):
        resolve_run_id("latest")


def test_latest_whole_ids_and_unique_prefixes(runs) -> None:
    assert runs == ["r_abc111aaaaaa", "r_abc222bbbbbb", "r_def333cccccc", "r_0a0a0a0a0a0a"]
    assert resolve_run_id("latest") == "r_0a0a0a0a0a0a"
    for run_id in runs:
        assert resolve_run_id(run_id) == run_id
    assert resolve_run_id("r_abc1") == "r_abc111aaaaaa"
    assert resolve_run_id("abc2") == "r_abc222bbbbbb"
    assert resolve_run_id("def") == "r_def333cccccc"


@pytest.mark.parametrize("text,error,message", [
    ("abc", UsageError, r"run id prefix 'abc' matches 2 runs \(r_abc111aaaaaa, r_abc222bbbbbb\): give more"),
    ("r_fff", store.UnknownRun, r"unknown run 'r_fff': list runs with `evaljobs runs`"),
    ("ab", store.UnknownRun, r"at least 3 characters"),
    ("", store.UnknownRun, r"at least 3 characters"),
])
def test_ambiguous_and_unknown_are_one_line(runs, text, error, message) -> None:
    with pytest.raises(error, match=message) as info:
        resolve_run_id(text)
    assert "\n" not in str(info.value)


def test_many_matches_are_capped(db_url, monkeypatch) -> None:
    store.connect(db_url)
    counter = itertools.count()
    monkeypatch.setattr(
        store_runs, "secrets", SimpleNamespace(token_hex=lambda n=None: f"fee{next(counter):09d}")
    )
    catalog = loads_catalog(CATALOG, source="ids.yaml")
    for _ in range(7):
        store.create_run(catalog, ["sim/a"], strategy="sequential")
    monkeypatch.undo()
    with pytest.raises(UsageError, match=r"matches 5\+ runs \(r_fee000000000, .*r_fee000000004\)"):
        resolve_run_id("fee")
