"""The ``evaljobs`` command line (click): one module per command group, each a thin shell over the API.

Every error a user can cause is one line on stderr and a non-zero exit (2 for
bad input, 1 for a failed gate) — never a traceback; the mapping is
:func:`evaljobs.cli._options.exit_for`, applied by :class:`Group`. The command
modules import only :mod:`evaljobs.cli._options` from here, never this package.
"""
from __future__ import annotations

import click

from evaljobs.cli._options import EXIT_GATE, EXIT_USAGE, Group
from evaljobs.cli.bench import bench
from evaljobs.cli.catalog import catalog
from evaljobs.cli.db import db
from evaljobs.cli.ops import cache, recover, rerun, status, watch
from evaljobs.cli.pool import pool_worker
from evaljobs.cli.providers import governor, mock_provider
from evaljobs.cli.reports import compare, report
from evaljobs.cli.run import demo, run
from evaljobs.cli.runs import runs, show
from evaljobs.cli.workers import worker


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evaljobs")
def main() -> None:
    """Run LLM-agent evaluation catalogs (scenarios × models) as a fan-out, with one trustworthy report."""


for _command in (run, runs, show, db, catalog, mock_provider, demo, worker, governor, recover, report, compare,
                 pool_worker, watch, status, rerun, cache, bench):
    main.add_command(_command)


__all__ = ["main", "Group", "EXIT_GATE", "EXIT_USAGE"]

if __name__ == "__main__":  # pragma: no cover
    main()
