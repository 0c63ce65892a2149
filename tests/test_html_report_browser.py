"""The HTML report in a real headless Chromium: it loads without console messages or network requests,
shows every pair, and clicking a cell shows its conversation, tool calls and grades — with hostile
model output shown as inert text.

Chromium is Debian's ``chromium`` package; ``scripts/test`` installs it when missing. The test fails
(never skips) without it. One browser serves the whole module, driven over the DevTools protocol on a
pipe (``--remote-debugging-pipe``: NUL-separated JSON on file descriptors 3 and 4), so only the
standard library is needed; clicks are real mouse events at the cell's position, and every console
message, uncaught exception, Content-Security-Policy violation and network request is recorded.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from evaljobs.reports.html import render_html
from evaljobs.reports.build import build_report
from evaljobs.evaluation.result import Result

BROWSERS = ("chromium", "chromium-browser")
XSS = ('<script>document.title="pwned"</script><img src=x onerror="document.body.dataset.pwned=1">'
       '<svg onload="document.body.dataset.pwned=2"></svg>')
MODELS = ["sim/fast", "sim/smart", "openai/gpt-4.1"]
RUN = {"id": "r_browser", "catalog_name": "support", "digest": "sha256:" + "cd" * 32, "models": MODELS,
       "strategy": "fanout", "created_at": "2025-03-01T10:00:00+00:00", "started_at": "2025-03-01T10:00:01+00:00",
       "finished_at": "2025-03-01T10:01:01+00:00", "context": {"tenant": "acme"}}


def _messages(question: str, answer: str, call: bool = False) -> list[dict]:
    messages = [{"role": "system", "content": "You are Acme's support agent. " * 5},
                {"role": "user", "content": question}]
    if call:
        messages += [{"role": "assistant", "content": None, "tool_calls": [
                         {"id": "call_1", "type": "function",
                          "function": {"name": "lookup_order", "arguments": "{\"order_id\": \"1234\"}"}}]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "{\"status\": \"shipped\"}"}]
    return messages + [{"role": "assistant", "content": answer}]


def results() -> list[Result]:
    rows = [
        Result("order-status", "sim/fast", "passed", 1.0, scores={"contains": 1.0, "expected_tools": 1.0},
               output="Order 1234 has shipped.", duration_ms=120, input_tokens=90, output_tokens=12,
               tool_calls=[{"name": "lookup_order", "arguments": {"order_id": "1234"},
                            "result": {"status": "shipped"}, "error": None, "duration_ms": 1.25}],
               details={"turns": 2, "messages": _messages("Where is order 1234?", "Order 1234 has shipped.",
                                                          call=True)}),
        Result("cancel-order", "sim/fast", "failed", 0.333,
               scores={"response_present": 1.0, "contains": 0.0, "expected_tools": 0.0},
               fault="expected_tool_not_called", output="Sure, consider it done!", duration_ms=80,
               details={"turns": 1, "missing": ["cancelled"],
                        "expected_tools_not_called": [{"name": "cancel_order", "arguments": {"order_id": "5678"}}],
                        "messages": _messages("Please cancel order 5678.", "Sure, consider it done!")}),
        Result.errored("refund-policy", "sim/fast", "HTTP 400 from sim: simulated bad request", attempts=2),
        Result("xss", "sim/smart", "failed", 0.5, scores={"not_contains": 0.0}, fault="forbidden_content",
               output=XSS, details={"forbidden": [XSS], "messages": _messages(XSS, XSS)},
               tool_calls=[{"name": XSS, "arguments": {"q": XSS}, "result": XSS, "error": None}]),
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


# -- a tiny DOM for the page's serialized HTML -------------------------------------------------------------


@dataclass
class Node:
    tag: str
    attrs: dict[str, str | None]
    children: list = field(default_factory=list)

    def iter(self, tag: str | None = None):
        if tag is None or self.tag == tag:
            yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.iter(tag)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def by_id(self, ident: str) -> "Node":
        return next(n for n in self.iter() if n.attrs.get("id") == ident)


class _Builder(HTMLParser):
    VOID = {"meta", "link", "br", "img", "input", "hr", "source", "wbr", "col", "area", "base", "embed"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_endtag(self, tag):
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root


# -- the browser ------------------------------------------------------------------------------------


class BrowserError(AssertionError):
    pass


class Browser:
    """Headless Chromium over the DevTools protocol on a pipe; one page target, events recorded."""

    FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--remote-debugging-pipe")

    def __init__(self, binary: str, profile: Path, timeout: float = 30.0):
        self.timeout = timeout
        cmd_read, self._cmd = os.pipe()
        self._res, res_write = os.pipe()

        def to_fds_3_and_4() -> None:  # in the child: the pipe protocol's fixed descriptors
            command = fcntl.fcntl(cmd_read, fcntl.F_DUPFD, 10)
            result = fcntl.fcntl(res_write, fcntl.F_DUPFD, 10)
            os.dup2(command, 3)
            os.dup2(result, 4)

        self.proc = subprocess.Popen([binary, *self.FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     preexec_fn=to_fds_3_and_4, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_read)
        os.close(res_write)
        self._next = 0
        self._responses: dict[int, dict] = {}
        self.events: list[dict] = []
        self._changed = threading.Condition()
        self._closed = False
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 browser=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 900, "deviceScaleFactor": 1,
                                                         "mobile": False})

    def _read(self) -> None:
        buffer = b""
        while True:
            chunk = os.read(self._res, 1 << 16)
            if not chunk:
                break
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            with self._changed:
                for raw in messages:
                    message = json.loads(raw)
                    if "id" in message:
                        self._responses[message["id"]] = message
                    else:
                        self.events.append(message)
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _until(self, predicate, what: str, timeout: float | None = None):
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._changed:
            while True:
                found = predicate()
                if found:
                    return found
                remaining = deadline - time.monotonic()
                if self._closed or remaining <= 0:
                    raise BrowserError(f"chromium: no {what} ({'exited' if self._closed else 'timed out'})")
                self._changed.wait(remaining)

    def call(self, method: str, params: dict | None = None, *, browser: bool = False) -> dict:
        self._next += 1
        ident = self._next
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if not browser:
            message["sessionId"] = self.session
        os.write(self._cmd, json.dumps(message).encode() + b"\0")
        reply = self._until(lambda: self._responses.pop(ident, None), f"reply to {method}")
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        seen = len(self.events)
        self.call("Page.navigate", {"url": url})
        self._until(lambda: any(e["method"] == "Page.loadEventFired" for e in self.events[seen:]),
                    f"load event for {url}")

    def wait_for(self, expression: str, timeout: float = 10.0) -> Any:
        """Poll a JS expression in the page until it is truthy."""
        return self.evaluate(f"""new Promise((resolve, reject) => {{
            const end = Date.now() + {int(timeout * 1000)};
            (function poll() {{
                const value = ({expression});
                if (value) return resolve(value);
                if (Date.now() > end) return reject(new Error("timed out waiting for: " + {json.dumps(expression)}));
                setTimeout(poll, 20);
            }})();
        }})""")

    def click(self, selector: str) -> None:
        """A real left click (mouse events) in the middle of the element."""
        box = self.evaluate(f"""(() => {{
            const node = document.querySelector({json.dumps(selector)});
            if (!node) return null;
            node.scrollIntoView({{block: "center", inline: "center"}});
            const r = node.getBoundingClientRect();
            return {{x: r.left + r.width / 2, y: r.top + r.height / 2}};
        }})()""")
        if box is None:
            raise BrowserError(f"nothing matches {selector}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box["x"], "y": box["y"], "button": "left",
                                                   "clickCount": 0 if kind == "mouseMoved" else 1})

    def press(self, key: str, code: int) -> None:
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key,
                                                 "windowsVirtualKeyCode": code})

    def html(self) -> Node:
        return parse(self.evaluate("document.documentElement.outerHTML"))

    def console(self) -> list[str]:
        """Every console call, uncaught exception and error/warning log entry (CSP violations are these)."""
        out = []
        for event in list(self.events):
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled":
                out.append(f"console.{params['type']}: " + " ".join(str(a.get("value")) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                out.append(f"exception: {details.get('text')} {details.get('exception', {}).get('description')}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                out.append(f"log {params['entry']['source']}: {params['entry']['text']}")
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in list(self.events) if e["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            if not self._closed:
                self.call("Browser.close", browser=True)
            self.proc.wait(timeout=10)
        except (BrowserError, OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=10)
        finally:
            os.close(self._cmd)
            os.close(self._res)


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed: scripts/test installs it (apt-get install -y chromium); "
                "the HTML report is checked in a real headless browser", pytrace=False)


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
