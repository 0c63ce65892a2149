"""``evaljobs view`` in a real headless Chromium, on a phone and a desktop (390 and 1400 px): a pair whose
scenario was edited between two runs shows as "changed" on the compare page — never among the regressions —
while a real regression beside it still does; a run's page lists its scenarios in the catalog's own order;
and the page of a run that stopped before its report (cancelled, interrupted) says it is partial, lists the
missing pairs and gives the command that resumes it.

The runs are crafted in a SQLite file through the store (every row stamped with its scenario's digest, as a
run's rows are); the viewer is its own process (``python -m evaljobs view``) over that file and the
session's Redis. No page scrolls sideways, what is checked is on screen, and no page logs a console message.
A screenshot of every page at every width is written under the module's output folder (``screenshots/``).
"""
from __future__ import annotations

import pytest
from helpers import Viewer
from helpers.browser import Browser
from helpers.layout import hidden, open_at, overflow, screenshot

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report

MODELS = ["sim/a", "sim/b"]
#: Written out of key order on purpose; ``{refund}`` is what run B's catalog edits.
CATALOG = """\
name: edited
scenarios:
  - key: order-status
    prompt: "Where is my order 1234?"
    expect: {{contains: ["shipped"]}}
  - key: refund
    prompt: "Can I get a refund?"
    expect: {{contains: ["{refund}"]}}
  - key: cancel-order
    prompt: "Please cancel order 5678."
    expect: {{contains: ["cancelled"]}}
"""
ORDER = ["order-status", "refund", "cancel-order"]
#: (scenario, model) → (status in run A, status in run B). ``refund`` × sim/b goes passed → failed because its
#: scenario was edited (changed, not a regression); ``order-status`` × sim/a really regressed.
PAIRS = {
    ("order-status", "sim/a"): ("passed", "failed"),
    ("order-status", "sim/b"): ("passed", "passed"),
    ("refund", "sim/a"): ("passed", "passed"),
    ("refund", "sim/b"): ("passed", "failed"),
    ("cancel-order", "sim/a"): ("failed", "failed"),
    ("cancel-order", "sim/b"): ("passed", "passed"),
}
WIDTHS = (390, 1400)


def _result(key: str, model: str, status: str) -> Result:
    return Result(key, model, status, 1.0 if status == "passed" else 0.0, output=f"answer for {key}",
                  scores={"contains": 1.0 if status == "passed" else 0.0},
                  fault=None if status == "passed" else "missing_content", duration_ms=100, cost=0.0004)


def _finished(catalog, side: int) -> str:
    run = store.create_run(catalog, MODELS, strategy="sequential")
    store.mark_running(run.id)
    for (key, model), statuses in PAIRS.items():
        store.record_result(run.id, _result(key, model, statuses[side]))
    store.finalize(run.id, build_report)
    return run.id


def _stopped(catalog, how) -> str:
    """A run with two of its six pairs in, stopped (``store.cancel`` or ``store.interrupt``)."""
    run = store.create_run(catalog, MODELS, strategy="fanout")
    store.mark_running(run.id)
    for key, model in list(PAIRS)[:2]:
        store.record_result(run.id, _result(key, model, "passed"))
    assert how(run.id)
    return run.id


@pytest.fixture(scope="module")
def site(chromium, module_redis_url, tmp_path_factory):
    folder = tmp_path_factory.mktemp("view-changed")
    db_url = f"sqlite:///{folder}/evaljobs.db"
    store.connect(db_url)
    before = loads_catalog(CATALOG.format(refund="refund"), source="v1.yaml")
    after = loads_catalog(CATALOG.format(refund="money back"), source="v2.yaml")
    runs = {"a": _finished(before, 0), "b": _finished(after, 1),
            "cancelled": _stopped(before, store.cancel), "interrupted": _stopped(before, store.interrupt)}
    viewer = Viewer(db_url, module_redis_url, folder / "view.log")
    browser = Browser(chromium, folder / "profile")
    shots = folder / "screenshots"
    shots.mkdir()
    try:
        yield {"browser": browser, "url": viewer.url, "shots": shots, **runs}
    finally:
        browser.close()
        viewer.close()


def _open(site, path: str, width: int) -> Browser:
    return open_at(site["browser"], site["url"] + path, width)


def _rows(browser: Browser, table: str) -> list[list[str]]:
    return browser.evaluate(f"""[...document.querySelectorAll('#{table} tbody tr[data-kind]')].map(tr => (
        [tr.dataset.key, tr.dataset.model, tr.dataset.kind]))""")


@pytest.mark.parametrize("width", WIDTHS)
def test_an_edited_scenario_shows_as_changed_never_as_a_regression(site, width) -> None:
    browser = _open(site, f"/compare?a={site['a']}&b={site['b']}", width)
    # both of the edited scenario's pairs, the one whose verdict moved (sim/b: passed → failed) and the other
    assert _rows(browser, "changed") == [["refund", "sim/a", "changed"], ["refund", "sim/b", "changed"]]
    assert _rows(browser, "flips") == [["order-status", "sim/a", "regressed"]]  # the real one stays
    headline = browser.evaluate("document.getElementById('headline').textContent")
    assert "6 common pairs: 1 regressed, 0 fixed" in headline and "2 changed" in headline
    deltas = browser.evaluate("""[...document.querySelectorAll('#deltas tbody tr')].map(tr =>
        [tr.dataset.model, ...[...tr.cells].slice(-4).map(td => td.textContent.trim())])""")
    # Regressed, Fixed, F↔E, Changed: sim/b's edited pair is counted as changed only
    assert deltas == [["sim/a", "1", "0", "0", "1"], ["sim/b", "0", "0", "0", "1"]]
    assert overflow(browser) == [], f"compare at {width} px scrolls sideways"
    assert hidden(browser, "#changed tbody tr[data-kind] td:nth-child(2)") == []
    assert browser.console() == [], browser.console()
    screenshot(browser, site["shots"] / f"compare-changed-{width}.png", width)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_run_page_lists_scenarios_in_the_catalogs_order(site, width) -> None:
    browser = _open(site, f"/runs/{site['b']}", width)
    keys = browser.evaluate("[...document.querySelectorAll('#grid th.key a')].map(a => a.textContent.trim())")
    assert keys == ORDER
    assert overflow(browser) == [], f"run at {width} px scrolls sideways"
    assert browser.console() == [], browser.console()
    screenshot(browser, site["shots"] / f"run-order-{width}.png", width)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("status", ["cancelled", "interrupted"])
def test_a_stopped_runs_page_says_it_is_partial_with_the_missing_pairs_and_how_to_resume(site, status,
                                                                                        width) -> None:
    run_id = site[status]
    browser = _open(site, f"/runs/{run_id}", width)
    note = browser.evaluate("""(() => { const s = document.getElementById('partial');
        return s && {status: s.dataset.status, text: s.textContent.replace(/\\s+/g, ' '),
                     resume: document.getElementById('resume').textContent,
                     missing: [...s.querySelectorAll('#missing li')].map(li => li.textContent)}; })()""")
    assert note is not None, f"{status} run's page does not say it is partial"
    assert note["status"] == status and f"{status} with 2/6 pairs finished; 4 missing" in note["text"]
    assert note["missing"] == ["refund × sim/a", "refund × sim/b",
                               "cancel-order × sim/a", "cancel-order × sim/b"]  # the catalog's order
    assert note["resume"] == f"evaljobs recover {run_id}"
    assert overflow(browser) == [], f"a {status} run at {width} px scrolls sideways"
    assert hidden(browser, "#partial, #resume") == []
    assert browser.console() == [], browser.console()
    screenshot(browser, site["shots"] / f"run-{status}-{width}.png", width)


def test_a_finished_runs_page_says_nothing_of_the_kind(site) -> None:
    browser = _open(site, f"/runs/{site['b']}", 1400)
    assert browser.evaluate("document.getElementById('partial')") is None
