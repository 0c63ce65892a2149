"""``evaljobs init [DIR]``: a starter catalog, its schema, providers.yaml and a CI workflow.

One call to :func:`evaljobs.api.start_project` (``init``'s templates and their loader),
then printing what it did.
"""
from __future__ import annotations

import click


@click.command("init")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Overwrite files that already exist (default: keep them).")
@click.option("--repo-root", type=click.Path(file_okay=False, exists=True),
              help="The repository's root, where .github/workflows/ goes (default: the git repository "
                   "holding DIRECTORY).")
def init(directory: str, force: bool, repo_root: str | None) -> None:
    """Start a project in DIRECTORY (default: here): a starter catalog, providers.yaml, a CI workflow.

    The workflow goes to the repository's root (.github/workflows/evals.yml) and installs evaljobs the
    way it is installed here. Never overwrites a file unless --force; prints what it wrote and the
    next three commands.
    """
    from evaljobs import api  # start-up time: the catalog schema and the templates

    started = api.start_project(directory, force=force, repo_root=repo_root)
    for item in started.written:
        note = "  (exists: kept; --force overwrites)" if item.action == "kept" else ""
        click.echo(f"{item.action:<9} {click.format_filename(str(item.path))}{note}")
    for line in started.notes:
        click.echo(f"note: {line}")
    click.echo("\nnext:")
    for command in started.next_commands:
        click.echo(f"  {command}")
