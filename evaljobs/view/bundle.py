"""``evaljobs view --export DIR``: one run as a folder of static pages that opens from disk, with no server.

The pages are the viewer's own templates rendered once — the run (every scenario on one page), each
scenario with its models side by side, each pair's transcript — plus the stylesheet and the results as
CSV and JSON Lines. What needs a server is left out: forms (filters, baselines, diffs) are removed, links
to pages the bundle does not have lose their ``href``, and there is no script at all (the viewer's only
script follows live runs). Links between the bundle's pages are relative, so the folder can be zipped,
mailed or published anywhere, and opened with ``file://``; nothing is fetched from the network.
"""
from __future__ import annotations

import hashlib
import html
import re
import shutil
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from evaljobs import store
from evaljobs.errors import UsageError
from evaljobs.view import charts, queries
from evaljobs.view.config import HERE
from evaljobs.view.exports import csv_text, jsonl_text
from evaljobs.view.routes import environment
from evaljobs.view.transcript import transcript_page

#: No script of any kind, no connection, images only inline; the stylesheet from the bundle's folder.
BUNDLE_CSP = "default-src 'none'; style-src 'self'; img-src data:; base-uri 'none'; form-action 'none'"
_HREF = re.compile(r'\b(href|action)="([^"]*)"')
_FORM = re.compile(r"<form\b.*?</form>", re.DOTALL)
_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script>\s*", re.DOTALL)
_NAV = re.compile(r"<nav>.*?</nav>", re.DOTALL)


def _slug(*parts: object) -> str:
    """A file name for ``parts``: readable, safe on every file system, and unique (a hash of the parts)."""
    text = "--".join(str(p) for p in parts)
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60].strip("._") or "page"
    return f"{readable}-{hashlib.sha1(text.encode()).hexdigest()[:8]}.html"


class _Links:
    """Turns the viewer's absolute links into the bundle's relative file names (None: no such page here)."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.base = f"/runs/{run_id}"

    def target(self, url: str) -> str | None:
        parts = urlsplit(url)
        path, query = parts.path, parse_qs(parts.query)
        if parts.scheme or parts.netloc:  # an external link in an answer: kept as it is
            return url
        if url.startswith("#"):
            return url
        if path == self.base:
            return "index.html"
        if path in (f"{self.base}/results.csv", f"{self.base}/results.jsonl"):
            return path.rsplit("/", 1)[1]
        if path.startswith(f"{self.base}/scenarios/"):
            key = unquote(path[len(f"{self.base}/scenarios/"):])
            return f"scenarios/{_slug(key)}"
        if path == f"{self.base}/transcript":
            key, model = (query.get("key") or [""])[0], (query.get("model") or [""])[0]
            epoch = (query.get("epoch") or ["0"])[0]
            return f"transcripts/{_slug(key, model, epoch)}"
        if path == "/static/view.css":
            return "static/view.css"
        return None


def _rewrite(page: str, links: _Links, depth: int) -> str:
    """The bundle's version of a rendered page: no forms, no script, no nav, relative links."""
    page = _SCRIPT.sub("", page)
    # The server's Content-Security-Policy header, as far as a file can carry one: no script, nothing fetched.
    page = page.replace(
        '<meta charset="utf-8">',
        f'<meta charset="utf-8">\n<meta http-equiv="Content-Security-Policy" content="{BUNDLE_CSP}">',
        1,
    )
    page = _FORM.sub("", page)
    page = _NAV.sub("", page)
    up = "../" * depth

    def link(match: re.Match) -> str:
        attribute, value = match.group(1), html.unescape(match.group(2))
        target = links.target(value)
        if target is None:
            return 'data-offline="not in this bundle"'
        if target.startswith(("http://", "https://", "mailto:", "#")) or urlsplit(target).scheme:
            return f'{attribute}="{html.escape(target)}"'
        return f'{attribute}="{html.escape(up + target)}"'

    return _HREF.sub(link, page)


def export_run(run_id: str, directory: str | Path) -> list[Path]:
    """Write ``run_id``'s bundle into ``directory`` (created; files of an earlier bundle are replaced)."""
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{directory}: exists and is not a folder; give a folder for the bundle")
    _clear_earlier_bundle(target, directory)
    env = environment()
    links = _Links(run_id)
    written: list[Path] = []

    def write(name: str, text: str) -> None:
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)

    def page(name: str, template: str, **context: object) -> None:
        rendered = env.get_template(template).render(**context)
        write(name, _rewrite(rendered, links, name.count("/")))

    try:
        run_view = queries.run_page(run_id, page_size=1_000_000)
    except queries.NotFound as exc:
        raise UsageError(str(exc)) from None
    page(
        "index.html",
        "run.html",
        p=run_view,
        params=[],
        sort="catalog",
        dir="asc",
        chosen=[],
        fault="",
        model="",
        tag="",
        group="",
        q="",
        pass_chart=charts.pass_rates(run_view.models),
        cost_chart=charts.cost_vs_pass_rate(run_view.models),
        latency_chart=charts.latency(run_view.models),
        pair_statuses=queries.PAIR_STATUSES,
        live=False,
        partial=store.unfinished(run_id),  # an exported stopped run says it is partial, as the viewer does
    )
    results = store.list_results(run_id)
    for key in sorted({r.scenario_key for r in results} | {row.key for row in run_view.rows}):
        page(f"scenarios/{_slug(key)}", "scenario.html", p=queries.scenario_page(run_id, key))
    for r in results:
        page(f"transcripts/{_slug(r.scenario_key, r.model, r.epoch)}", "transcript.html",
             p=transcript_page(run_id, r.scenario_key, r.model, r.epoch))
    (target / "static").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / "static" / "view.css", target / "static" / "view.css")
    written.append(target / "static" / "view.css")
    labels = store.labels_for_run(run_id)
    write("results.csv", csv_text(results, labels))
    write("results.jsonl", jsonl_text(results, labels))
    return written


#: What a bundle consists of: an earlier export is exactly these (and only these are removed to replace it).
_BUNDLE = {"index.html", "scenarios", "transcripts", "static", "results.csv", "results.jsonl"}


def _clear_earlier_bundle(target: Path, shown: str | Path) -> None:
    """Empty or new: nothing to do. An earlier bundle: removed whole, or its pages of scenarios and pairs the
    new run lacks would stay, unlinked but published with it. Anything else in the folder: refused,
    untouched."""
    if not target.is_dir():
        return
    names = {p.name for p in target.iterdir()}
    if not names:
        return
    if "index.html" not in names or not names <= _BUNDLE:
        others = ", ".join(sorted(names - _BUNDLE)[:3]) or "no index.html"
        raise UsageError(
            f"{shown}: is not empty and holds no earlier export ({others}); give a new or empty folder"
        )
    for name in names:
        path = target / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


__all__ = ["export_run"]
