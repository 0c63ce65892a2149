"""``evaljobs view``: a local, read-only web app over the store, the run events and the fleet.

Importing this package imports no web stack; :func:`serve` and
:func:`evaljobs.view.app.create_app` do (the ``view`` extra: Starlette, uvicorn, Jinja2).
"""
from __future__ import annotations

import socket
from urllib.parse import quote

from evaljobs.errors import UsageError
from evaljobs.view.config import ViewConfig, is_loopback

REQUIRES = ("starlette", "uvicorn", "jinja2", "markdown_it")


class ViewError(UsageError):
    """A viewer setting a user can fix (one line, exit 2)."""


def check_installed() -> None:
    import importlib.util  # only here: the viewer's start, not every import of evaljobs.view

    missing = [name for name in REQUIRES if importlib.util.find_spec(name) is None]
    if missing:
        raise ViewError(f"evaljobs view needs {', '.join(missing)}: pip install 'evaljobs[view]'")


def check_config(config: ViewConfig) -> None:
    """Fail closed: a view bound beyond loopback without a token, or with an empty one, does not start."""
    if config.token is not None and not config.token.strip():
        raise ViewError("the view token is empty: pass --token with a secret (or unset EVALJOBS_VIEW_TOKEN)")
    if not is_loopback(config.host) and not config.token:
        raise ViewError(f"--host {config.host} is reachable beyond this machine: pass --token (or set "
                        "EVALJOBS_VIEW_TOKEN), or bind to 127.0.0.1")
    if not 0 < config.port < 65536:
        raise ViewError(f"--port {config.port} is not a TCP port (1-65535)")


def url_of(config: ViewConfig, *, with_token: bool = False) -> str:
    """The viewer's address; the token only when asked (for ``--open``), never for printing."""
    host = f"[{config.host}]" if ":" in config.host else config.host
    base = f"http://{host}:{config.port}/"
    return base + (f"?token={quote(config.token, safe='')}" if config.token and with_token else "")


def serve(config: ViewConfig, *, on_ready=None, log_format: str = "text") -> None:
    """Run the viewer until interrupted (the store must already be connected).

    ``log_format="json"``: uvicorn's and evaljobs' log lines as JSON objects (evaljobs.workers.logs).
    """
    check_installed()
    check_config(config)
    import uvicorn  # the optional 'view' extra (checked just above)

    # start-up time: only when serving
    from evaljobs.view.app import create_app

    if config.redis_url:
        # start-up time: only when serving
        from evaljobs.pipeline import events

        events.bind_redis(config.redis_url)
    # Bound here, not by uvicorn, so a busy port is an OSError the command reports in one line.
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError:
        sock.close()
        raise
    json_logs = {}
    if log_format == "json":
        import logging

        # only with --log-format json
        from evaljobs.workers.logs import use_json_logs

        use_json_logs(logging.INFO)
        json_logs = {"log_config": None}  # uvicorn's own loggers then go to the JSON root handler
    server = uvicorn.Server(uvicorn.Config(create_app(config), host=config.host, port=config.port,
                                           log_level="warning", access_log=False, lifespan="off",
                                           timeout_graceful_shutdown=2, **json_logs))
    if on_ready is not None:
        original = server.startup

        async def startup(sockets=None):
            await original(sockets)
            if server.started:
                on_ready()

        server.startup = startup
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


__all__ = ["ViewConfig", "ViewError", "serve", "check_config", "check_installed", "url_of"]
