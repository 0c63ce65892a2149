"""A tiny GET-only HTTP server for what a monitoring system reads: probes and scrapes.

Why the standard library's server and not the viewer's ASGI stack: it must answer in a worker
process that has neither Starlette nor uvicorn installed, start in a thread, and cost nothing when
no one asks. ``/livez``/``/readyz`` (:mod:`evaljobs.workers.health`) and ``/metrics``
(:mod:`evaljobs.workers.metrics`) both serve through :func:`route_server`.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from evaljobs.errors import cannot_listen

#: A route's answer: (HTTP status, body, content type).
Answer = tuple[int, bytes, str]

NOT_FOUND: Answer = (404, b"not found\n", "text/plain; charset=utf-8")


def route_server(host: str, port: int, routes: Mapping[str, Callable[[], Answer]], *,
                 logger: logging.Logger, name: str) -> ThreadingHTTPServer:
    """A threading server on ``host:port`` answering GET ``path`` with ``routes[path]()`` (else 404).

    The query string is ignored; request lines go to ``logger`` at debug level, prefixed by ``name``.
    A port that cannot be bound is one :class:`~evaljobs.errors.OptionError` naming ``--{name}-port``.
    """
    table = dict(routes)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = table.get(self.path.split("?", 1)[0])
            code, body, kind = route() if route is not None else NOT_FOUND
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug(f"{name}: " + format, *args)

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise cannot_listen(host, port, exc, f"--{name}-port") from None
    server.daemon_threads = True
    return server


def serve_until_stopped(server: ThreadingHTTPServer) -> int:
    """Serve in this thread until the process is stopped, then close the socket; the exit code (0).

    What the Dramatiq fork processes of ``evaljobs worker --health-port``/``--metrics-port`` do.
    """
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
