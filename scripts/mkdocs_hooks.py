"""MkDocs hooks: the root documents (README.md, RELIABILITY.md, BENCHMARKS.md, CHANGELOG.md) as pages.

Why: those files live at the repository root, where GitHub and readers of a checkout find
them, and their links are relative to the root (``docs/bench.png``). A docs page that is just
``<!-- include FILE -->`` gets the file's text with the links made relative to ``docs/``, so
there is one copy of each and strict mode still checks every link.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_INCLUDE = re.compile(r"^<!-- include (\S+) -->\s*$", re.MULTILINE)
_PAGES = {
    "RELIABILITY.md": "reliability.md",
    "BENCHMARKS.md": "benchmarks.md",
    "CHANGELOG.md": "changelog.md",
    "README.md": "getting-started.md",
}


def _relink(text: str) -> str:
    text = re.sub(r"\]\(docs/", "](", text)
    text = re.sub(r"\[([^\]]+)\]\(LICENSE\)", r"`\1` (in the repository)", text)  # a root file, not a page
    for name, page in _PAGES.items():
        text = text.replace(f"]({name}", f"]({page}")
    return text


def on_page_markdown(markdown: str, page, config, files) -> str:
    return _INCLUDE.sub(lambda m: _relink((ROOT / m.group(1)).read_text(encoding="utf-8")), markdown)
