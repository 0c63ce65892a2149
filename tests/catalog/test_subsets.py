"""Subsets: --filter, --tag, --exclude-tag, --limit, --sample --seed; an empty selection creates nothing."""
from __future__ import annotations

import json

import pytest

from evaljobs import store
from evaljobs.catalog import parse_catalog
from evaljobs.catalog.subset import EmptySelection, Selection, select, selection_note

BODY = {
    "name": "shop",
    "scenarios": [
        {
            "key": f"refund-{i}",
            "prompt": f"[sim: say refund {i}]",
            "tags": ["refunds"] + (["slow"] if i % 2 else []),
            "expect": {"contains": ["refund"]},
        }
        for i in range(6)
    ]
    + [
        {
            "key": f"order-{i}",
            "prompt": f"[sim: say order {i}]",
            "tags": ["orders"],
            "expect": {"contains": ["order"]},
        }
        for i in range(4)
    ],
}


def catalog():
    return parse_catalog(BODY, source="shop.yaml")


def keys(selection: Selection) -> list[str]:
    subset, _ = select(catalog(), selection)
    return list(subset.keys)


def test_each_selector_and_their_order():
    assert keys(Selection(filters=("order-*",))) == ["order-0", "order-1", "order-2", "order-3"]
    assert keys(Selection(filters=("order-1", "refund-[23]"))) == ["order-1", "refund-2", "refund-3"]
    assert keys(Selection(tags=("refunds",), exclude_tags=("slow",))) == ["refund-0", "refund-2", "refund-4"]
    assert keys(Selection(tags=("orders", "slow"))) == [
        "order-0",
        "order-1",
        "order-2",
        "order-3",
        "refund-1",
        "refund-3",
        "refund-5",
    ]
    assert keys(Selection(limit=2)) == ["order-0", "order-1"]
    drawn = keys(Selection(tags=("refunds",), sample=3, seed=7))
    # same seed, same draw
    assert len(drawn) == 3 and drawn == keys(Selection(tags=("refunds",), sample=3, seed=7))
    assert all(k.startswith("refund-") for k in drawn)
    assert {tuple(keys(Selection(sample=3, seed=s))) for s in range(10)} != {tuple(drawn)}
    subset, record = select(catalog(), Selection(tags=("refunds",), limit=4))
    assert record["chosen"] == 4 and record["of"] == 10 and subset.digest != catalog().digest
    assert selection_note(record) == "4 of 10 scenarios (tag: refunds; limit 4)"
    assert select(catalog(), Selection()) == (catalog(), None)


def test_an_empty_selection_is_one_line():
    with pytest.raises(EmptySelection) as caught:
        select(catalog(), Selection(tags=("billing",)))
    assert str(caught.value) == (
        "shop.yaml: no scenario of catalog 'shop' (10 scenarios) matches tag: billing: "
        "nothing to run; its tags: orders (4), refunds (6), slow (3); its keys: "
        "order-0, order-1, order-2, order-3, refund-0, refund-1, refund-2, refund-3, "
        "refund-4, refund-5"
    )


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.0)


def test_run_records_the_selection_and_the_report_says_so(cli, tmp_path, sim, monkeypatch):
    path = tmp_path / "shop.yaml"
    path.write_text(json.dumps(BODY))
    db = f"sqlite:///{tmp_path}/subsets.db"
    monkeypatch.setenv("EVALJOBS_SIM_URL", sim.url)
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", db)

    empty = cli("run", str(path), "-m", "sim/a", "--strategy", "sequential", "--filter", "nope-*")
    assert (
        empty.exit_code == 2
        and "no scenario of catalog 'shop' (10 scenarios) matches filter: nope-*" in empty.output
    )
    store.connect(db)
    assert store.list_runs() == [], "an empty selection creates no run"
    done = cli("run", str(path), "-m", "sim/a", "--strategy", "sequential", "--tag", "refunds",
               "--exclude-tag", "slow", "--json")
    assert done.exit_code == 0, done.output
    (info,) = store.list_runs()
    assert info.expected == 3 and info.options["selection"]["chosen"] == 3
    report = info.report
    assert report["run"]["selection"]["text"] == "tag: refunds; excluding tag: slow"
    assert [r["scenario_key"] for r in report["results"]] == ["refund-0", "refund-2", "refund-4"]
    md = cli("report", info.id, "--format", "md").output
    assert "3 of 10 scenarios (tag: refunds; excluding tag: slow)" in md
    table = cli("report", info.id, "--format", "table").output
    assert "3 of 10 scenarios (tag: refunds; excluding tag: slow)" in table
