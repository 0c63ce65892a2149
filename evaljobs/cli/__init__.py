"""The ``evaljobs`` command line (click): one module per command group, each a thin shell over the API.

Every error a user can cause is one line on stderr and a non-zero exit (2 for
bad input, 1 for a failed gate) — never a traceback; the mapping is
:func:`evaljobs.cli._options.exit_for`, applied by :class:`Group`. The command
modules import only :mod:`evaljobs.cli._options` from here, never this package.
"""
from __future__ import annotations

import click

from evaljobs.cli._options import EXIT_GATE, EXIT_USAGE, Group
# Modules, not their commands: `evaljobs.cli.run` stays the module (a command named like its module
# would hide it).
from evaljobs.cli import (bench as _bench, catalog as _catalog, db as _db, governor as _governor,
                          init as _init, mock_provider as _mock_provider, ops as _ops, pool as _pool, providers as _providers,
                          reports as _reports, run as _run, runs as _runs, view as _view, workers as _workers)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evaljobs")
# Shown in --help; Group.main moves them onto the subcommand before click parses (see forward_global_options).
@click.option("--db", "global_db", metavar="URL", expose_value=False,
              help="Database for the subcommand, as its own --db (also EVALJOBS_DATABASE_URL).")
@click.option("--broker", "global_broker", metavar="URL", expose_value=False,
              help="Broker for the subcommand, as its own --broker (also EVALJOBS_BROKER_URL).")
def main() -> None:
    """Run LLM-agent evaluation catalogs (scenarios × models) as a fan-out, with one trustworthy report."""


for _command in (_run.run, _runs.runs, _runs.show, _db.db, _catalog.catalog, _mock_provider.mock_provider, _run.demo,
                 _workers.worker, _governor.governor, _ops.recover, _reports.report, _reports.compare,
                 _pool.pool_worker, _ops.watch, _ops.status, _ops.rerun, _ops.cache, _bench.bench, _view.view,
                 _providers.providers_group, _init.init):
    main.add_command(_command)


__all__ = ["main", "Group", "EXIT_GATE", "EXIT_USAGE"]

if __name__ == "__main__":  # pragma: no cover
    main()
