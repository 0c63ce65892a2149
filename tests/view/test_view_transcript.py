"""Reviewing answers in ``evaljobs view``: a pair's transcript, answers as safe Markdown, two models' answers
side by side, the results as CSV and JSON Lines, and a run exported as static pages that open from disk.

A real run on the simulated provider (the ``init`` starter — a tool call and a judged rubric — plus a
Markdown answer that tries to run script, load an image and link to ``javascript:``) is made with
``EVALJOBS_STORE_TRANSCRIPTS=on`` through a providers entry with an API key, so the raw requests and
responses are kept and the key must be scrubbed from them. The viewer runs as its own process; the
pages are read in headless Chromium, at phone, tablet and desktop widths too. The exported bundle is
opened with ``file://`` and every request the browser makes is checked to be a file of the bundle.
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from helpers import Viewer
from helpers.browser import Browser
from helpers.layout import WIDTHS, hidden, overflow, screenshot, set_width

from evaljobs import config, store
from evaljobs.api import Session
from evaljobs.starter import init_project

SECRET = "sk-live-0123456789abcdefSECRET"
MARKDOWN = (
    "# Refund steps\\n\\n**Bold** and a table:\\n\\n| step | what |\\n|---|---|\\n| 1 | apologise |\\n\\n"
    "<script>document.title='pwned'</script> <img src=x onerror=alert(1)> "
    "[click](javascript:alert(1)) [docs](https://example.com/docs) ![pixel](http://203.0.113.9/p.png)"
)
EXTRA = f"""
  - key: markdown
    prompt: "Explain the refund steps. [sim: say {MARKDOWN}]"
    expect: {{contains: [apologise]}}
  - key: formula
    prompt: "Add one and one. [sim: say =1+1 is two, said with the key {SECRET}]"
    expect: {{contains: [two]}}
"""


@pytest.fixture(scope="module")
def site(chromium, module_redis_url, tmp_path_factory, module_simulated_provider):
    folder = tmp_path_factory.mktemp("transcript")
    sim = module_simulated_provider(latency=0.0)
    init_project(folder / "evals")
    catalog = folder / "evals" / "catalog.yaml"
    catalog.write_text(catalog.read_text(encoding="utf-8") + EXTRA, encoding="utf-8")
    providers = folder / "providers.yaml"
    providers.write_text(
        f"providers:\n  keyed: {{base_url: '{sim.url}', api_key_env: FH_KEY, prices: {{'*': [1, 2]}}}}\n",
        encoding="utf-8",
    )
    db = f"sqlite:///{folder}/evaljobs.db"
    previous = config.configured()
    config.configure(config.Settings.from_env({"FH_KEY": SECRET, "EVALJOBS_SIM_URL": sim.url}),
                     store_transcripts=True)
    try:
        os.environ["FH_KEY"] = SECRET  # the provider entry reads its key where a real one would
        with Session(db=db, broker="memory", width=2, providers=str(providers)) as session:
            kept = session.submit(str(catalog), ["keyed/smart", "keyed/fast"], strategy="sequential")
        config.configure(config.Settings.from_env({"EVALJOBS_SIM_URL": sim.url}), store_transcripts=False)
        with Session(db=db, broker="memory", width=2, providers=str(providers)) as session:
            plain = session.submit(str(catalog), ["keyed/smart"], strategy="sequential")
    finally:
        os.environ.pop("FH_KEY", None)
        config.restore(previous)
    store.connect(db)
    viewer = Viewer(db, module_redis_url, folder / "view.log")
    browser = Browser(chromium, folder / "profile")
    try:
        yield {"browser": browser, "url": viewer.url, "kept": kept.id, "plain": plain.id, "db": db,
               "folder": folder}
    finally:
        browser.close()
        viewer.close()


def _open(site, path: str, width: int = 1400) -> Browser:
    set_width(site["browser"], width)
    return site["browser"].open_page(site["url"] + path)


def _transcript(run: str, key: str, model: str) -> str:
    return f"/runs/{run}/transcript?" + urlencode({"key": key, "model": model, "epoch": 0})


def _until(browser: Browser, expression: str, timeout: float = 10.0) -> None:
    """Wait for ``expression`` across a page load (a navigation destroys the page's context mid-wait)."""
    browser.wait_across_loads(expression, timeout)


def _clean(browser: Browser, origin: str) -> None:
    assert browser.console() == [], browser.console()
    assert all(u.startswith((origin, "data:")) or u == "about:blank" for u in browser.requests())
    assert browser.evaluate("document.title") != "pwned"


def test_the_transcript_shows_every_turn_with_its_timing_and_raw_call(site) -> None:
    browser = _open(site, _transcript(site["kept"], "order-status", "keyed/smart"))
    roles = browser.evaluate("[...document.querySelectorAll('#timeline li.step')].map(li => li.dataset.role)")
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    turns = browser.evaluate(
        "[...document.querySelectorAll('#timeline [data-turn]')].map(s => s.textContent)"
    )
    assert len(turns) == 2 and all("took" in t and " in / " in t for t in turns), turns
    assert "tool_calls" in turns[0] and "stop" in turns[1]
    assert browser.evaluate("document.querySelector('[data-tool]').textContent").startswith(
        "lookup_order took"
    )
    assert browser.evaluate("document.querySelector('pre.call').textContent").startswith("→ lookup_order(")
    requests = browser.evaluate(
        "[...document.querySelectorAll('details[data-raw=request] pre')].map(p => p.textContent)"
    )
    responses = browser.evaluate(
        "[...document.querySelectorAll('details[data-raw=response] pre')].map(p => p.textContent)"
    )
    assert len(requests) == len(responses) == 2
    assert (
        json.loads(requests[0])["model"] == "smart"
        and json.loads(requests[1])["messages"][-1]["role"] == "tool"
    )
    assert json.loads(responses[0])["choices"][0]["finish_reason"] == "tool_calls"
    _clean(browser, site["url"])


def test_the_judge_prompt_and_answer_are_in_the_transcript(site) -> None:
    browser = _open(site, _transcript(site["kept"], "refund-policy", "keyed/fast"))
    assert "RUBRIC:" in browser.evaluate("document.getElementById('judge-prompt').textContent")
    answer = json.loads(browser.evaluate("document.getElementById('judge-answer').textContent"))
    assert answer["score"] < 0.5 and "rubric" in answer["reason"]
    _clean(browser, site["url"])


def test_raw_bodies_are_kept_only_when_asked_and_never_with_the_key(site) -> None:
    browser = _open(site, _transcript(site["plain"], "order-status", "keyed/smart"))
    assert browser.evaluate("document.querySelectorAll('details.raw').length") == 0
    assert "raw bodies not kept (run with --trace-content" in browser.evaluate(
        "document.querySelector('#timeline h2').textContent"
    )
    # timing always
    assert len(browser.evaluate("[...document.querySelectorAll('#timeline [data-turn]')]")) == 2
    kept = _open(site, _transcript(site["kept"], "formula", "keyed/smart"))
    request = kept.evaluate("document.querySelector('details[data-raw=request] pre').textContent")
    assert "said with the key ***" in request and SECRET not in request
    store.connect(site["db"])
    stored = json.dumps([r.details.get("timeline") for r in store.list_results(site["kept"])])
    assert SECRET not in stored and '"request"' in stored and '"response"' in stored


def test_answers_render_as_markdown_without_markup_of_their_own(site) -> None:
    for path in (_transcript(site["kept"], "markdown", "keyed/smart"),
                 f"/runs/{site['kept']}/scenarios/markdown"):
        browser = _open(site, path)
        md = "document.querySelector('.md')"
        assert browser.evaluate(f"{md}.querySelector('h1').textContent") == "Refund steps"
        assert browser.evaluate(f"{md}.querySelector('strong').textContent") == "Bold"
        assert browser.evaluate(f"{md}.querySelectorAll('table td').length") == 2
        assert browser.evaluate("document.querySelectorAll('main script, main img, main iframe').length") == 0
        assert "<script>document.title='pwned'</script>" in browser.evaluate(f"{md}.textContent")
        hrefs = browser.evaluate(f"[...{md}.querySelectorAll('a')].map(a => [a.getAttribute('href'), a.rel])")
        assert hrefs == [
            ["https://example.com/docs", "noopener noreferrer nofollow"],
            ["http://203.0.113.9/p.png", "noopener noreferrer nofollow"],
        ]  # the image: a link, not a fetch
        headers = browser.evaluate("fetch(location.href).then(r => r.headers.get('content-security-policy'))")
        assert "script-src 'self'" in headers and "unsafe-inline" not in headers
        _clean(browser, site["url"])


def test_two_models_answers_side_by_side(site) -> None:
    browser = _open(site, f"/runs/{site['kept']}/scenarios/order-status")
    browser.click("#diff-form button[type=submit]")
    _until(browser, "location.pathname.endsWith('/diff') && document.body.dataset.ready")
    rows = browser.evaluate("""[...document.querySelectorAll('#diff tbody tr')].map(tr =>
        [tr.dataset.kind, ...[...tr.cells].map(td => td.textContent)])""")
    assert rows == [["changed", "Your order 1234 has shipped and arrives on Tuesday.", "It is on its way!"]]
    heads = browser.evaluate("[...document.querySelectorAll('#diff th')].map(th => th.textContent)")
    assert (
        "keyed/smart" in heads[0]
        and "passed" in heads[0]
        and "keyed/fast" in heads[1]
        and "failed" in heads[1]
    )
    _clean(browser, site["url"])


def test_results_export_as_csv_and_jsonl(site) -> None:
    with httpx.Client(base_url=site["url"]) as client:
        as_csv = client.get(f"/runs/{site['kept']}/results.csv")
        as_jsonl = client.get(f"/runs/{site['kept']}/results.jsonl")
        assert client.get(f"/runs/{site['kept']}/results.xlsx").status_code == 404
    assert as_csv.status_code == 200 and as_csv.headers["content-type"].startswith("text/csv")
    assert "attachment" in as_csv.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert len(rows) == 10 and {r["model"] for r in rows} == {"keyed/smart", "keyed/fast"}
    formula = next(r for r in rows if r["scenario_key"] == "formula" and r["model"] == "keyed/smart")
    assert formula["output"].startswith("'=1+1 is two"), "a cell a spreadsheet would compute is quoted"
    judged = next(r for r in rows if r["scenario_key"] == "refund-policy" and r["model"] == "keyed/smart")
    assert judged["judge_model"] == "sim/judge" and float(judged["judge_score"]) > 0.9
    lines = [json.loads(line) for line in as_jsonl.text.splitlines()]
    assert len(lines) == 10 and all(
        {"scenario_key", "model", "status", "details"} <= set(line) for line in lines
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_transcript_and_diff_fit_every_screen(site, width) -> None:
    shots = site["folder"] / "screenshots"
    shots.mkdir(exist_ok=True)
    for name, path, results in (
        ("transcript", _transcript(site["kept"], "order-status", "keyed/smart"), "#timeline li.step"),
        ("transcript-markdown", _transcript(site["kept"], "markdown", "keyed/smart"), "#timeline li.step"),
        ("diff", f"/runs/{site['kept']}/diff?key=order-status&a=keyed/smart&b=keyed/fast", "#diff td"),
    ):
        browser = _open(site, path, width)
        browser.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")  # raw bodies too
        assert overflow(browser) == [], f"{path} at {width} px"
        assert hidden(browser, results, min_width=100) == []
        screenshot(browser, shots / f"{name}-{width}.png", width)


def test_an_exported_run_opens_from_disk_with_no_network_and_no_script(cli, site,
                                                                       tmp_path) -> None:
    out = tmp_path / "bundle"
    result = cli("view", "--db", site["db"], "--export", str(out), "--run", site["kept"])
    assert result.exit_code == 0, result.output
    assert f"wrote run {site['kept']} to {out}/" in result.output
    pages = sorted(p for p in out.rglob("*.html"))
    assert len(pages) == 1 + 5 + 10  # the run, each scenario, each pair's transcript
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "<script" not in text.replace("&lt;script", ""), page
        assert " on" + "error=" not in text.replace("&lt;img src=x on" + "error", ""), page
    assert (out / "results.csv").exists() and (out / "results.jsonl").exists()
    browser = site["browser"]
    set_width(browser, 390)
    browser.navigate("about:blank")
    browser.events.clear()
    browser.navigate((out / "index.html").as_uri())
    assert browser.evaluate("document.scripts.length") == 0
    assert len(browser.evaluate("[...document.querySelectorAll('#grid td.cell')]")) == 10
    assert (
        browser.evaluate("getComputedStyle(document.querySelector('table.grid tbody tr')).borderTopStyle")
        == "solid"
    )
    assert overflow(browser) == []
    seen = len(browser.events)
    browser.click("#grid th.key a[href*='order-status']")
    browser._until(
        lambda: any(e["method"] == "Page.loadEventFired" for e in browser.events[seen:]), "scenario page"
    )
    assert browser.evaluate("location.protocol") == "file:" and "/scenarios/" in browser.evaluate(
        "location.pathname"
    )
    seen = len(browser.events)
    browser.click("article.answer[data-model='keyed/smart'] a.transcript-link")
    browser._until(
        lambda: any(e["method"] == "Page.loadEventFired" for e in browser.events[seen:]), "transcript"
    )
    assert len(browser.evaluate("[...document.querySelectorAll('details[data-raw=request]')]")) == 2
    assert browser.evaluate("document.scripts.length") == 0
    requests = browser.requests()
    assert requests and all(u.startswith((out.as_uri(), "data:")) or u == "about:blank"
                            for u in requests), requests
    assert browser.console() == [], browser.console()
    assert (
        Path(out / "static" / "view.css").read_text()
        == (Path(__file__).parents[2] / "evaljobs" / "view" / "static" / "view.css").read_text()
    )


def test_an_export_replaces_an_earlier_bundle_and_never_mixes_into_another_folder(cli, site,
                                                                                  tmp_path) -> None:
    """Exporting the one-model run where the two-model run was exported left the other run's five extra
    transcripts in the folder: published, the bundle carried a run nobody chose to share. An earlier
    bundle is replaced whole; a folder holding anything else is refused, and nothing in it is touched."""
    out = tmp_path / "bundle"

    def export(run: str, folder: Path):
        return cli("view", "--db", site["db"], "--export", str(folder), "--run", run)

    assert export(site["kept"], out).exit_code == 0
    assert len(list((out / "transcripts").glob("*.html"))) == 10
    done = export(site["plain"], out)
    assert done.exit_code == 0, done.output
    assert len(list((out / "transcripts").glob("*.html"))) == 5
    assert not [p for p in out.rglob("*") if p.is_file() and site["kept"] in p.read_text(encoding="utf-8")]
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("mine", encoding="utf-8")
    refused = export(site["plain"], mine)
    assert refused.exit_code == 2 and refused.output.count("\n") == 1, refused.output
    assert "is not empty and holds no earlier export" in refused.output
    assert sorted(p.name for p in mine.iterdir()) == ["todo.txt"]
