"""``evaljobs view``: serve the web viewer (runs, a run, a scenario, compare, fleet).

A thin shell over :func:`evaljobs.api.serve_viewer` and :func:`~evaljobs.api.export_run`:
Starlette, uvicorn and Jinja2 are imported only when the command runs, so ``evaljobs --help`` stays fast
and works without the ``view`` extra.
"""
from __future__ import annotations

import click

from evaljobs.cli._options import db_option, log_format_option


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
@click.option("--open", "open_browser", is_flag=True,
              help="Open the viewer in a browser (logged in: that browser may label pairs).")
@click.option("--read-only", "read_only", is_flag=True,
              help="Refuse every write (no labels): for a shared dashboard.")
@click.option("--reviewer", default=None, metavar="NAME",
              help="The name a label is kept under when the reviewer gives none on the page.")
@click.option("--export", "export_dir", type=click.Path(file_okay=False), default=None,
              help="Write one run as static pages into this folder (opens from disk, no server) and exit.")
@click.option("--run", "run_id", default="latest", show_default=True,
              help="With --export: the run (id, prefix, latest).")
@log_format_option
def view(db, broker, port, host, token, open_browser, read_only, reviewer, export_dir, run_id,
         log_format) -> None:
    """Serve a live web viewer of runs, results, comparisons and the worker fleet; review pairs in it.

    Reviewers label pairs on a run's review page (/runs/RUN/review) once their browser holds the token
    (--token, or the one the viewer writes to a file only you can read; --open logs the browser in).

    With --export DIR, write one run (--run) as a static, self-contained folder instead: the run, each
    scenario, each pair's transcript, the results as CSV and JSONL. Open DIR/index.html from disk.
    """
    from evaljobs import api  # start-up time (see the module docstring)

    if export_dir is not None:
        done = api.export_run(run_id, export_dir, db=db, broker=broker, host=host, port=port, token=token)
        click.echo(f"wrote run {done.run_id} to {export_dir}/ ({len(done.files)} files): open "
                   f"{click.format_filename(export_dir)}/index.html")
        return
    api.serve_viewer(db=db, broker=broker, host=host, port=port, token=token, open_browser=open_browser,
                 log_format=log_format, on_ready=lambda line: click.echo(line, err=True), read_only=read_only,
                 reviewer=reviewer)
