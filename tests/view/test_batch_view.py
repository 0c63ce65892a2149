"""The viewer's fleet page with open provider batches, on a phone, a tablet and a desktop (390, 768, 1400 px)
in headless Chromium: the page never scrolls sideways and each batch's row stays readable.

The batches are real rows of the store (parked requests, claimed, their provider ids committed), with the
long names real deployments have (an Azure deployment, a dated Anthropic model), in a SQLite file; the
viewer is its own process over that file and the session's Redis. A screenshot at each width is
written under the module's output folder.
"""
from __future__ import annotations

import pytest
from helpers import Viewer
from helpers.browser import Browser
from helpers.layout import WIDTHS, hidden, overflow, screenshot, set_width

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.store import batches as stored

GROUPS = [("azure-eastus2-batch-deployment", "gpt-4o-mini-2024-07-18-global-batch"),
          ("anthropic", "claude-3-5-haiku-20241022"), ("sim", "m1")]


@pytest.fixture(scope="module")
def fleet(chromium, module_redis_url, tmp_path_factory):
    folder = tmp_path_factory.mktemp("batch-view")
    db_url = f"sqlite:///{folder}/evaljobs.db"
    store.connect(db_url)
    catalog = loads_catalog(
        "name: wide\nscenarios:\n"
        + "".join(
            f'  - key: scenario-{i}\n    prompt: "[sim: say hi]"\n    expect: {{contains: [hi]}}\n'
            for i in range(3)
        ),
        source="wide.yaml",
    )
    run = store.create_run(catalog, ["sim/m1"], strategy="fanout", options={"batch": ["sim"]})
    store.mark_running(run.id)
    for n, (provider, model) in enumerate(GROUPS):
        for i in range(3):
            stored.park(
                f"ej-{n}-{i}-t0",
                run_id=run.id,
                provider=provider,
                model=model,
                scenario_key=f"scenario-{i}",
                model_spec=f"{provider}/{model}",
                epoch=0,
                turn=0,
                body="{}",
            )
        key, _ = stored.claim(run.id, provider, model, 1000)
        stored.submitted(key, f"batch_{'6721f0e5a3c48190a1b2c3d4e5f6a7b8' * 2}"[:60], "in_progress")
        stored.progressed(key, done=n, failed=0, provider_status="in_progress")
    viewer = Viewer(db_url, module_redis_url, folder / "view.log")
    browser = Browser(chromium, folder / "profile")
    try:
        yield browser, viewer.url, run.id, folder
    finally:
        browser.close()
        viewer.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_fleet_page_with_open_batches_fits_every_width(fleet, width) -> None:
    browser, url, run_id, folder = fleet
    set_width(browser, width)
    browser.navigate("about:blank")
    browser.events.clear()
    browser.navigate(url + "/fleet")
    browser.wait_for("document.body && document.body.dataset.ready")
    rows = browser.evaluate("[...document.querySelectorAll('#batches tbody tr')].map(tr => tr.textContent)")
    assert len(rows) == len(GROUPS) and all(run_id in row for row in rows)
    assert overflow(browser) == [], f"the fleet page with open batches at {width} px scrolls sideways"
    # Every cell of every batch (run, provider, model, status, counts, age) is on screen, not scrolled away.
    assert hidden(browser, "#batches tbody tr td", min_width=30) == [], (
        f"batch cells at {width} px are out of sight"
    )
    assert browser.console() == [], browser.console()
    screenshot(browser, folder / f"fleet-batches-{width}.png", width)
