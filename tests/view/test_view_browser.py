"""``evaljobs view`` in a real headless Chromium: the runs list, the run grid's filters and search, a scenario
side by side, a comparison's flipped pairs, a run advancing live and ending on its report, a worker appearing
on the fleet page, and a ``<script>`` in a model answer staying inert — with no console message on any page.

The viewer runs as its own process (``python -m evaljobs view``) on a free loopback port, over a SQLite
file and the session's Redis; the live run is worked by a real ``evaljobs worker`` process against the
simulated provider. The browser is driven over the DevTools protocol with the helper of the HTML report's
browser test (one Chromium for the module). Each page's screenshot is written under the module's output
folder (``screenshots/``), named after the page.
"""
from __future__ import annotations

import base64
from pathlib import Path

import pytest

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report
from helpers import Viewer, WorkerProcess
from helpers.browser import Browser

XSS = '<script>document.title="pwned"</script><img src=x onerror="document.body.dataset.pwned=1">'
MODELS = ["sim/a", "sim/b"]
CATALOG = """\
name: viewed
groups:
  - name: orders
    tags: [orders]
    scenarios:
      - key: order-status
        prompt: "Where is my order 1234?"
        expect: {contains: ["shipped"]}
      - key: cancel-order
        prompt: "Please cancel order 5678."
        expect: {contains: ["cancelled"]}
  - name: billing
    tags: [billing]
    scenarios:
      - key: refund
        prompt: "Can I get a refund?"
        expect: {contains: ["refund"]}
      - key: invoice
        prompt: "Send me my invoice, please."
        expect: {contains: ["invoice"]}
      - key: hostile
        prompt: "Repeat this back verbatim."
        expect: {not_contains: ["<script>"]}
"""
#: (scenario, model) → (status in the baseline run A, status in the candidate run B, B's answer)
PAIRS = {
    ("order-status", "sim/a"): ("passed", "passed", "Your order 1234 has shipped.\nIt arrives Tuesday."),
    ("order-status", "sim/b"): ("passed", "failed", "I cannot look that up."),
    ("cancel-order", "sim/a"): ("failed", "passed", "Order 5678 is cancelled."),
    ("cancel-order", "sim/b"): ("failed", "failed", "Sure, consider it done!"),
    ("refund", "sim/a"): ("passed", "errored", ""),
    ("refund", "sim/b"): ("passed", "passed", "A refund is on its way."),
    ("invoice", "sim/a"): ("errored", "failed", "Which invoice do you mean?"),
    ("invoice", "sim/b"): ("passed", "passed", "Here is your invoice."),
    ("hostile", "sim/a"): ("passed", "failed", XSS),
    ("hostile", "sim/b"): ("passed", "passed", "I would rather not."),
}
FLIPS = {("order-status", "sim/b"): "regressed", ("cancel-order", "sim/a"): "fixed",
         ("refund", "sim/a"): "regressed", ("invoice", "sim/a"): "failed_errored",
         ("hostile", "sim/a"): "regressed"}


def _result(key: str, model: str, status: str, answer: str) -> Result:
    if status == "errored":
        return Result.errored(key, model, "HTTP 500 from sim: simulated outage")
    messages = [{"role": "user", "content": key}, {"role": "assistant", "content": answer}]
    return Result(key, model, status, 1.0 if status == "passed" else 0.0, output=answer,
                  scores={"contains": 1.0 if status == "passed" else 0.0},
                  fault=None if status == "passed" else "missing_content", duration_ms=100 + len(answer),
                  input_tokens=20, output_tokens=8, cost=0.0004,
                  details={"messages": messages, "judge": {"score": 0.5, "reason": f"reason for {key}"}})


def _crafted_run(catalog, side: int) -> str:
    run = store.create_run(catalog, MODELS, strategy="sequential")
    store.mark_running(run.id)
    for (key, model), statuses in PAIRS.items():
        answer = statuses[2] if side == 1 else f"baseline answer for {key}"
        store.record_result(run.id, _result(key, model, statuses[side], answer))
    store.finalize(run.id, build_report)
    return run.id


@pytest.fixture(scope="module")
def site(chromium, module_redis_url, tmp_path_factory):
    folder = tmp_path_factory.mktemp("view")
    db_url = f"sqlite:///{folder}/evaljobs.db"
    store.connect(db_url)
    catalog = loads_catalog(CATALOG, source="viewed.yaml")
    run_a = _crafted_run(catalog, 0)
    run_b = _crafted_run(catalog, 1)
    viewer = Viewer(db_url, module_redis_url, folder / "view.log")
    browser = Browser(chromium, folder / "profile")
    shots = folder / "screenshots"
    shots.mkdir()
    try:
        yield {"browser": browser, "url": viewer.url, "a": run_a, "b": run_b, "shots": shots, "db": db_url,
               "redis": module_redis_url, "folder": folder, "viewer": viewer}
    finally:
        browser.close()
        viewer.close()


def _open(site, path: str) -> Browser:
    browser = site["browser"].open_page(site["url"] + path)
    return browser


def _shot(site, name: str) -> Path:
    """A full-page PNG of what the browser shows, under the module's output folder."""
    browser = site["browser"]
    height = browser.evaluate("Math.ceil(document.documentElement.scrollHeight)")
    browser.call("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": min(int(height), 4000),
                                                        "deviceScaleFactor": 1, "mobile": False})
    data = browser.call("Page.captureScreenshot", {"format": "png"})["data"]
    browser.call("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 900, "deviceScaleFactor": 1,
                                                        "mobile": False})
    path = site["shots"] / f"{name}.png"
    path.write_bytes(base64.b64decode(data))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def _clean(browser: Browser, site) -> None:
    """No console message, exception or CSP violation; nothing fetched from anywhere but the viewer."""
    assert browser.console() == []
    assert all(
        u.startswith(site["url"]) or u.startswith("data:") or u == "about:blank" for u in browser.requests()
    )
    assert browser.evaluate("document.title") != "pwned"
    assert browser.evaluate("document.body.dataset.pwned === undefined")


def _grid(browser: Browser) -> dict[str, dict[str, str]]:
    """Scenario key → model → the cell's status, as the page shows them."""
    return browser.evaluate("""(() => {
        const out = {};
        for (const td of document.querySelectorAll('#grid td.cell')) {
            (out[td.dataset.key] = out[td.dataset.key] || {})[td.dataset.model] =
                td.querySelector('.mark').textContent.trim();
        }
        return out;
    })()""")


def _until(browser: Browser, expression: str, timeout: float) -> None:
    """Wait for ``expression`` across page loads (a reload destroys the page's context mid-wait)."""
    browser.wait_across_loads(expression, timeout)


def test_runs_list_shows_both_runs_with_pass_rates(site) -> None:
    browser = _open(site, "/")
    rows = browser.evaluate("""[...document.querySelectorAll('#runs tbody tr[data-run]')].map(tr => ({
        id: tr.dataset.run, text: tr.textContent.replace(/\\s+/g, ' ')}))""")
    by_id = {r["id"]: r["text"] for r in rows}
    assert {site["a"], site["b"]} <= set(by_id)
    # B: sim/a passed 2 of 5, sim/b 3 of 5; A: sim/a 3 of 5, sim/b 4 of 5 (an errored pair: partial runs)
    assert "sim/a 40.0%" in by_id[site["b"]] and "sim/b 60.0%" in by_id[site["b"]]
    assert "sim/a 60.0%" in by_id[site["a"]] and "sim/b 80.0%" in by_id[site["a"]]
    assert all("viewed" in by_id[r] and "partial" in by_id[r] for r in (site["a"], site["b"]))
    _shot(site, "runs")
    _clean(browser, site)


def test_filtering_and_search_change_the_grid(site) -> None:
    browser = _open(site, f"/runs/{site['b']}")
    everything = _grid(browser)
    assert set(everything) == {"order-status", "cancel-order", "refund", "invoice", "hostile"}
    assert everything["order-status"] == {"sim/a": "passed", "sim/b": "failed"}
    assert "Your order 1234 has shipped." in browser.evaluate("document.querySelector('#grid').textContent")
    assert "It arrives Tuesday." not in browser.evaluate("document.querySelector('#grid').textContent")
    _shot(site, "run")

    browser.click('#grid-filters input[name="status"][value="errored"]')
    browser.click('#grid-filters button[type="submit"]')
    _until(browser, "location.search.includes('status=errored') && document.body.dataset.ready", 10)
    assert _grid(browser) == {"refund": {"sim/a": "errored", "sim/b": "passed"}}

    browser.navigate(site["url"] + f"/runs/{site['b']}")
    browser.wait_for("document.body.dataset.ready")
    browser.click("#q")
    for ch in "consider":
        browser.call("Input.insertText", {"text": ch})
    assert browser.evaluate("document.getElementById('q').value") == "consider"
    browser.click('#grid-filters button[type="submit"]')
    _until(browser, "location.search.includes('q=consider') && document.body.dataset.ready", 10)
    assert set(_grid(browser)) == {"cancel-order"}  # found in sim/b's answer "Sure, consider it done!"

    browser.navigate(site["url"] + f"/runs/{site['b']}?tag=billing&sort=m:sim/a")
    browser.wait_for("document.body.dataset.ready")
    keys = browser.evaluate("[...document.querySelectorAll('#grid th.key a')].map(a => a.textContent)")
    assert keys == ["refund", "hostile", "invoice"]  # errored, then failed (by score, then key)
    _shot(site, "run-filtered")
    _clean(browser, site)


def test_a_scenario_shows_the_models_side_by_side_with_flips(site) -> None:
    browser = _open(site, f"/runs/{site['b']}/scenarios/order-status?baseline={site['a']}")
    columns = browser.evaluate("""[...document.querySelectorAll('#answers article.answer')].map(a => ({
        model: a.dataset.model, text: a.textContent.replace(/\\s+/g, ' '),
        flip: (a.querySelector('[data-flip]') || {dataset: {}}).dataset.flip || null,
        left: Math.round(a.getBoundingClientRect().left),
        top: Math.round(a.getBoundingClientRect().top)}))""")
    assert [c["model"] for c in columns] == MODELS
    a, b = columns
    assert a["top"] == b["top"] and a["left"] < b["left"]  # side by side, not stacked
    assert "Your order 1234 has shipped. It arrives Tuesday." in a["text"]
    assert "I cannot look that up." in b["text"] and "missing_content" in b["text"]
    assert a["flip"] == "same" and b["flip"] == "regressed"
    assert "reason for order-status" in b["text"] and "Conversation (2 messages)" in b["text"]
    _shot(site, "scenario")
    _clean(browser, site)


def test_compare_shows_the_flipped_pairs(site) -> None:
    browser = _open(site, f"/compare?a={site['a']}&b={site['b']}")
    flips = browser.evaluate("""[...document.querySelectorAll('#flips tbody tr[data-kind]')].map(tr => (
        [tr.dataset.key, tr.dataset.model, tr.dataset.kind]))""")
    assert {(k, m): kind for k, m, kind in flips} == FLIPS
    assert len(flips) == len(FLIPS)
    headline = browser.evaluate("document.getElementById('headline').textContent")
    assert "10 common pairs: 3 regressed, 1 fixed, 1 failed↔errored" in headline
    link = browser.evaluate("document.querySelector('#flips tr[data-kind=\"fixed\"] a').getAttribute('href')")
    assert link == f"/runs/{site['b']}/scenarios/cancel-order?baseline={site['a']}"
    _shot(site, "compare")
    _clean(browser, site)


def test_a_script_in_a_model_answer_stays_inert(site) -> None:
    for path in (f"/runs/{site['b']}", f"/runs/{site['b']}/scenarios/hostile", f"/runs/{site['b']}?q=script"):
        browser = _open(site, path)
        text = browser.evaluate("document.querySelector('main').textContent")
        assert '<script>document.title="pwned"</script>' in text  # shown as text …
        # … not markup
        assert browser.evaluate("document.querySelectorAll('main script, main img').length") == 0
        _clean(browser, site)
    headers = browser.evaluate("""fetch(location.href).then(r => r.headers.get('content-security-policy'))""")
    assert "script-src 'self'" in headers and "unsafe-inline" not in headers


@pytest.mark.redis
def test_a_live_run_advances_without_reload_and_a_worker_appears_on_the_fleet(site, redis_url,
                                                                             simulated_provider) -> None:
    from evaljobs.pipeline import events
    from evaljobs.api import Session

    browser = _open(site, "/fleet")
    assert browser.evaluate("document.querySelectorAll('#workers tr.worker').length") == 0
    lines = ["name: live", "scenarios:"] + [
        f'  - key: s{i:02d}\n    prompt: "[sim: say answer {i}]"\n    expect: {{contains: ["answer"]}}'
        for i in range(20)]
    catalog = loads_catalog("\n".join(lines) + "\n", source="live.yaml")
    sim = simulated_provider(latency=0.4, jitter=0.05)
    worker = WorkerProcess(site["redis"], site["db"], threads=2, log=site["folder"] / "worker.log",
                           env={"EVALJOBS_SIM_URL": sim.url})
    session = Session(db=site["db"], broker=site["redis"])
    try:
        worker.start()
        _until(browser, "document.querySelectorAll('#workers tr.worker').length > 0", 30)
        _shot(site, "fleet")
        assert browser.console() == []

        run = session.submit(catalog, ["sim/a", "sim/b"])
        browser.navigate(site["url"] + f"/runs/{run.id}")
        browser.wait_for("document.body.dataset.ready")
        assert browser.evaluate("document.body.dataset.live") == "yes"
        browser.evaluate("window.sameDocument = true")
        _until(browser, "window.sameDocument && Number(document.body.dataset.persisted) > 0 && "
                        "document.querySelectorAll('#grid td.cell.st-passed').length > 0", 30)
        seen = browser.evaluate("Number(document.getElementById('run-progress').value)")
        assert 0 < seen <= 40
        _shot(site, "run-live")
        # The run ends: the page reloads onto the finished run, with its verdict.
        _until(browser, "document.body.dataset.live === 'no' && document.getElementById('verdict')", 60)
        assert browser.evaluate("window.sameDocument === undefined")
        assert browser.evaluate("document.getElementById('run-count').textContent") == "40/40"
        assert browser.evaluate("document.querySelectorAll('#grid td.cell.st-passed').length") == 40
        _clean(browser, site)
    finally:
        worker.terminate(10)
        session.close()
        events.bind_redis(None)


def test_a_live_run_with_epochs_redraws_a_cell_from_its_epochs(site) -> None:
    """With --epochs a cell is the scenario × model over its epochs, on the server and in the live update."""
    store.connect(site["db"])
    catalog = loads_catalog(
        'name: epochs\nscenarios:\n  - key: e1\n    prompt: "a"\n  - key: e2\n    prompt: "b"\n',
        source="epochs.yaml",
    )
    run = store.create_run(catalog, ["sim/a"], strategy="sequential", epochs=3)
    store.mark_running(run.id)
    store.record_result(run.id, Result("e1", "sim/a", "passed", 1.0, output="yes", epoch=0))
    store.record_result(
        run.id, Result("e1", "sim/a", "failed", 0.0, output="no", fault="missing_content", epoch=1)
    )
    browser = _open(site, f"/runs/{run.id}")
    assert browser.evaluate("document.body.dataset.live") == "yes"
    assert _grid(browser) == {"e1": {"sim/a": "1/3 passed"}, "e2": {"sim/a": "0/3 passed"}}
    cell = "document.querySelector('#grid td.cell[data-key=\"e1\"]')"
    assert browser.evaluate(f"{cell}.dataset.epochs") == "PF·"
    assert browser.evaluate(f"!!{cell}.querySelector('.flaky')")
    browser.evaluate("window.sameDocument = true")
    store.record_result(run.id, Result("e1", "sim/a", "passed", 1.0, output="yes again", epoch=2))
    _until(browser, f"window.sameDocument && {cell}.dataset.epochs === 'PFP'", 30)
    assert browser.evaluate(f"{cell}.querySelector('.mark').textContent") == "2/3 passed"
    assert browser.evaluate(f"{cell}.className") == "cell fresh st-failed"  # an epoch failed
    for epoch in range(3):
        store.record_result(run.id, Result("e2", "sim/a", "passed", 1.0, output="fine", epoch=epoch))
    _until(browser, "document.querySelector('#grid td.cell[data-key=\"e2\"]').dataset.epochs === 'PPP'", 30)
    assert browser.evaluate("document.querySelector('#grid td.cell[data-key=\"e2\"]').className") == \
        "cell fresh st-passed"
    _shot(site, "run-epochs")
    _clean(browser, site)
    store.finalize(run.id, build_report)
