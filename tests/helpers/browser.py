"""Headless Chromium for the HTML report and viewer tests, driven over the DevTools protocol on a pipe.

Chromium is Debian's ``chromium`` package; ``scripts/test`` installs it when missing, and a test
that needs it fails (never skips) without it. The protocol runs on a pipe
(``--remote-debugging-pipe``: NUL-separated JSON on file descriptors 3 and 4), so only the
standard library is needed; clicks are real mouse events at the element's position, and every
console message, uncaught exception, Content-Security-Policy violation and network request is
recorded. :func:`parse` turns a page's HTML into a small tree to assert on.
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

BROWSERS = ("chromium", "chromium-browser")


def find_chromium() -> str | None:
    """The path of the first Chromium binary on PATH, or None."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


# -- a tiny DOM for a page's serialized HTML --------------------------------------------------------


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

    #: The last two set the process model only: one renderer process for the pages a test opens, where
    #: site isolation started one per site and navigation (the viewer's port is a site of its own), ~15 %
    #: of the browser modules' CPU; what a page renders and runs is the same.
    FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--remote-debugging-pipe",
             "--disable-features=site-per-process,IsolateOrigins", "--renderer-process-limit=1")

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
                if (Date.now() > end) {{
                    return reject(new Error("timed out waiting for: " + {json.dumps(expression)}));
                }}
                setTimeout(poll, 20);
            }})();
        }})""")

    def open_page(self, url: str, ready: str = "document.body && document.body.dataset.ready") -> "Browser":
        """A fresh load of ``url`` (from a blank page, with the event log cleared), once ``ready`` holds."""
        self.navigate("about:blank")
        self.events.clear()
        self.navigate(url)
        self.wait_for(ready)
        return self

    def wait_across_loads(self, expression: str, timeout: float = 10.0) -> None:
        """Wait for ``expression`` while the page may be navigating (a load destroys the context mid-wait)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.evaluate(f"!!({expression})"):
                    return
            except BrowserError:
                pass
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression}; console: {self.console()}")
            time.sleep(0.05)

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
            self.call(
                "Input.dispatchMouseEvent",
                {
                    "type": kind,
                    "x": box["x"],
                    "y": box["y"],
                    "button": "left",
                    "clickCount": 0 if kind == "mouseMoved" else 1,
                },
            )

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
                out.append(
                    f"console.{params['type']}: " + " ".join(str(a.get("value")) for a in params["args"])
                )
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                out.append(
                    f"exception: {details.get('text')} {details.get('exception', {}).get('description')}"
                )
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                out.append(f"log {params['entry']['source']}: {params['entry']['text']}")
        return out

    def requests(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in list(self.events)
            if e["method"] == "Network.requestWillBeSent"
        ]

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
