"""Model answers as Markdown, safely: CommonMark and tables, with no way for an answer to add markup of its
own.

Raw HTML in an answer is escaped (``html: False``), images are not rendered (an answer must not make the
reader's browser fetch anything; the CSP would block it anyway), link targets that are not http(s), mailto
or relative are dropped by markdown-it's own check (``javascript:``, ``data:``…), and every link opens with
``rel="noopener noreferrer nofollow"``. The result is HTML the templates mark safe; no script is involved,
so the Content-Security-Policy stays as it is.
"""
from __future__ import annotations

import functools
from typing import Any

from markupsafe import Markup

#: Answers longer than this are shown as plain text (rendering is for reading, not for megabytes).
MARKDOWN_CAP = 200_000


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table").disable("image")

    def link_open(renderer, tokens, index, options, env):
        tokens[index].attrSet("rel", "noopener noreferrer nofollow")
        return renderer.renderToken(tokens, index, options, env)

    parser.add_render_rule("link_open", link_open)
    return parser


def render(text: str | None) -> Markup:
    """``text`` as sanitised HTML (an empty string for no text)."""
    if not text:
        return Markup("")
    if len(text) > MARKDOWN_CAP:
        return Markup("<pre>") + Markup.escape(text) + Markup("</pre>")
    return Markup(_parser().render(text))


__all__ = ["MARKDOWN_CAP", "render"]
