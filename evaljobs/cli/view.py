"""``evaljobs view``: serve the read-only web viewer (runs, a run, a scenario, compare, fleet).

Starlette, uvicorn and Jinja2 are imported only when the command runs, so
``evaljobs --help`` stays fast and works without the ``view`` extra.
"""
from __future__ import annotations

import click

from evaljobs.cli._options import db_option, log_format_option, ping_redis
from evaljobs.config import settings as config_settings
from evaljobs.errors import UsageError


def _refuse_a_missing_file(url: str) -> None:
    """The viewer only reads: a SQLite URL naming no file is a typo, not a database to create."""
    from pathlib import Path

    if not url.startswith("sqlite:///"):
        return
    path = Path(url[len("sqlite:///"):].split("?", 1)[0])
    if str(path) not in ("", ":memory:") and not path.is_file():
        raise UsageError(
            f"{url}: no database at {path.resolve()} (the viewer creates none); "
            f"check --db or EVALJOBS_DATABASE_URL, or run something first (evaljobs demo, evaljobs run …)"
        )


@click.command("view")
@db_option
@click.option("--broker", envvar="EVALJOBS_BROKER_URL", default=None,
              help="redis://… to follow runs by their events and show the fleet (default: read the database "
                   "every second, no fleet).")
@click.option("--port", type=int, default=8700, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback needs --token.")
@click.option("--token", envvar="EVALJOBS_VIEW_TOKEN", default=None,
              help="Secret every request must carry (cookie, bearer header, or ?token= once).")
@click.option("--open", "open_browser", is_flag=True, help="Open the viewer in a browser.")
@click.option("--export", "export_dir", type=click.Path(file_okay=False), default=None,
              help="Write one run as static pages into this folder (opens from disk, no server) and exit.")
@click.option("--run", "run_id", default="latest", show_default=True, help="With --export: the run (id, prefix, latest).")
@log_format_option
def view(db, broker, port, host, token, open_browser, export_dir, run_id, log_format) -> None:
    """Serve a live, read-only web viewer of runs, results, comparisons and the worker fleet.

    With --export DIR, write one run (--run) as a static, self-contained folder instead: the run, each
    scenario, each pair's transcript, the results as CSV and JSONL. Open DIR/index.html from disk.
    """
    from evaljobs import store  # start-up time, like the viewer's own imports (see the module docstring)
    from evaljobs.view import ViewConfig, check_config, check_installed, serve, url_of

    config = ViewConfig(broker=None if broker in (None, "", "memory") else broker, token=token, host=host,
                        port=port)
    check_installed()  # a ViewError is a UsageError: one line and exit 2 (evaljobs.cli._options.exit_for)
    check_config(config)
    _refuse_a_missing_file(db or config_settings().database_url or store.DEFAULT_URL)
    store.connect(db)  # an unreachable database stops here, in one line
    if export_dir is not None:
        from evaljobs.view.bundle import export_run

        resolved = store.resolve_run_id(run_id)
        written = export_run(resolved, export_dir)
        click.echo(f"wrote run {resolved} to {export_dir}/ ({len(written)} files): open "
                   f"{click.format_filename(export_dir)}/index.html")
        return
    if config.redis_url:
        ping_redis(config.redis_url)  # and so does an unreachable broker: the fleet and live pages need it
    url = url_of(config)

    def ready() -> None:
        # The token is a secret: never printed (logs keep it); --open hands it to the browser only.
        hint = " (open it once with ?token=YOUR_TOKEN, or send Authorization: Bearer)" if config.token else ""
        if log_format == "json":
            import logging

            logging.getLogger("evaljobs.view").info("evaljobs view: %s%s", url, hint)
        else:
            click.echo(f"evaljobs view: {url}{hint}", err=True)
        if open_browser:
            import webbrowser  # only with --open

            webbrowser.open(url_of(config, with_token=True))

    try:
        serve(config, on_ready=ready, log_format=log_format)
    except OSError as exc:  # a port in use: one line, exit 2 (the CLI's one mapping, cli/_options.py)
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
