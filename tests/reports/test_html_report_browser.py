"""The HTML report in a real headless Chromium: it loads without console messages or network requests,
shows every pair, and clicking a cell shows its conversation, tool calls and grades — with hostile
model output shown as inert text.

One browser serves the whole module (``tests/helpers/browser.py``: headless Chromium over the
DevTools protocol; the ``chromium`` fixture fails, never skips, without it); clicks are real mouse
events at the cell's position, and every console message, uncaught exception,
Content-Security-Policy violation and network request is recorded.
"""
from __future__ import annotations

import pytest

from evaljobs.reports.html import render_html
from evaljobs.reports.build import build_report
from evaljobs.evaluation.result import Result
from helpers import ORDER_LOOKUP, claimed_cancel, shipped_order
from helpers.browser import Browser, BrowserError, Node

XSS = ('<script>document.title="pwned"</script><img src=x onerror="document.body.dataset.pwned=1">'
       '<svg onload="document.body.dataset.pwned=2"></svg>')
MODELS = ["sim/fast", "sim/smart", "openai/gpt-4.1"]
RUN = {
    "id": "r_browser",
    "catalog_name": "support",
    "digest": "sha256:" + "cd" * 32,
    "models": MODELS,
    "strategy": "fanout",
    "created_at": "2025-03-01T10:00:00+00:00",
    "started_at": "2025-03-01T10:00:01+00:00",
    "finished_at": "2025-03-01T10:01:01+00:00",
    "context": {"tenant": "acme"},
}


def _messages(question: str, answer: str, call: bool = False) -> list[dict]:
    messages = [{"role": "system", "content": "You are Acme's support agent. " * 5},
                {"role": "user", "content": question}]
    if call:
        messages += ORDER_LOOKUP
    return messages + [{"role": "assistant", "content": answer}]


def results() -> list[Result]:
    rows = [
        shipped_order(
            output="Order 1234 has shipped.",
            duration_ms=120,
            input_tokens=90,
            output_tokens=12,
            tool_calls=[
                {
                    "name": "lookup_order",
                    "arguments": {"order_id": "1234"},
                    "result": {"status": "shipped"},
                    "error": None,
                    "duration_ms": 1.25,
                }
            ],
            details={
                "turns": 2,
                "messages": _messages("Where is order 1234?", "Order 1234 has shipped.", call=True),
            },
        ),
        claimed_cancel(duration_ms=80,
                       messages=_messages("Please cancel order 5678.", "Sure, consider it done!")),
        Result.errored("refund-policy", "sim/fast", "HTTP 400 from sim: simulated bad request", attempts=2),
        Result(
            "xss",
            "sim/smart",
            "failed",
            0.5,
            scores={"not_contains": 0.0},
            fault="forbidden_content",
            output=XSS,
            details={"forbidden": [XSS], "messages": _messages(XSS, XSS)},
            tool_calls=[{"name": XSS, "arguments": {"q": XSS}, "result": XSS, "error": None}],
        ),
    ]
    statuses = ("passed", "passed", "failed", "errored")
    for i in range(200):
        for m, model in enumerate(MODELS):
            status = statuses[(i + m) % 4]
            if (f"bulk-{i:03d}", model) in {(r.scenario_key, r.model) for r in rows}:
                continue
            rows.append(Result(f"bulk-{i:03d}", model, status, 1.0 if status == "passed" else 0.25,
                               fault=None if status == "passed" else "missing_content",
                               error="timeout" if status == "errored" else None,
                               details={"messages": _messages(f"question {i}", f"answer {i}")}))
    return rows


@pytest.fixture(scope="module")
def page(chromium, tmp_path_factory):
    """The report (with a baseline) written once; one browser for the module."""
    rows = results()
    report = build_report({**RUN, "expected": len(rows)}, rows)
    baseline = build_report({**RUN, "id": "r_before"},
                            [Result(r.scenario_key, r.model, "passed", 1.0) for r in rows])
    folder = tmp_path_factory.mktemp("html")
    path = folder / "report.html"
    path.write_text(render_html(report, rows, baseline=baseline), encoding="utf-8")
    browser = Browser(chromium, folder / "profile")
    try:
        yield browser, path.as_uri(), report
    finally:
        browser.close()


@pytest.fixture
def browser(page):
    """The report freshly loaded (its script has run); console and network records start empty."""
    browser, url, report = page
    browser.navigate("about:blank")
    browser.events.clear()
    browser.navigate(url)
    browser.wait_for("document.body.dataset.ready")
    return browser


def _index(report: dict) -> dict[tuple[str, str], int]:
    return {(r["scenario_key"], r["model"]): i for i, r in enumerate(report["results"])}


def _open(browser: Browser, i: int) -> Node:
    browser.click(f'#grid a[href="#p{i}"]')
    try:
        browser.wait_for(f'document.getElementById("panel").getAttribute("data-pair") === "{i}"', timeout=5)
    except BrowserError as exc:
        raise BrowserError(f"pair {i} did not open; console: {browser.console()}") from exc
    return browser.html()


def _panel(dom: Node) -> Node:
    return dom.by_id("panel")


def _clean(browser: Browser, dom: Node, url: str) -> None:
    """Nothing logged, nothing fetched, no script run from the data."""
    assert browser.console() == []
    assert {u.split("#")[0] for u in browser.requests()} <= {url}
    body = next(dom.iter("body"))
    assert "data-pwned" not in body.attrs and "data-errors" not in body.attrs
    assert next(dom.iter("title")).text().startswith("evaljobs · support")


def test_page_loads_cleanly_and_shows_every_pair(page, browser) -> None:
    _, url, report = page
    dom = browser.html()
    _clean(browser, dom, url)
    assert browser.requests() == [url]  # the file itself, and nothing else
    body = next(dom.iter("body"))
    assert body.attrs["data-ready"] == str(len(report["results"]))
    assert "hidden" in dom.by_id("errors").attrs and "hidden" in _panel(dom).attrs
    grid = dom.by_id("grid")
    models = [th.attrs["title"] for th in next(grid.iter("thead")).iter("th") if "title" in th.attrs]
    assert models == MODELS
    seen = {}
    for tr in next(grid.iter("tbody")).iter("tr"):
        key = next(tr.iter("th")).text()
        for model, td in zip(models, tr.iter("td")):
            links = list(td.iter("a"))
            if links:
                seen[(key, model)] = (td.attrs["class"], links[0].attrs["href"])
    index = _index(report)
    assert len(seen) == len(report["results"]) == 604
    for row in report["results"]:
        cls, href = seen[(row["scenario_key"], row["model"])]
        assert href == f"#p{index[row['scenario_key'], row['model']]}"
        assert cls == {"passed": "p", "failed": "f", "errored": "e"}[row["status"]]
    assert "Compared with baseline r_before" in dom.by_id("baseline").text()


def test_clicking_a_failed_cell_shows_grades_and_conversation(page, browser) -> None:
    _, url, report = page
    i = _index(report)["cancel-order", "sim/fast"]
    dom = _open(browser, i)
    _clean(browser, dom, url)
    panel = _panel(dom)
    assert "hidden" not in panel.attrs
    text = panel.text()
    assert "cancel-order × sim/fast" in text and "expected_tool_not_called" in text
    assert "baseline: passed → failed (regressed)" in text
    grades = {tds[0].text(): tds[1].text() for tds in
              ([*tr.iter("td")] for tr in panel.iter("tr")) if len(tds) == 2}
    assert grades == {"contains": "0.000", "expected_tools": "0.000", "response_present": "1.000"}
    assert "missing" in text and "cancel_order" in text and "5678" in text
    messages = [n for n in panel.iter("div") if "msg" in (n.attrs.get("class") or "").split()]
    roles = [next(c for c in m.children if isinstance(c, Node)).text() for m in messages]
    assert roles == ["system", "user", "assistant"]
    assert messages[0].text().count("You are Acme's support agent.") == 5  # shared text resolved
    assert messages[1].text().endswith("Please cancel order 5678.")
    assert "Sure, consider it done!" in messages[2].text()
    selected = [td for td in dom.by_id("grid").iter("td") if "sel" in (td.attrs.get("class") or "")]
    assert len(selected) == 1 and next(selected[0].iter("a")).attrs["href"] == f"#p{i}"


def test_cells_show_tool_calls_and_errors_and_the_panel_closes(page, browser) -> None:
    _, url, report = page
    index = _index(report)
    tools = _panel(_open(browser, index["order-status", "sim/fast"])).text()
    assert "Tool calls (1)" in tools and "lookup_order" in tools and '"status": "shipped"' in tools
    assert "→ lookup_order({\"order_id\": \"1234\"})" in tools and "result of call_1" in tools
    assert "Conversation (5 messages)" in tools and "90 in / 12 out" in tools
    dom = _open(browser, index["refund-policy", "sim/fast"])  # another cell replaces the panel's pair
    errored = _panel(dom).text()
    assert "refund-policy × sim/fast" in errored and "HTTP 400 from sim: simulated bad request" in errored
    assert "Attempts2" in errored and "lookup_order" not in errored
    assert len([td for td in dom.by_id("grid").iter("td") if "sel" in (td.attrs.get("class") or "")]) == 1
    browser.press("Escape", 27)
    browser.wait_for('document.getElementById("panel").hidden')
    _open(browser, index["bulk-007", "sim/smart"])
    browser.click("#close")
    browser.wait_for('document.getElementById("panel").hidden')
    _clean(browser, browser.html(), url)


def test_a_link_to_a_pair_opens_it(page, browser) -> None:
    _, url, report = page
    i = _index(report)["bulk-042", "openai/gpt-4.1"]
    browser.navigate("about:blank")
    browser.navigate(f"{url}#p{i}")
    browser.wait_for(f'document.getElementById("panel").getAttribute("data-pair") === "{i}"')
    assert "bulk-042 × openai/gpt-4.1" in _panel(browser.html()).text()


def test_hostile_model_output_is_shown_as_text_and_never_runs(page, browser) -> None:
    _, url, report = page
    dom = _open(browser, _index(report)["xss", "sim/smart"])
    _clean(browser, dom, url)  # an injected script or image would also show as a CSP violation
    panel = _panel(dom)
    assert panel.text().count(XSS) >= 5  # question, answer, output, grader detail, tool name / args / result
    assert [n.tag for n in panel.iter() if n.tag in ("script", "img", "svg", "iframe")] == []
    assert browser.evaluate("document.querySelectorAll('#panel img, #panel script, #panel svg').length") == 0
    assert [s.attrs.get("type") for s in dom.iter("script")] == ["application/json", None]
