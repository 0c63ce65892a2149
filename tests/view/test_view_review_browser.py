"""Human review in a real headless Chromium (issue 43's acceptance): at 390 and at 1400 px a reviewer labels
pairs of a run with the keyboard only (``p``, ``f``, ``c`` + text + Enter, ``j``), reloads and finds every
label; the run's JSON export carries them; a second run of the same catalog that gives the same answers
shows them as "reviewed in" the first run; comments full of markup stay text, and no page logs a console
message (a CSP violation would be one).

The viewer is its own process on a loopback port with no ``--token``: the browser logs in for writes with
the token the viewer wrote to its file (the path is in the viewer's first line, the token never is).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from helpers import finished_run, viewer_and_browser
from helpers.browser import Browser
from helpers.layout import overflow, set_width

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result

MARKUP = '<img src=x onerror="document.body.dataset.pwned=1"><script>document.title="pwned"</script>'
KEYS = [f"q{i:02d}" for i in range(8)]
MODELS = ["sim/a", "sim/b"]
CATALOG = "name: reviewed\nscenarios:\n" + "".join(
    f'  - {{key: {k}, prompt: "question {k}", expect: {{contains: [yes]}}}}\n' for k in KEYS)
#: (run, width) → the pairs labelled there: five each, ten in all
PER_WIDTH = 5


def _answer(key: str, model: str) -> str:
    return f"answer to {key} by {model} {MARKUP}" if key == "q03" else f"answer to {key} by {model}"


def _run(catalog) -> str:
    statuses = {(key, model): "failed" if (i + len(model)) % 3 == 0 else "passed"
                for i, key in enumerate(KEYS) for model in MODELS}
    return finished_run(catalog, MODELS, [Result(key, model, status, 1.0 if status == "passed" else 0.0,
                                                 output=_answer(key, model))
                                          for (key, model), status in statuses.items()])


@pytest.fixture(scope="module")
def site(chromium, tmp_path_factory):
    folder = tmp_path_factory.mktemp("review")
    db_url = f"sqlite:///{folder}/evaljobs.db"
    store.connect(db_url)
    catalog = loads_catalog(CATALOG, source="reviewed.yaml")
    first = _run(catalog)
    with viewer_and_browser(chromium, folder, db_url) as (viewer, browser):
        token_file = re.search(r"token in (\S+\.token) ", viewer.log.read_text())
        assert token_file, viewer.log.read_text()
        token = Path(token_file.group(1)).read_text().strip()
        browser.navigate(f"{viewer.url}/?token={token}")  # the login: a cookie, then the page without it
        browser.wait_for("document.body && document.body.dataset.ready")
        assert "token" not in browser.evaluate("location.href")
        yield {"browser": browser, "url": viewer.url, "first": first, "catalog": catalog, "db": db_url}


def _review(site, run: str) -> Browser:
    return site["browser"].open_page(f"{site['url']}/runs/{run}/review", "document.body.dataset.reviewReady")


def _labels(browser: Browser) -> dict[tuple[str, str], str]:
    """What the page shows per pair: its label's text, or "" when it has none."""
    found = browser.evaluate("""[...document.querySelectorAll('#queue > li.pair')].map(li =>
        [li.dataset.key, li.dataset.model, li.querySelector('[data-field="label"]').textContent.trim()])""")
    return {(k, m): text for k, m, text in found if text != "not reviewed"}


def _type(browser: Browser, text: str) -> None:
    browser.call("Input.insertText", {"text": text})


def test_a_reviewer_labels_ten_pairs_by_keyboard_at_both_widths_and_finds_them_after_a_reload(site):
    given: dict[tuple[str, str], str] = {}
    for width in (390, 1400):
        set_width(site["browser"], width)
        browser = _review(site, site["first"])
        assert overflow(browser) == [], f"the review page at {width} px scrolls sideways"
        for n in range(PER_WIDTH):
            li = browser.evaluate("(() => { const li = document.querySelector('#queue > li.current');"
                                  " return [li.dataset.key, li.dataset.model, li.dataset.verdict]; })()")
            assert li[2] == "", "the queue puts unlabelled pairs first"
            saved = int(browser.evaluate("document.body.dataset.saved || '0'"))
            if n == 2:  # a comment: c, the text, Enter (it saves with the machine's verdict)
                browser.press("c", 67)
                browser.wait_for("document.activeElement.classList.contains('comment-in')")
                _type(browser, f"looked at {width}: {MARKUP}")
                browser.press("Enter", 13)
                verdict = browser.evaluate(
                    "document.querySelector('#queue > li.current').dataset.machine")
            else:
                verdict = "pass" if n % 2 == 0 else "fail"
                browser.press(verdict[0], ord(verdict[0].upper()))
            browser.wait_for(f"Number(document.body.dataset.saved || '0') > {saved}")
            given[(li[0], li[1])] = verdict
            if n == 2:  # after Enter the focus is back on the queue's next pair
                browser.wait_for("!document.activeElement.closest('input')")
        browser.press("k", 75)  # previous, then next: the current pair moves without writing anything
        browser.press("j", 74)
        assert browser.console() == [], browser.console()
    assert len(given) == 2 * PER_WIDTH

    browser = _review(site, site["first"])  # a reload finds every label, as text
    shown = _labels(browser)
    assert set(shown) == set(given)
    for pair, verdict in given.items():
        assert shown[pair].startswith(f"human: {verdict}") and " by viewer at " in shown[pair]
    commented = [text for text in shown.values() if "looked at" in text]
    assert len(commented) == 2 and all(MARKUP in text for text in commented), "markup stays text"
    assert browser.evaluate("document.body.dataset.pwned") is None and "pwned" not in browser.evaluate(
        "document.title")
    assert browser.evaluate("document.getElementById('labelled').textContent") == str(2 * PER_WIDTH)
    assert browser.console() == [], browser.console()

    # the export carries them (the browser's cookie is the session: read it as the browser would)
    exported = browser.evaluate(f"fetch('/runs/{site['first']}/results.jsonl').then(r => r.text())")
    human = {(x["scenario_key"], x["model"]): x["human"] for x in map(json.loads, exported.splitlines())}
    assert {pair: h["verdict"] for pair, h in human.items() if h} == given

    # a second run of the same catalog gives the same answers: already reviewed, in the first run
    store.connect(site["db"])
    second = _run(site["catalog"])
    browser = _review(site, second)
    carried = _labels(browser)
    assert set(carried) == set(given)
    assert all(f"reviewed in {site['first']}" in text for text in carried.values())
    assert browser.console() == [], browser.console()
    # and the page of the second run starts its queue with what is still unreviewed
    assert browser.evaluate("document.querySelector('#queue > li.current').dataset.key + '|' + "
                            "document.querySelector('#queue > li.current').dataset.model") not in {
        f"{k}|{m}" for k, m in given}


def test_a_browser_without_the_token_sees_no_controls_and_cannot_write(site, tmp_path):
    anonymous = httpx.get(f"{site['url']}/runs/{site['first']}/review", timeout=10)
    assert anonymous.status_code == 200 and 'data-act="pass"' not in anonymous.text
    assert "open this viewer once with its token" in anonymous.text
