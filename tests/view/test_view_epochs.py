"""The viewer with ``--epochs N``: a grid cell is a scenario × model over its epochs (epochs passed of
the run's, a flaky mark, one letter per epoch), and a scenario's page lists every epoch of every model.

Before, cells were keyed by (scenario, model) and showed whichever epoch was read last.
"""
from __future__ import annotations

import re

import httpx

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.view import queries
from evaljobs.view.epochs import EpochCell
from helpers import Viewer

# (scenario, model) → the status of each epoch recorded (None: not recorded yet)
PLAN = {
    ("s1", "m1"): ["passed"] * 4,
    ("s1", "m2"): ["passed", "failed", "passed", "failed"],  # flaky
    ("s2", "m1"): ["passed", "errored", "passed", "passed"],  # an errored epoch is not a verdict
    ("s2", "m2"): ["failed"] * 4,
    ("s3", "m1"): ["passed", None, "passed", None],  # still running
    ("s3", "m2"): ["passed"] * 4,
}


def _record() -> str:
    catalog = loads_catalog("name: ep\nscenarios:\n" + "".join(f'  - key: {k}\n    prompt: "ask {k}"\n'
                                                               for k in ("s1", "s2", "s3")), source="ep.yaml")
    run = store.create_run(catalog, ["m1", "m2"], strategy="fanout", epochs=4)
    for (key, model), statuses in PLAN.items():
        for epoch, status in enumerate(statuses):
            if status is None:
                continue
            fault = {"failed": "missing_content", "errored": "run_error"}.get(status)
            store.record_result(run.id, Result(key, model, status, score=1.0 if status == "passed" else 0.0,
                                               fault=fault, output=f"answer {key} {model} epoch {epoch}",
                                               error="HTTP 503" if status == "errored" else None,
                                               duration_ms=10 * (epoch + 1), epoch=epoch))
    return run.id


def test_a_run_page_shows_each_cell_over_its_epochs(tmp_path):
    store.connect(f"sqlite:///{tmp_path}/v.db")
    run_id = _record()
    page = queries.run_page(run_id)
    assert page.epochs == 4 and [r.key for r in page.rows] == ["s1", "s2", "s3"]
    cells = {(row.key, model): cell for row in page.rows for model, cell in row.cells}
    assert all(isinstance(c, EpochCell) for c in cells.values())
    summary = {pair: (c.passed, c.recorded, c.status, c.flaky, c.marks) for pair, c in cells.items()}
    assert summary == {
        ("s1", "m1"): (4, 4, "passed", False, "PPPP"),
        ("s1", "m2"): (2, 4, "failed", True, "PFPF"),
        ("s2", "m1"): (3, 4, "errored", False, "PEPP"),
        ("s2", "m2"): (0, 4, "failed", False, "FFFF"),
        ("s3", "m1"): (2, 2, "pending", False, "P·P·"),
        ("s3", "m2"): (4, 4, "passed", False, "PPPP"),
    }
    # the cell previews the first epoch that did not pass; "slowest" is its slowest epoch
    assert cells[("s1", "m2")].preview == "answer s1 m2 epoch 1" and cells[("s1", "m2")].duration_ms == 40
    # per model: every epoch is a trial, and the flaky scenarios are counted
    m1, m2 = page.models
    assert (m1.results, m1.passed, m1.errored, m1.flaky) == (10, 9, 1, 0)
    assert (m2.results, m2.passed, m2.failed, m2.flaky) == (12, 6, 6, 1)
    # filters read every epoch: a fault of epoch 1 finds s2; "pending" finds the unfinished s3
    assert [r.key for r in queries.run_page(run_id, fault="run_error").rows] == ["s2"]
    assert [r.key for r in queries.run_page(run_id, statuses=["pending"]).rows] == ["s3"]
    assert [r.key for r in queries.run_page(run_id, statuses=["failed"]).rows] == ["s1", "s2"]
    # the scenario page keeps every epoch of every model, in order
    scenario = queries.scenario_page(run_id, "s1")
    by_model = {c.model: c for c in scenario.columns}
    assert [r.epoch for r in by_model["m2"].epochs] == [0, 1, 2, 3]
    assert [r.status for r in by_model["m2"].epochs] == PLAN[("s1", "m2")]
    assert (by_model["m2"].passed, by_model["m2"].flaky, by_model["m1"].flaky) == (2, True, False)


def test_the_served_pages_show_epochs_passed_flaky_marks_and_every_epoch(tmp_path):
    db_url = f"sqlite:///{tmp_path}/evaljobs.db"
    store.connect(db_url)
    run_id = _record()
    viewer = Viewer(db_url, "memory", tmp_path / "view.log")
    try:
        with httpx.Client(base_url=viewer.url) as client:
            run_page = client.get(f"/runs/{run_id}")
            scenario_page = client.get(f"/runs/{run_id}/scenarios/s1")
    finally:
        viewer.close()
    assert run_page.status_code == 200 and scenario_page.status_code == 200
    html = run_page.text
    assert "4 epochs per pair" in html and 'data-epochs="4"' in html
    cell = re.search(
        r'<td class="cell st-failed" data-key="s1" data-model="m2" data-epochs="PFPF">(.*?)</td>', html, re.S
    )
    assert cell is not None, "the flaky cell is not in the grid"
    assert "2/4 passed" in cell.group(1) and ">flaky<" in cell.group(1)
    assert re.search(
        r'data-key="s3" data-model="m1" data-epochs="P·P·">\s*<span class="mark">2/4 passed', html
    )
    assert html.count(">flaky<") == 1
    page = scenario_page.text
    assert page.count('<details class="epoch"') == 8  # 4 epochs × 2 models, each with its answer
    for epoch in range(4):
        assert f"answer s1 m2 epoch {epoch}" in page
    assert "2/4 epochs passed" in page and "4/4 epochs passed" in page


def test_a_rerun_of_chosen_epochs_has_a_run_page(tmp_path):
    """A rerun stores its chosen pairs as [scenario, model, epoch]: the page lists their scenarios once."""
    store.connect(f"sqlite:///{tmp_path}/v.db")
    catalog = loads_catalog(
        'name: ep\nscenarios:\n  - key: s1\n    prompt: "a"\n  - key: s2\n    prompt: "b"\n', source="ep.yaml"
    )
    run = store.create_run(
        catalog, ["m1"], strategy="fanout", epochs=3, pairs=[("s2", "m1", 0), ("s2", "m1", 2)]
    )
    store.record_result(run.id, Result("s2", "m1", "failed", epoch=2))
    page = queries.run_page(run.id)
    assert [r.key for r in page.rows] == ["s2"]
    cell = page.rows[0].cells[0][1]
    assert (cell.passed, cell.recorded, cell.marks) == (0, 1, "··F")
