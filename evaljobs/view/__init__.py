"""``evaljobs view``: a local web app over the store, the run events and the fleet; its one write is a
reviewer's label on a pair (``--read-only``: none).

Importing this package imports no web stack: its ``app`` and ``bundle`` modules load on first use
(:mod:`evaljobs.lazy`), once :func:`check_installed` has found the ``view`` extra (Starlette, uvicorn,
Jinja2) — a missing one is one line, not a traceback.

The viewer is a shell over the store, beside the CLI: ``evaljobs view`` is one call to
:func:`serve_viewer` (or :func:`export_bundle` for ``--export``), which checks every setting and
reaches the servers in order — a missing extra, an unsafe bind, a SQLite file that does not exist
(the viewer creates none), an unreachable database or broker, each one line before a port is bound.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from evaljobs import pipeline, store, workers
from evaljobs.config import settings
from evaljobs.errors import UsageError, cannot_listen
from evaljobs.lazy import submodules
from evaljobs.view.config import ViewConfig, is_loopback

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.view import app as app
    from evaljobs.view import bundle as bundle

#: The modules that import the web stack: loaded after check_installed (serve, export_bundle).
_web = submodules(__name__, ("app", "bundle"))
__getattr__ = _web

logger = logging.getLogger("evaljobs.view")

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
    secret = config.token or config.write_token
    return base + (f"?token={quote(secret, safe='')}" if secret and with_token else "")


def serve(config: ViewConfig, *, on_ready=None, log_format: str = "text") -> None:
    """Run the viewer until interrupted (the store must already be connected).

    ``log_format="json"``: uvicorn's and evaljobs' log lines as JSON objects (evaljobs.workers.logs).
    """
    check_installed()
    check_config(config)
    import uvicorn  # the optional 'view' extra (checked just above)

    if config.redis_url:
        pipeline.events.bind_redis(config.redis_url)
    # Bound here, not by uvicorn, so a busy port is an OSError the command reports in one line.
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError:
        sock.close()
        raise
    json_logs: dict[str, Any] = {}
    if log_format == "json":
        workers.logs.use_json_logs(logging.INFO)
        json_logs = {"log_config": None}  # uvicorn's own loggers then go to the JSON root handler
    server = uvicorn.Server(uvicorn.Config(_web("app").create_app(config), host=config.host, port=config.port,
                                           log_level="warning", access_log=False, lifespan="off",
                                           timeout_graceful_shutdown=2, **json_logs))
    if on_ready is not None:
        original = server.startup

        async def startup(sockets=None):
            await original(sockets)
            if server.started:
                on_ready()

        server.startup = startup  # type: ignore[method-assign]  # this server's start-up, then on_ready
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


@dataclass(frozen=True)
class Exported:
    """What :func:`export_bundle` wrote: the run and the files of its static bundle."""

    run_id: str
    directory: str
    files: list[Path] = field(default_factory=list)


def refuse_a_missing_file(url: str) -> None:
    """The viewer only reads: a SQLite URL naming no file is a typo, not a database to create."""
    store.refuse_a_missing_file(url, "the viewer")


def _remove_on_sigterm(path: Path) -> None:
    """Remove ``path`` when SIGTERM stops the viewer: uvicorn re-raises the signal once it has shut down,
    which ends the process before any ``finally`` runs. The signal is then raised again, as it was."""
    import signal  # only a viewer with a token file of its own
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def remove_then_stop(signum: int, frame: Any) -> None:
        path.unlink(missing_ok=True)
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        signal.raise_signal(signum)

    signal.signal(signal.SIGTERM, remove_then_stop)


def _config(broker: str | None, host: str, port: int, token: str | None, *, read_only: bool = False,
            reviewer: str | None = None) -> ViewConfig:
    """The viewer's settings: ``memory`` (or no broker) means no Redis, the database is read instead.

    Writes (labels) need a write token: ``token`` when one is given, else a fresh random one (a loopback
    viewer's reads stay open, its writes do not: any local process or page could otherwise write).
    """
    write_token = None if read_only else (token or secrets.token_urlsafe(24))
    return ViewConfig(broker=None if broker in (None, "", "memory") else broker, token=token, host=host,
                      port=port, read_only=read_only, write_token=write_token,
                      reviewer=(reviewer or "").strip()[:80] or "viewer")


def write_token_file(config: ViewConfig) -> Path | None:
    """A loopback viewer's own write token, in a file only this user can read (its path is printed, never
    the token): ``cat`` it, or start with ``--open``, which hands it to the browser."""
    if config.token or not config.write_token:
        return None
    handle, name = tempfile.mkstemp(prefix="evaljobs-view-", suffix=".token")  # mode 0600
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(config.write_token + "\n")
    return Path(name)


def _open_store(db: str | None, config: ViewConfig) -> None:
    check_installed()  # a ViewError is a UsageError: one line and exit 2
    check_config(config)
    refuse_a_missing_file(db or settings().database_url or store.DEFAULT_URL)
    store.connect(db)  # an unreachable database stops here, in one line


def export_bundle(run_id: str, directory: str, *, db: str | None = None, broker: str | None = None,
                  host: str = "127.0.0.1", port: int = 8700, token: str | None = None) -> Exported:
    """Write one run (an id, a prefix or ``latest``) as a static, self-contained folder of pages
    (``evaljobs view --export``): the run, each scenario, each transcript, CSV and JSONL.

    The settings are checked as for serving (an export asked with an unsafe ``host`` is refused alike).
    """
    _open_store(db, _config(broker, host, port, token))
    resolved = store.resolve_run_id(run_id)
    files = _web("bundle").export_run(resolved, directory)
    return Exported(run_id=resolved, directory=directory, files=files)


def serve_viewer(*, db: str | None = None, broker: str | None = None, host: str = "127.0.0.1",
                 port: int = 8700, token: str | None = None, open_browser: bool = False,
                 log_format: str = "text", on_ready: Callable[[str], None] | None = None,
                 read_only: bool = False, reviewer: str | None = None) -> None:
    """Check, connect, and serve the viewer until it is interrupted (``evaljobs view``).

    ``broker``: a Redis URL to follow runs by their events and show the fleet (``memory`` or None:
    read the database every second). Anything but a loopback ``host`` needs a ``token``.

    ``on_ready(line)`` is told the address once the port is bound (as a log line instead with
    ``log_format="json"``); the token is never in it. ``open_browser`` hands the address with the
    token to the browser only.

    ``read_only``: every write is refused. Otherwise a session labels pairs once it holds the write
    token: ``token``, or (no ``token``) one made now and kept in a file only this user can read, whose
    path the ready line names. ``reviewer``: the name a label is given under when the reviewer gives none.
    """
    config = _config(broker, host, port, token, read_only=read_only, reviewer=reviewer)
    _open_store(db, config)
    if config.redis_url:
        # the fleet and live pages need it: one line now if it is down
        workers.launch.ping_redis(config.redis_url)
    url = url_of(config)
    token_file = write_token_file(config)
    if token_file is not None:
        _remove_on_sigterm(token_file)

    def ready() -> None:
        # The token is a secret: never printed (logs keep it); --open hands it to the browser only.
        hint = " (open it once with ?token=YOUR_TOKEN, or send Authorization: Bearer)" if config.token else ""
        if token_file is not None:
            hint += (f"; to label pairs, open it once with ?token= and the token in {token_file} "
                     "(readable by you only), or start with --open")
        elif config.read_only:
            hint += "; read-only: labels are shown, never taken"
        if log_format == "json":
            logger.info("evaljobs view: %s%s", url, hint)
        elif on_ready is not None:
            on_ready(f"evaljobs view: {url}{hint}")
        if open_browser:
            import webbrowser  # only with --open

            webbrowser.open(url_of(config, with_token=True))

    try:
        serve(config, on_ready=ready, log_format=log_format)
    except OSError as exc:  # a port in use: one line, exit 2
        raise cannot_listen(config.host, config.port, exc) from None
    finally:
        if token_file is not None:
            token_file.unlink(missing_ok=True)


__all__ = ["ViewConfig", "ViewError", "serve", "check_config", "check_installed", "url_of", "Exported",
           "export_bundle", "serve_viewer", "refuse_a_missing_file"]
