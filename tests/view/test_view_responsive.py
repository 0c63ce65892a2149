"""``evaljobs view`` on a phone, a tablet and a desktop (390, 768, 1400 px) in headless Chromium.

Every page — runs, a run, a scenario, compare, a live run, the fleet — is measured in the browser at each
width: the page never scrolls sideways (``document.documentElement.scrollWidth <= clientWidth``), every
result is on screen and wide enough to read (a grid cell, a run's row, a model's answer), and chart text is
at least 10 px, overlaps no other text and stays inside its chart. With ``prefers-color-scheme: dark`` the
pages turn dark with readable contrast. A screenshot of every page at every width is written under the
module's output folder (``screenshots/``).

The runs are crafted in a SQLite file (four models, two with long names, so the phone layout has something
to fit); the viewer is its own process over that file and the session's Redis.
"""
from __future__ import annotations

import pytest
from helpers import Viewer
from helpers.browser import Browser
from helpers.layout import (
    WIDTHS,
    background_luminance,
    chart_text_problems,
    contrast,
    hidden,
    overflow,
    screenshot,
    set_width,
)

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report

MODELS = ["sim/fast", "sim/smart", "openrouter/meta-llama/llama-3.3-70b-instruct",
          "anthropic/claude-3-5-haiku-latest"]
KEYS = [
    "order-status",
    "cancel-order",
    "refund-for-a-damaged-item-delivered-late-and-charged-twice",
    "invoice",
]
CATALOG = "name: responsive\nscenarios:\n" + "".join(
    f'  - key: {key}\n    prompt: "Question about {key}, long enough to wrap on a phone screen."\n'
    f'    tags: [t{i}]\n    expect: {{contains: ["yes"]}}\n' for i, key in enumerate(KEYS))
LONG = ("A long answer without many breaks: " + "supercalifragilisticexpialidocious-" * 6
        + " and https://example.com/a/very/long/path/that/does/not/break/anywhere/at/all/on/a/phone")


def _result(key: str, model: str, index: int, side: int) -> Result:
    status = ("passed", "failed", "errored")[(index + side) % 3]
    if status == "errored":
        return Result.errored(key, model, "HTTP 500 from provider: " + "x" * 150)
    answer = LONG if index % 2 else f"yes, {key} for {model}"
    return Result(
        key,
        model,
        status,
        1.0 if status == "passed" else 0.0,
        output=answer,
        scores={"contains": 1.0 if status == "passed" else 0.0},
        fault=None if status == "passed" else "missing_content",
        duration_ms=120 + 40 * index,
        input_tokens=20,
        output_tokens=8,
        cost=0.0004 * (1 + index % 4),
        details={"messages": [{"role": "user", "content": key}, {"role": "assistant", "content": answer}]},
    )


def _run(catalog, side: int, *, finish: bool = True) -> str:
    run = store.create_run(catalog, MODELS, strategy="sequential")
    store.mark_running(run.id)
    pairs = [(k, m) for k in KEYS for m in MODELS]
    for index, (key, model) in enumerate(pairs if finish else pairs[:5]):
        store.record_result(run.id, _result(key, model, index, side))
    if finish:
        store.finalize(run.id, build_report)
    return run.id


@pytest.fixture(scope="module")
def site(chromium, module_redis_url, tmp_path_factory):
    folder = tmp_path_factory.mktemp("responsive")
    db_url = f"sqlite:///{folder}/evaljobs.db"
    store.connect(db_url)
    catalog = loads_catalog(CATALOG, source="responsive.yaml")
    a, b, live = _run(catalog, 0), _run(catalog, 1), _run(catalog, 2, finish=False)
    viewer = Viewer(db_url, module_redis_url, folder / "view.log")
    browser = Browser(chromium, folder / "profile")
    shots = folder / "screenshots"
    shots.mkdir()
    try:
        yield {"browser": browser, "url": viewer.url, "shots": shots, "pages": {
            "runs": ("/", "#runs tbody tr[data-run] td:first-child"),
            "run": (f"/runs/{b}", "#grid td.cell"),
            "scenario": (f"/runs/{b}/scenarios/{KEYS[2]}?baseline={a}", "#answers article.answer"),
            "compare": (f"/compare?a={a}&b={b}", "#flips tbody tr[data-kind] td:first-child"),
            "live": (f"/runs/{live}", "#grid td.cell"),
            "fleet": ("/fleet", "#fleet-runs tbody tr td:first-child"),
        }}
    finally:
        browser.close()
        viewer.close()


def _open(site, page: str, width: int, *, dark: bool = False) -> Browser:
    browser = site["browser"]
    set_width(browser, width, dark=dark)
    browser.navigate("about:blank")
    browser.events.clear()
    browser.navigate(site["url"] + site["pages"][page][0])
    browser.wait_for("document.body && document.body.dataset.ready")
    return browser


def _shot(site, name: str, width: int) -> None:
    screenshot(site["browser"], site["shots"] / f"{name}-{width}.png", width)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", ["runs", "run", "scenario", "compare", "live", "fleet"])
def test_no_sideways_scroll_and_every_result_on_screen(site, page, width) -> None:
    browser = _open(site, page, width)
    assert overflow(browser) == [], f"{page} at {width} px scrolls sideways"
    selector = site["pages"][page][1]
    assert hidden(browser, selector) == [], f"{page} at {width} px hides results"
    if page == "run":
        assert len(browser.evaluate(f"[...document.querySelectorAll('{selector}')]")) == len(KEYS) * len(
            MODELS
        )
        assert chart_text_problems(browser) == [], f"charts at {width} px"
        assert browser.evaluate("document.querySelectorAll('#legend-cost li').length") == len(MODELS)
    assert browser.console() == [], browser.console()
    _shot(site, page, width)


def test_a_phone_reads_each_result_with_its_model_name(site) -> None:
    """At 390 px the grid is a card per scenario: each result says whose it is, and the long answer wraps."""
    browser = _open(site, "run", 390)
    labels = browser.evaluate("""[...document.querySelectorAll('#grid td.cell')].map(td =>
        getComputedStyle(td, '::before').content)""")
    assert sorted(set(labels)) == sorted(f'"{m}"' for m in MODELS)
    cards = browser.evaluate("[...document.querySelectorAll('#grid tbody tr')].map(tr => "
                             "Math.round(tr.getBoundingClientRect().width))")
    assert len(cards) == len(KEYS) and min(cards) >= 360


@pytest.mark.parametrize("page", ["runs", "run", "scenario", "compare", "fleet"])
def test_dark_mode_follows_the_system_with_readable_contrast(site, page) -> None:
    light = _open(site, page, 1400)
    assert background_luminance(light) > 0.8 and contrast(light) >= 7
    dark = _open(site, page, 390, dark=True)
    assert background_luminance(dark) < 0.05, "prefers-color-scheme: dark gives a dark page"
    assert contrast(dark) >= 7 and contrast(dark, "a") >= 4.5
    if dark.evaluate("!!document.querySelector('.muted')"):
        assert contrast(dark, ".muted") >= 4.5
    assert overflow(dark) == []
    _shot(site, f"{page}-dark", 390)
