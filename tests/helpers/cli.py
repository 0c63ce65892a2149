"""evaljobs' command line run in the test's process (click's ``CliRunner``), behind the ``cli`` fixture."""
from __future__ import annotations

from typing import Any

import click
from click.testing import CliRunner, Result


class Cli:
    """``cli(*args)`` runs ``evaljobs ARGS`` (arguments may be paths or numbers) and returns click's
    ``Result``; an exception the command did not turn into an exit code fails the test with its
    traceback (``catch_exceptions=True`` keeps it in ``result.exception``). ``command=`` runs another
    click command (a group built by the test); ``input=``, ``env=``, ``prog_name=`` are click's.
    """

    def __init__(self, database: str) -> None:
        #: The database URL of the test's commands (``EVALJOBS_DATABASE_URL``).
        self.db = database
        self.runner = CliRunner()

    def __call__(self, *args: Any, command: click.Command | None = None, catch_exceptions: bool = False,
                 **options: Any) -> Result:
        if command is None:
            from evaljobs.cli import main

            command = main
        return self.runner.invoke(command, [str(arg) for arg in args], catch_exceptions=catch_exceptions,
                                  **options)

    def ok(self, *args: Any, **options: Any) -> Result:
        """``cli(*args)`` that must succeed (exit code 0; the failure message ends with its output)."""
        result = self(*args, **options)
        assert result.exit_code == 0, f"evaljobs {' '.join(map(str, args))}: {result.output[-3000:]}"
        return result
