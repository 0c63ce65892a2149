"""The viewer's ASGI app: routes, templates, static files, and the guard in front of all of them.

The guard makes the app safe by construction rather than by each route's care:

* read-only: any method but GET/HEAD is refused (there are no write endpoints);
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
from typing import Sequence
from urllib.parse import parse_qsl, urlencode

from evaljobs.view.config import HERE, ViewConfig

COOKIE = "evaljobs_view"
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
    """Pure ASGI middleware (streams pass through untouched): method, host, token, security headers."""

    def __init__(self, app, config: ViewConfig):
        self.app = app
        self.token = config.token
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
        if scope["method"] not in ("GET", "HEAD"):
            await _plain(send, 405, "evaljobs view is read-only", [(b"allow", b"GET, HEAD")])
            return
        if self.hosts is not None and headers.get("host", "") not in self.hosts:
            await _plain(send, 421, "evaljobs view answers only its loopback address")
            return
        if self.token:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            given = query.get("token")
            if given is not None and _same(given, self.token):
                rest = urlencode(
                    [
                        (k, v)
                        for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"))
                        if k != "token"
                    ]
                )
                location = local_path(scope) + (f"?{rest}" if rest else "")
                cookie = f"{COOKIE}={cookie_value_for(self.token)}; Path=/; HttpOnly; SameSite=Strict"
                await _plain(send, 303, "", [(b"location", location.encode("latin-1")),
                                             (b"set-cookie", cookie.encode("latin-1"))])
                return
            bearer = headers.get("authorization", "")
            cookie_value = None
            if "cookie" in headers:
                jar = SimpleCookie()
                try:
                    jar.load(headers["cookie"])
                    cookie_value = jar[COOKIE].value if COOKIE in jar else None
                except Exception:  # noqa: BLE001 - a malformed cookie is no token
                    cookie_value = None
            ok = (bearer.startswith("Bearer ") and _same(bearer[7:], self.token)) or \
                 (cookie_value is not None and _same(cookie_value, cookie_value_for(self.token)))
            if not ok:
                await _plain(
                    send,
                    401,
                    "evaljobs view: open this address once with ?token=YOUR_TOKEN, or "
                    "send Authorization: Bearer",
                )
                return

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)


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
    # The optional 'view' extra, imported only when the viewer runs (never by `evaljobs --help`).
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    # start-up time: only when serving
    from evaljobs.view import live, routes
    from evaljobs.view.metrics import MetricsPage

    pages = routes.Pages(config)
    streams = live.Streams(config, pages.templates)
    app = Starlette(
        routes=[
            Route("/", pages.runs, name="runs"),
            Route("/runs/{run_id}", pages.run, name="run"),
            Route("/runs/{run_id}/scenarios/{key:path}", pages.scenario, name="scenario"),
            Route("/runs/{run_id}/transcript", pages.transcript, name="transcript"),
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
        middleware=[Middleware(Guard, config=config)],
        exception_handlers={404: pages.not_found},
    )
    return app
