"""The ``evaljobs`` command line (click): one module per command group, each a thin shell over the API.

Every error a user can cause is one line on stderr and a non-zero exit (2 for
bad input, 1 for a failed gate) — never a traceback; the mapping is
:func:`evaljobs.cli._options.exit_for`, applied by :class:`Group`. The command
modules import only :mod:`evaljobs.cli._options` from here, never this package.

A command's module is imported only when that command runs (or its own
``--help`` is asked for): ``evaljobs --help`` lists the commands from
:data:`COMMANDS`, so it loads click and ``_options`` and nothing else
(start-up time; ``tests/cli/test_cli.py`` checks the table against the commands).
"""
from __future__ import annotations

import importlib
from typing import Any, Iterator

import click

from evaljobs.cli._options import EXIT_GATE, EXIT_USAGE, Group

#: Command name -> (module under evaljobs.cli, attribute, the first paragraph of its help): the
#: help is written out so that listing the commands imports none of them.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("run", "run", "Evaluate CATALOG against each -m MODEL."),
    "runs": ("runs", "runs", "List recent runs."),
    "show": ("runs", "show", "Show one run: status, progress and each result."),
    "db": ("db", "db", "Database maintenance."),
    "catalog": ("catalog", "catalog", "Catalog tools."),
    "mock-provider": (
        "mock_provider",
        "mock_provider",
        "Serve the simulated OpenAI-compatible provider (for demos, tests, benchmarks).",
    ),
    "demo": (
        "run",
        "demo",
        "Run the bundled support catalog against two simulated models and print the report.",
    ),
    "worker": (
        "workers",
        "worker",
        "Run Dramatiq workers with evaljobs' broker and middleware (Ctrl-C / SIGTERM stops gracefully).",
    ),
    "governor": (
        "governor",
        "governor",
        "Show the provider governor: per deployment budget, limit, in flight, "
        "waiting, admitted, 429s, waits.",
    ),
    "recover": (
        "ops",
        "recover",
        "Re-enqueue lost pairs of running runs and finalize complete-but-unreported ones.",
    ),
    "report": ("reports", "report", "Render a run's report (also a CI gate with --fail-under)."),
    "compare": (
        "reports",
        "compare",
        "Show what changed from RUN_A (baseline) to RUN_B: flipped pairs, score and cost deltas.",
    ),
    "pool": (
        "pool",
        "pool_worker",
        "Run an elastic worker pool: between --min and --max members, following the queue's backlog.",
    ),
    "watch": (
        "ops",
        "watch",
        "Follow RUN_ID to its report: a live bar on a terminal, a line per result otherwise, then the table.",
    ),
    "status": (
        "ops",
        "status",
        "Active runs with progress, queue depths, workers seen recently, governor budgets and pools.",
    ),
    "cancel": (
        "ops",
        "cancel",
        "Cancel RUN_ID (its pending pairs are not evaluated) and its open provider batches.",
    ),
    "rerun": (
        "ops",
        "rerun",
        "Create a NEW run over RUN_ID's errored, failed or all pairs, with its catalog, context and options.",
    ),
    "cache": ("ops", "cache", "The response cache shared by all workers (runs started with --cache)."),
    "bench": (
        "bench",
        "bench",
        "Benchmark CATALOG per (strategy, width): wall clock, throughput, errors, cost, CPU, memory.",
    ),
    "view": (
        "view",
        "view",
        "Serve a live web viewer of runs, results, comparisons and the worker fleet; review pairs in it.",
    ),
    "labels": ("labels", "labels", "Reviewers' labels on pairs: export and import them as JSONL."),
    "judge-agreement": ("labels", "judge_agreement",
                        "How far each LLM judge agrees with reviewers' labels, per rubric: confusion matrix, "
                        "Cohen's kappa."),
    "providers": (
        "providers",
        "providers_group",
        "Providers: presets and configured entries (list), and one real call per model (check).",
    ),
    "init": (
        "init",
        "init",
        "Start a project in DIRECTORY (default: here): a starter catalog, providers.yaml, a CI workflow.",
    ),
}


def load_command(name: str) -> click.Command | None:
    """The command ``name``, its module imported now (None for an unknown name)."""
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    module, attribute, _ = entry
    return getattr(importlib.import_module(f"evaljobs.cli.{module}"), attribute)


def _short_help(name: str, limit: int) -> str:
    """The command's short help as click shortens it, from the table (nothing imported)."""
    return click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)


class _Commands(dict[str, click.Command]):
    """``main.commands``: a command is loaded on first lookup, so ``main.commands["run"]`` still works."""

    def __missing__(self, name: str) -> click.Command:
        command = load_command(name)
        if command is None:
            raise KeyError(name)
        self[name] = command
        return command

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    # A caller walking every command (a test, a docs generator) sees them all, loaded.
    def keys(self) -> list[str]:  # type: ignore[override]  # a sorted list, every command's name
        return sorted(set(COMMANDS) | set(dict.keys(self)))

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or dict.__contains__(self, name)

    def items(self) -> list[tuple[str, click.Command]]:  # type: ignore[override]  # loaded, as a list
        return [(name, self[name]) for name in self.keys()]

    def values(self) -> list[click.Command]:  # type: ignore[override]  # loaded, as a list
        return [self[name] for name in self.keys()]


class LazyGroup(Group):
    """The ``evaljobs`` group: commands from :data:`COMMANDS`, each module imported when it is used."""

    commands: _Commands

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return self.commands.keys()

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's own listing, with each short help from the table instead of the imported command."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in COMMANDS:
                rows.append((name, _short_help(name, limit)))
            else:  # added by a host with main.add_command: already loaded
                command = dict.get(self.commands, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evaljobs")
# Shown in --help; Group.main moves them onto the subcommand before click parses (see forward_global_options).
@click.option("--db", "global_db", metavar="URL", expose_value=False,
              help="Database for the subcommand, as its own --db (also EVALJOBS_DATABASE_URL).")
@click.option("--broker", "global_broker", metavar="URL", expose_value=False,
              help="Broker for the subcommand, as its own --broker (also EVALJOBS_BROKER_URL).")
def main() -> None:
    """Run LLM-agent evaluation catalogs (scenarios × models) as a fan-out, with one trustworthy report."""


__all__ = ["main", "Group", "LazyGroup", "COMMANDS", "load_command", "EXIT_GATE", "EXIT_USAGE"]

if __name__ == "__main__":  # pragma: no cover
    main()
