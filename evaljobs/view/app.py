"""The viewer's ASGI app: routes, templates, static files, and the guard in front of all of them.

The guard makes the app safe by construction rather than by each route's care:

* writes: any method but GET/HEAD is refused, except a POST of a label (``WRITE_PATH``) by a session
  holding the write token, with its CSRF token and no foreign ``Origin``; ``--read-only`` refuses all;
* a token, when set, is checked on every request (header, cookie, or ``?token=``
  once, which sets the cookie and redirects to the URL without it);
* without a token the app only answers requests whose ``Host`` is the loopback
  address it is bound to, so a web page cannot reach it by DNS rebinding;
* every response carries a Content-Security-Policy without ``unsafe-inline``:
  scripts and styles come only from ``/static``, so markup that slipped through
  escaping still could not run.
"""
from __future__ import annotations

import hashlib
import hmac
from http.cookies import SimpleCookie
import re
from typing import Sequence
from urllib.parse import parse_qsl, urlencode

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from evaljobs.view import live, routes
from evaljobs.view.config import HERE, ViewConfig
from evaljobs.view.metrics import MetricsPage
from evaljobs.view.review import Review
from evaljobs.view.runids import CanonicalRuns

COOKIE = "evaljobs_view"
#: The only paths a write may go to (a POST anywhere else is refused before any route runs).
WRITE_PATH = re.compile(r"^/runs/[^/]+/labels$")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


class Guard:
    """Pure ASGI middleware (streams pass through untouched): method, host, token, writes, headers."""

    def __init__(self, app, config: ViewConfig):
        self.app = app
        self.token = config.token
        self.write_token = config.write_token if config.writes else None
        self.read_only = config.read_only
        self.csrf_key = config.csrf_key
        self.hosts: set[str] | None = None
        if not config.token:
            port = config.port
            self.hosts = {f"{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]")} | {config.host,
                                                                                         f"{config.host}:{port}"}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        writing = scope["method"] not in ("GET", "HEAD")
        if writing and (scope["method"] != "POST" or self.write_token is None
                        or not WRITE_PATH.match(scope["path"])):
            why = "started with --read-only" if self.read_only else "only labels are written, by POST"
            await _plain(send, 405, f"evaljobs view is read-only here ({why})", [(b"allow", b"GET, HEAD")])
            return
        if self.hosts is not None and headers.get("host", "") not in self.hosts:
            await _plain(send, 421, "evaljobs view answers only its loopback address")
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given = query.get("token")
        tokens = [t for t in (self.token, self.write_token) if t]
        if not writing and given is not None and any(_same(given, t) for t in tokens):
            rest = urlencode([(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"))
                              if k != "token"])
            location = local_path(scope) + (f"?{rest}" if rest else "")
            cookie = f"{COOKIE}={cookie_value_for(given)}; Path=/; HttpOnly; SameSite=Strict"
            await _plain(send, 303, "", [(b"location", location.encode("latin-1")),
                                         (b"set-cookie", cookie.encode("latin-1"))])
            return
        bearer = headers.get("authorization", "")
        bearer = bearer[7:] if bearer.startswith("Bearer ") else None
        cookie_value = _cookie(headers)
        if self.token:
            ok = (bearer is not None and _same(bearer, self.token)) or \
                 (cookie_value is not None and _same(cookie_value, cookie_value_for(self.token)))
            if not ok:
                await _plain(
                    send,
                    401,
                    "evaljobs view: open this address once with ?token=YOUR_TOKEN, or "
                    "send Authorization: Bearer",
                )
                return
        by_bearer = self.write_token is not None and bearer is not None and _same(bearer, self.write_token)
        by_cookie = self.write_token is not None and cookie_value is not None and _same(
            cookie_value, cookie_value_for(self.write_token))
        state = scope.setdefault("state", {})
        state["can_write"] = by_bearer or by_cookie
        state["csrf"] = csrf_for(self.csrf_key, cookie_value) if by_cookie and cookie_value else ""
        if writing:
            refused = _refuse_write(headers, by_bearer, by_cookie, state["csrf"])
            if refused:
                await _plain(send, 403, f"evaljobs view: {refused}")
                return

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)


def _cookie(headers: dict[str, str]) -> str | None:
    if "cookie" not in headers:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(headers["cookie"])
        return jar[COOKIE].value if COOKIE in jar else None
    except Exception:  # noqa: BLE001 - a malformed cookie is no token
        return None


def _refuse_write(headers: dict[str, str], by_bearer: bool, by_cookie: bool, csrf: str) -> str | None:
    """Why a POST is refused (None: it may write).

    A write needs the write token: as a bearer header (a script; a browser never adds one by itself), or
    as the login cookie plus that session's CSRF token in ``X-CSRF-Token`` (a page of this viewer read it
    from its own ``<meta>``; a foreign page cannot). A browser's ``Origin`` must be this host, and a
    cross-site fetch is refused by its ``Sec-Fetch-Site`` even before the CSRF token is looked at.
    """
    if not (by_bearer or by_cookie):
        return "writing needs the token: open this address once with ?token=… (see how the viewer started)"
    origin = headers.get("origin")
    host = headers.get("host", "")
    if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
        return f"a write from another origin ({origin[:80]}) is refused"
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return "a cross-site write is refused"
    if by_bearer:
        return None
    given = headers.get("x-csrf-token", "")
    if not given or not _same(given, csrf):
        return "the page's CSRF token is missing or wrong: reload the page"
    return None


def csrf_for(key: bytes, session: str) -> str:
    """A session's CSRF token: an HMAC of its login cookie under the viewer's key (new at each start)."""
    return hmac.new(key, session.encode("utf-8"), hashlib.sha256).hexdigest()


def cookie_value_for(token: str) -> str:
    """What the login cookie carries: a SHA-256 digest of the token, in hex.

    Why not the token: a token may hold any character (a space, ``;``, ``é``), and a cookie
    value may not — written raw, ``a b;c`` came back as ``a`` and the ``?token=`` login
    always failed. Hex needs no quoting, and the cookie no longer carries the secret itself.
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def local_path(scope) -> str:
    """The request's path as a redirect target that stays on this site.

    ``//evil.example/`` (or ``/\\evil.example``) is, to a browser, another host: leading slashes and
    backslashes collapse into one. The raw (still percent-encoded) path is used, so the header
    is always ASCII.
    """
    raw = scope.get("raw_path") or scope["path"].encode("utf-8")
    path = raw.decode("latin-1").split("?", 1)[0]
    return "/" + path.lstrip("/\\")


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


async def _plain(send, status: int, text: str, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    body = (text + "\n").encode() if text else b""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())] + list(extra) + SECURITY_HEADERS})
    await send({"type": "http.response.body", "body": body})


def create_app(config: ViewConfig):
    """The Starlette app for ``config`` (the store must already be connected)."""
    pages = routes.Pages(config)
    review = Review(config, pages._render)
    streams = live.Streams(config, pages.templates)
    app = Starlette(
        routes=[
            Route("/", pages.runs, name="runs"),
            Route("/runs/{run_id}", pages.run, name="run"),
            Route("/runs/{run_id}/scenarios/{key:path}", pages.scenario, name="scenario"),
            Route("/runs/{run_id}/transcript", pages.transcript, name="transcript"),
            Route("/runs/{run_id}/review", review.page, name="review"),
            Route("/runs/{run_id}/labels", review.label, methods=["POST"], name="labels"),
            Route("/runs/{run_id}/diff", pages.diff, name="diff"),
            Route("/runs/{run_id}/results.{fmt:str}", pages.export, name="export"),
            Route("/compare", pages.compare, name="compare"),
            Route("/fleet", pages.fleet, name="fleet"),
            Route("/live/runs/{run_id}", streams.run, name="live_run"),
            Route("/live/runs", streams.runs, name="live_runs"),
            Route("/live/fleet", streams.fleet, name="live_fleet"),
            Route("/metrics", MetricsPage(config).serve, name="metrics"),
            Route("/live/stats", streams.stats, name="live_stats"),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ],
        middleware=[Middleware(Guard, config=config), Middleware(CanonicalRuns)],
        exception_handlers={404: pages.not_found},
    )
    return app
