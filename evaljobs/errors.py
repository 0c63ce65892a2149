"""One error family for everything a user can cause.

Every error evaljobs raises on purpose derives from :class:`EvaljobsError`; its
``str()`` is one line that names the file, line, value or server at fault and
what to do. The CLI maps the family to exit codes in one place (``exit_code``),
so a command never prints a traceback for a mistake a user can fix.
"""
from __future__ import annotations

from collections.abc import Iterable

from evaljobs.printable import printable
from evaljobs.redact import redact_text

#: Exit codes shared by every command.
EXIT_OK = 0
EXIT_FAILED = 1  # the work ran and did not pass (a gate), or a server/storage failed
EXIT_USAGE = 2   # the command, a file or a value given to it is wrong: nothing was done
EXIT_INTERRUPTED = 130  # stopped by SIGINT/SIGTERM (the shell's 128 + SIGINT): what finished is kept


class EvaljobsError(Exception):
    """Base of every error evaljobs raises for a user: a one-line message."""

    exit_code = EXIT_FAILED


class UsageError(EvaljobsError, ValueError):
    """A bad command, option, file or value: nothing was started (exit 2)."""

    exit_code = EXIT_USAGE


class OptionError(UsageError):
    """A value given to one of a command's options (or arguments) that cannot be used (exit 2).

    ``str()`` names the option (``--broker: workers need a shared broker: …``) for a caller of the
    library; the CLI words it as click words a value it refuses itself (``Invalid value for
    --broker: … (see `evaljobs worker --help`)``) from ``option`` and ``reason``, so a check moved
    from a command into the library reads as it did.
    """

    def __init__(self, reason: str, option: str | None = None) -> None:
        super().__init__(f"{option}: {reason}" if option else reason)
        self.reason = reason
        self.option = option


class ConfigurationError(UsageError):
    """A setting (flag, environment variable, file) that is present but unusable."""


class Interrupted(EvaljobsError):
    """SIGINT or SIGTERM stopped a command; its message says what was kept and how to resume (exit 130)."""

    exit_code = EXIT_INTERRUPTED


class ServiceUnavailable(EvaljobsError):
    """A server evaljobs needs (Redis, the database, a provider) cannot be reached (exit 1)."""


def one_line(text: object, limit: int = 300) -> str:
    """``text`` folded onto one line and cut at ``limit`` characters (for messages)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def user_line(exc: BaseException | str, limit: int = 2000) -> str:
    """``exc`` as the one line a user reads: its class name when it has no text, folded onto one line,
    cut at ``limit``, every configured secret and URL password masked (a driver's text may quote one),
    terminal control characters shown as escapes (a provider's text may carry some)."""
    return printable(one_line(redact_text(str(exc).strip() or type(exc).__name__), limit))


def user_lines(exc: BaseException, limit: int = 2000) -> list[str]:
    """What a user reads of ``exc``, secrets masked: each of its ``problems`` (a catalog's, one a
    line), or :func:`user_line`."""
    problems = getattr(exc, "problems", None)
    if problems:
        return [printable(redact_text(p)) for p in problems]
    return [user_line(exc, limit)]


def cannot_listen(host: str, port: int, exc: OSError, option: str | None = None) -> OptionError:
    """The one line for a server that cannot bind ``host:port`` (a port in use, a foreign address),
    the same from every command that listens: worker, pool, view, mock-provider."""
    import os  # only a refusal pays for it (start-up time, as above)

    # the errno's own words: asyncio's servers put a sentence of their own in strerror
    reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
    return OptionError(f"cannot listen on {host}:{port}: {reason}", option)


def suggest(value: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or an empty string."""
    import difflib  # only a mistake pays for it (start-up time: `evaljobs --help` imports this module)

    close = difflib.get_close_matches(str(value), list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


__all__ = ["EvaljobsError", "UsageError", "OptionError", "ConfigurationError", "ServiceUnavailable",
           "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "cannot_listen", "one_line", "user_line", "user_lines",
           "suggest"]
