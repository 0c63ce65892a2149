"""``latest`` and unique id prefixes in the viewer's addresses, as the CLI takes them (issue 43).

``/runs/latest``, ``/runs/r_20261205`` (a unique prefix), ``/compare?a=latest&b=…`` answer with a redirect to
the same page under the full run id, so the address a reviewer copies names one run for good (``latest``
moves on). An exact id, or a name matching nothing or several runs, goes on to the page unchanged (which
says 404 in one line).
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode

from starlette.concurrency import run_in_threadpool

from evaljobs import store
from evaljobs.errors import UsageError

_RUN_PATH = re.compile(r"^/runs/([^/]+)(/.*)?$")


def _resolved(text: str) -> str | None:
    """The full id ``text`` names, or None when it is one already or names no single run."""
    store.hold_connection()  # this pool thread keeps its SQLite connection (see live.held)
    try:
        found = store.resolve_run_id(text)
    except (store.UnknownRun, UsageError):
        return None
    return None if found == text else found


class CanonicalRuns:
    """Pure ASGI middleware: a GET of a page naming a run by ``latest`` or a prefix is redirected."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            location = await self._location(scope)
            if location is not None:
                await send({"type": "http.response.start", "status": 307,
                            "headers": [(b"location", location.encode("latin-1")), (b"content-length", b"0"),
                                        (b"cache-control", b"no-store")]})
                await send({"type": "http.response.body", "body": b""})
                return
        await self.app(scope, receive, send)

    async def _location(self, scope) -> str | None:
        path, query = scope["path"], scope.get("query_string", b"").decode("latin-1")
        found = _RUN_PATH.match(path)
        if found:
            full = await run_in_threadpool(_resolved, found.group(1))
            if full is None:
                return None
            rest = found.group(2) or ""
            return f"/runs/{quote(full)}{quote(rest)}" + (f"?{query}" if query else "")
        if path == "/compare" and query:
            pairs = parse_qsl(query, keep_blank_values=True)
            changed = False
            out = []
            for name, value in pairs:
                if name in ("a", "b") and value:
                    full = await run_in_threadpool(_resolved, value)
                    if full is not None:
                        value, changed = full, True
                out.append((name, value))
            return f"/compare?{urlencode(out)}" if changed else None
        return None


__all__ = ["CanonicalRuns"]
