"""Layout checks measured in the browser: sideways overflow, results off screen, chart text too small or
overlapping, and colour contrast — what a screenshot shows, as numbers a test can assert on.

Each function runs JavaScript in the page through :class:`helpers.browser.Browser` and returns what is
wrong (an empty list when nothing is), so a failing assertion names the element at fault.
"""
from __future__ import annotations

import json
from typing import Any

#: The widths the viewer is checked at: a phone, a tablet, a desktop.
WIDTHS = (390, 768, 1400)


def set_width(browser: Any, width: int, *, dark: bool = False) -> None:
    """Emulate a screen ``width`` px wide (a phone's touch and scale below 700), light or dark."""
    browser.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1,
                                                        "mobile": width < 700})
    browser.call("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme",
                                                              "value": "dark" if dark else "light"}]})


def open_at(browser: Any, url: str, width: int) -> Any:
    """Open ``url`` on a screen ``width`` px wide, with the browser's events cleared, once the page is
    ready (its ``body[data-ready]``)."""
    set_width(browser, width)
    browser.navigate("about:blank")
    browser.events.clear()
    browser.navigate(url)
    browser.wait_for("document.body && document.body.dataset.ready")
    return browser


def overflow(browser: Any) -> list[str]:
    """Why the page scrolls sideways: the page's widths, and the elements that stick out on the right."""
    return browser.evaluate("""(() => {
        const root = document.documentElement;
        if (root.scrollWidth <= root.clientWidth) return [];
        const out = [`scrollWidth ${root.scrollWidth} > clientWidth ${root.clientWidth}`];
        for (const el of document.body.querySelectorAll('*')) {
            const r = el.getBoundingClientRect();
            if (r.right > root.clientWidth + 0.5 && out.length < 12) {
                const tag = `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}.${el.className}`;
                out.push(`${tag} right ${Math.round(r.right)}`);
            }
        }
        return out;
    })()""")


def hidden(browser: Any, selector: str, *, min_width: int = 60) -> list[str]:
    """The elements matching ``selector`` that a reader cannot see: too narrow, or outside the screen's
    width."""
    return browser.evaluate(f"""(() => {{
        const width = document.documentElement.clientWidth;
        const out = [];
        const nodes = [...document.querySelectorAll({json.dumps(selector)})];
        if (!nodes.length) return ['nothing matches ' + {json.dumps(selector)}];
        for (const el of nodes) {{
            const r = el.getBoundingClientRect();
            const style = getComputedStyle(el);
            const name = (el.dataset.key || '') + ' '
                + (el.dataset.model || el.textContent.trim().slice(0, 30));
            if (style.display === 'none' || style.visibility === 'hidden') out.push(name + ': not displayed');
            else if (r.width < {min_width}) out.push(name + ': ' + Math.round(r.width) + ' px wide');
            else if (r.left < -0.5 || r.right > width + 0.5) {{
                out.push(name + ': from ' + Math.round(r.left) + ' to ' + Math.round(r.right) + ' px');
            }}
        }}
        return out;
    }})()""")


def chart_text_problems(browser: Any, *, smallest: float = 10.0) -> list[str]:
    """Chart text smaller than ``smallest`` px on screen, overlapping other text, or outside its chart."""
    return browser.evaluate(f"""(() => {{
        const out = [];
        for (const svg of document.querySelectorAll('svg.chart')) {{
            const frame = svg.getBoundingClientRect();
            const boxes = [];
            for (const t of svg.querySelectorAll('text')) {{
                if (!t.textContent.trim()) continue;
                const size = parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a;
                const r = t.getBoundingClientRect();
                const name = svg.id + ' "' + t.textContent.trim() + '"';
                if (size < {smallest}) out.push(name + ': ' + size.toFixed(1) + ' px');
                if (r.left < frame.left - 0.5 || r.right > frame.right + 0.5) {{
                    out.push(name + ': outside its chart');
                }}
                for (const [other, b] of boxes) {{
                    if (r.left < b.right - 0.5 && b.left < r.right - 0.5
                            && r.top < b.bottom - 0.5 && b.top < r.bottom - 0.5) {{
                        out.push(name + ' overlaps "' + other + '"');
                    }}
                }}
                boxes.push([t.textContent.trim(), r]);
            }}
        }}
        return out;
    }})()""")


def contrast(browser: Any, selector: str = "body") -> float:
    """The WCAG contrast ratio of the element's text colour against the page's background colour."""
    return browser.evaluate(f"""(() => {{
        const parse = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
        const lum = ([r, g, b]) => {{
            const f = (v) => {{ v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }};
            return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
        }};
        const el = document.querySelector({json.dumps(selector)});
        const fg = lum(parse(getComputedStyle(el).color));
        const bg = lum(parse(getComputedStyle(document.body).backgroundColor));
        return (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
    }})()""")


def background_luminance(browser: Any) -> float:
    """The page background's relative luminance (0 black … 1 white)."""
    return browser.evaluate("""(() => {
        const background = getComputedStyle(document.body).backgroundColor;
        const [r, g, b] = background.match(/[\\d.]+/g).slice(0, 3).map(Number);
        const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
        return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    })()""")


def screenshot(browser: Any, path: Any, width: int) -> None:
    """A full-page PNG of what the browser shows at ``width`` px, written to ``path``."""
    import base64

    height = int(browser.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
    browser.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": min(height, 5000),
                                                        "deviceScaleFactor": 1, "mobile": width < 700})
    data = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"})["data"])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    path.write_bytes(data)
