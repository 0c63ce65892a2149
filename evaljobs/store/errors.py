"""The store's errors: one line each, all in the evaljobs error family."""
from __future__ import annotations

from evaljobs.errors import EXIT_FAILED, EXIT_USAGE, EvaljobsError, UsageError
from evaljobs.redact import redact  # one redaction for every URL (re-exported: store.redact)


class StoreError(EvaljobsError):
    """A store problem a user can act on; the message is one line."""

    exit_code = EXIT_USAGE  # an unknown run or an unreachable database URL: the CLI's exit 2, as always


class DatabaseUnavailable(StoreError):
    """The database did not accept a connection (down, restarting, wrong address)."""


class StorageFailed(StoreError):
    """The database's storage refuses writes (disk full, I/O error, read-only): one line, exit 1.

    Not an outage to wait out in a retry loop, and not a mistake in the command: the run stays
    as it is (SQLite rolls the failed transaction back), and ``evaljobs recover RUN`` finishes it
    once space is freed.
    """

    exit_code = EXIT_FAILED


class UnknownRun(StoreError):
    pass


class NoDatabase(StoreError, UsageError):
    """A command that only reads was given a SQLite file that does not exist: a typo, not a database to
    create (``--db sqlite:///typo.db`` made an empty one and showed "no runs")."""


class UnknownSnapshot(StoreError):
    pass


class UnexpectedPair(StoreError):
    """A result for a pair the run does not expect (completion contract, invariant 4)."""


class Incomplete(StoreError):
    """Finalize was asked for a run whose persisted pairs do not yet equal the expected pairs."""


__all__ = [
    "redact",
    "StoreError",
    "StorageFailed",
    "DatabaseUnavailable",
    "UnknownRun",
    "NoDatabase",
    "UnknownSnapshot",
    "UnexpectedPair",
    "Incomplete",
]
