"""The documentation builds with MkDocs in strict mode: a broken link or a page left out of the nav fails.

(Not ``--quiet``: it hides warnings from strict mode too, and the build passes with broken links.)
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_build_strict(tmp_path) -> None:
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                            str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "index.html").exists()
    providers = (tmp_path / "site" / "providers" / "index.html").read_text(encoding="utf-8")
    for setting in ("initial", "ceiling", "bulk_reserve", "lane"):
        assert setting in providers, f"the governor's '{setting}' is not documented where providers are"


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w-]+\.md)\s*$", nav, re.M))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == listed, (pages - listed, listed - pages)


def test_the_api_page_names_every_public_name_and_session_method() -> None:
    """docs/api.md stays in step with ``evaljobs.__all__`` and :class:`Session`'s public methods."""
    import evaljobs
    from evaljobs.api import Session

    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    quoted = set(re.findall(r"`([\w.]+)`", page))
    missing = [name for name in evaljobs.__all__ if name not in quoted]
    methods = [f"Session.{name}" for name in vars(Session)
               if not name.startswith("_") and callable(getattr(Session, name))]
    missing += [method for method in methods if method not in quoted]
    assert not missing, f"docs/api.md does not mention {missing}"
    api_page = ROOT / "docs" / "api.md"
    # the reference, generated from the docstrings
    assert "::: evaljobs.api.Session" in api_page.read_text(encoding="utf-8")
