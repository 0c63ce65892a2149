"""The viewer fixes of issue 43, each in a real headless Chromium: the baseline's answer beside the new one
on a pair's page; on a phone the key columns first and the rest behind "more columns"; ``latest`` and unique
id prefixes in addresses; a regex search and an "outputs differ" filter on the grid; the live page's cost
following the rows as they land; the conversation ahead of the graders' raw details.

The viewer is its own process (``--broker memory``: it reads the database every second) over a SQLite file
this test writes to.
"""
from __future__ import annotations

import pytest
from helpers import finished_run, viewer_and_browser
from helpers.browser import Browser
from helpers.layout import set_width

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result

MODELS = ["sim/a", "sim/b"]
CATALOG = """\
name: fixes
scenarios:
  - {key: order, prompt: "Where is my order?", expect: {contains: [shipped]}}
  - {key: cancel, prompt: "Cancel it.", expect: {contains: [cancelled]}}
  - {key: refund, prompt: "Refund?", expect: {contains: [refund]}}
"""
#: run → (scenario, model) → answer; "same" answers are equal for both models.
ANSWERS = {
    "a": {("order", "sim/a"): "It shipped Monday.", ("order", "sim/b"): "It shipped Monday.",
          ("cancel", "sim/a"): "Baseline: cancelled.", ("cancel", "sim/b"): "Baseline: cancelled.",
          ("refund", "sim/a"): "No refund.", ("refund", "sim/b"): "No refund."},
    "b": {("order", "sim/a"): "It shipped Monday.", ("order", "sim/b"): "It shipped Monday.",
          ("cancel", "sim/a"): "Order 42 is cancelled.", ("cancel", "sim/b"): "Cannot cancel that.",
          ("refund", "sim/a"): "A refund of $30 is on its way.", ("refund", "sim/b"): "A refund is coming."},
}


def _result(key: str, model: str, answer: str, cost: float | None = 0.25) -> Result:
    status = "passed" if any(w in answer for w in ("shipped", "cancelled", "refund")) else "failed"
    messages = [{"role": "user", "content": f"question for {key}"}, {"role": "assistant", "content": answer}]
    return Result(key, model, status, 1.0 if status == "passed" else 0.0, output=answer, cost=cost,
                  details={"messages": messages, "request": {"raw": "{\"model\": \"" + model + "\"}"}})


def _finished(catalog, answers) -> str:
    return finished_run(catalog, MODELS, [_result(key, model, answer)
                                          for (key, model), answer in answers.items()])


@pytest.fixture(scope="module")
def site(chromium, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fixes")
    db_url = f"sqlite:///{folder}/evaljobs.db"
    store.connect(db_url)
    catalog = loads_catalog(CATALOG, source="fixes.yaml")
    live = store.create_run(catalog, MODELS, strategy="sequential")  # first: "latest" is run b
    store.mark_running(live.id)
    run_a = _finished(catalog, ANSWERS["a"])
    run_b = _finished(catalog, ANSWERS["b"])
    with viewer_and_browser(chromium, folder, db_url) as (viewer, browser):
        yield {"browser": browser, "url": viewer.url, "a": run_a, "b": run_b, "live": live.id, "db": db_url}


def _open(site, path: str, width: int = 1400) -> Browser:
    set_width(site["browser"], width)
    return site["browser"].open_page(site["url"] + path)


def _grid_keys(browser: Browser) -> list[str]:
    return browser.evaluate("[...document.querySelectorAll('#grid tbody tr')].map(tr => "
                            "tr.querySelector('th.key a').textContent)")


def test_the_baseline_answer_stands_beside_the_new_one(site):
    browser = _open(site, f"/runs/{site['b']}/scenarios/cancel?baseline={site['a']}")
    sides = browser.evaluate("""[...document.querySelectorAll('#answers article')].map(a => [a.dataset.model,
        a.querySelector('.md.output').textContent.trim(),
        a.querySelector('.baseline-answer') && a.querySelector('.baseline-answer .output').textContent.trim()
        ])""")
    assert sides == [["sim/a", "Order 42 is cancelled.", "Baseline: cancelled."],
                     ["sim/b", "Cannot cancel that.", "Baseline: cancelled."]]
    assert browser.console() == [], browser.console()


def test_the_conversation_comes_before_the_raw_details(site):
    browser = _open(site, f"/runs/{site['b']}/scenarios/order")
    order = browser.evaluate("[...document.querySelectorAll('#answers article:first-child h3')]"
                             ".map(h => h.textContent.split(' (')[0])")
    assert order.index("Conversation") < order.index("Grader details"), order
    assert order.index("Answer") < order.index("Conversation")


@pytest.mark.parametrize("path", ["/runs/latest", "/runs/{prefix_b}", "/runs/latest/review",
                                  "/compare?a={prefix_a}&b=latest"])
def test_latest_and_unique_prefixes_open_the_run(site, path):
    ids = [site["a"], site["b"], site["live"]]

    def prefix(run: str) -> str:
        for n in range(5, len(run)):
            if sum(other.startswith(run[:n]) for other in ids) == 1:
                return run[:n]
        return run

    target = path.format(prefix_a=prefix(site["a"]), prefix_b=prefix(site["b"]))
    if "review" in target:
        browser = _open(site, target)
        assert browser.evaluate("location.pathname") == f"/runs/{site['b']}/review"
        return
    browser = _open(site, target)
    if target.startswith("/compare"):
        assert browser.evaluate("location.search") == f"?a={site['a']}&b={site['b']}"
        assert browser.evaluate("document.querySelectorAll('#flips tbody tr').length") > 0
    else:
        assert browser.evaluate("location.pathname") == f"/runs/{site['b']}"
        assert browser.evaluate("document.title").endswith(site["b"])


def test_regex_search_and_the_outputs_differ_filter(site):
    browser = _open(site, f"/runs/{site['b']}")
    browser.click("#q")
    browser.call("Input.insertText", {"text": r"refund of \$\d+|order \d+"})
    browser.click("#regex")
    browser.click('#grid-filters button[type="submit"]')
    browser.wait_across_loads("location.search.includes('regex=1') && document.body.dataset.ready")
    assert sorted(_grid_keys(browser)) == ["cancel", "refund"]  # "Order 42 …" and "A refund of $30 …"
    assert browser.evaluate("document.getElementById('regex').checked") is True
    browser = _open(site, f"/runs/{site['b']}?differ=1")
    assert sorted(_grid_keys(browser)) == ["cancel", "refund"], "both models answered 'order' the same"
    browser.navigate(f"{site['url']}/runs/{site['b']}?q=%28unclosed&regex=1")  # a 400, one line
    assert "q='(unclosed' is not a regular expression" in browser.evaluate("document.body.textContent")
    # (a+)+$ would backtrack for hours on a long answer
    browser.navigate(f"{site['url']}/runs/{site['b']}?q=%28a%2B%29%2B%24&regex=1")
    assert "repeats a group that repeats" in browser.evaluate("document.body.textContent")


@pytest.mark.parametrize("page", ["runs", "run", "compare"])
def test_a_phone_shows_the_key_columns_and_the_rest_behind_more(site, page):
    path, table, key = {"runs": ("/", "#runs", ["Run", "Status", "Pass rate", "Cost"]),
                        "run": (f"/runs/{site['b']}", "#model-table", ["Model", "Pass rate", "Cost"]),
                        "compare": (f"/compare?a={site['a']}&b={site['b']}", "#flips",
                                    ["Kind", "Scenario", "Model", "A → B", ""])}[page]
    shown = f"[...document.querySelectorAll('{table} thead th')].filter(th => th.offsetParent).map(th => " \
            "th.textContent.trim())"
    browser = _open(site, path, 390)
    assert browser.evaluate(shown) == key
    button = browser.evaluate(f"!!document.querySelector('{table} + button.more-cols').offsetParent")
    assert button, "a visible 'more columns' button follows the table"
    browser.click(f"{table} + button.more-cols")
    assert len(browser.evaluate(shown)) > len(key)
    browser = _open(site, path, 1400)
    assert len(browser.evaluate(shown)) > len(key), "a wide screen shows every column"
    assert not browser.evaluate(f"!!document.querySelector('{table} + button.more-cols').offsetParent")


def test_the_live_page_counts_the_cost_as_rows_land(site):
    browser = _open(site, f"/runs/{site['live']}")
    assert browser.evaluate("document.getElementById('run-cost').textContent") == "$0.0000"
    store.connect(site["db"])
    store.record_result(site["live"], _result("order", "sim/a", "It shipped.", cost=0.125))
    browser.wait_for("document.getElementById('run-cost').textContent === '$0.1250'", timeout=20)
    store.record_result(site["live"], _result("order", "sim/b", "It shipped.", cost=None))
    browser.wait_for("document.getElementById('run-cost').textContent === '≥ $0.1250 (1 unknown)'",
                     timeout=20)
    assert browser.console() == [], browser.console()
