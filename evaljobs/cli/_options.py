"""What every command module shares: the group that maps errors to exit codes, options, the gate.

Errors become exit codes in one place, :func:`exit_for`: a mistake a user can
fix (an :class:`~evaljobs.errors.EvaljobsError`, a bad flag) is one line on
stderr and its family's ``exit_code`` — never a traceback. Exit 1 is also a
failed gate (``--fail-under``), so CI can tell "worse" from "broken".

This module is imported by ``evaljobs --help``: it imports click and the
error family only (the pipeline, the store and Redis are imported by the
commands that use them).
"""
from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import click

from evaljobs import config
from evaljobs.printable import printable
from evaljobs.errors import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, EvaljobsError, OptionError, user_line,
                             user_lines)

#: A failed gate (--fail-under, --fail-on-regression): the work ran and is not good enough.
EXIT_GATE = EXIT_FAILED
#: Like a command killed by SIGPIPE in a shell (128 + 13): the reader of our output went away.
EXIT_BROKEN_PIPE = 141

#: How long an error line may get before it is cut (long enough for a path and a value).
_LINE_LIMIT = 2000


def message(exc: BaseException | str) -> str:
    """``exc`` as one line (its class name when it has no text), secrets masked (:func:`user_line`)."""
    return user_line(exc, _LINE_LIMIT)


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` for every line that may carry a provider's or a catalog's text: its terminal
    control characters shown as escapes (:func:`evaljobs.printable.printable`; data stays as stored)."""
    click.echo(printable(text), err=err, nl=nl)


def exit_for(exc: BaseException, command: str | None = None) -> tuple[list[str], int] | None:
    """The stderr lines and exit code for an error a user can cause, or None for a bug (re-raised).

    The one mapping of the CLI: click's usage errors and the evaljobs family
    (its ``exit_code``), a catalog's problems one line each, the host-context
    middleware's refusals (``evaljobs_middleware`` imports nothing from evaljobs,
    so its errors are not in the family) and a server that cannot be reached. An option the
    library refused (:class:`~evaljobs.errors.OptionError`) reads as click's own refusals do,
    pointing at ``command``'s help (the command as typed, ``evaljobs catalog check``).
    """
    if isinstance(exc, click.UsageError):
        names: list[str] = []
        ctx = exc.ctx
        while ctx is not None and ctx.parent is not None:  # the root's name is the program's, whatever it was
            names.insert(0, ctx.info_name or "")
            ctx = ctx.parent
        command = " ".join(["evaljobs", *names])  # `evaljobs providers check`, not `evaljobs check`
        return [f"error: {message(exc.format_message())} (see `{command} --help`)"], EXIT_USAGE
    if isinstance(exc, OptionError) and command:
        text = f"Invalid value for {exc.option}: {exc.reason}" if exc.option else exc.reason
        return [f"error: {message(text)} (see `{command} --help`)"], exc.exit_code
    if isinstance(exc, EvaljobsError):
        # a CatalogError: every problem, one line each
        return [f"error: {line}" for line in user_lines(exc, _LINE_LIMIT)], exc.exit_code
    if _is_context_error(exc):
        return [f"error: {message(exc)}"], EXIT_USAGE
    # the reader went away (`evaljobs show latest | head`), no server did
    if isinstance(exc, BrokenPipeError):
        _silence_stdout()
        return [], EXIT_BROKEN_PIPE
    if _is_connection_error(exc):
        return [f"error: cannot reach a server: {message(exc)}"], EXIT_USAGE
    return None


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at exit does not raise a second BrokenPipeError."""
    _silence(sys.stdout)


def _silence(stream: Any) -> None:
    """Point ``stream``'s file at /dev/null (its reader went away), so flushing it at exit is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError):  # no file behind it (a test's capture): nothing to flush at exit
        pass


def _is_context_error(exc: BaseException) -> bool:
    module = sys.modules.get("evaljobs_middleware.context")  # loaded by whatever raised it
    return module is not None and isinstance(exc, module.ContextError)


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionError):
        return True
    redis_exceptions = sys.modules.get("redis.exceptions")  # loaded by whatever raised it
    return redis_exceptions is not None and isinstance(exc, redis_exceptions.ConnectionError)


@contextmanager
def one_line_errors(ctx: click.Context, typed: list[str] | None = None) -> Iterator[None]:
    """Turn an error a user can cause into its line(s) on stderr and its exit code.

    ``typed``: the arguments the command line was given, to name the command an option error
    points at (its context is gone by the time its error reaches here).
    """
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - exit_for decides; anything else is a bug and re-raised
        command = None
        if isinstance(exc, OptionError) and isinstance(ctx.command, click.Group):
            command = " ".join(["evaljobs", *command_path(ctx.command, typed or [])])
        mapped = exit_for(exc, command)
        if mapped is None:
            raise
        lines, code = mapped
        try:
            for line in lines:
                echo(line, err=True)
        except BrokenPipeError:  # stderr went with stdout (`… 2>&1 | head`): the exit code still tells
            _silence(sys.stderr)
            _silence(sys.stdout)
        ctx.exit(code)


#: Options that may also be given before the subcommand (`evaljobs --db URL show latest`).
GLOBAL_OPTIONS = ("--db", "--broker")


def forward_global_options(group: click.Group, args: list[str]) -> list[str]:
    """``evaljobs --db X show R`` as ``evaljobs show R --db X``: global options go to the command.

    Why: click options belong to one command, and a user who names the database or the broker
    once, before the subcommand, expects the subcommand to use it. The options are moved to the
    end of the command they name (an option given to the command itself wins); a command that does
    not take one is a usage error, never silently ignored.
    """
    moved: list[tuple[str, str]] = []
    rest = list(args)
    while rest:
        name, eq, value = rest[0].partition("=")
        if name not in GLOBAL_OPTIONS:
            break
        if not eq:
            if len(rest) < 2:
                raise click.UsageError(f"{name} needs a value")
            value = rest[1]
            del rest[:2]
        else:
            del rest[:1]
        moved.append((name, value))
    if not moved:
        return rest
    path, command = _walk(group, rest)
    if isinstance(command, click.Group):  # no subcommand (`evaljobs --db X --help`): nothing to give it to
        return rest
    takes = {opt for p in command.params for opt in getattr(p, "opts", ())}
    for name, value in moved:
        if name not in takes:
            raise click.UsageError(f"{name} does not apply to `evaljobs {' '.join(path)}`")
        own = rest[len(path):]
        if name not in own and not any(t.startswith(name + "=") for t in own):
            rest += [name, value]
    return rest


def command_path(group: click.Group, args: list[str]) -> list[str]:
    """The (sub)command names ``args`` start with: ``["catalog", "check"]`` for
    ``catalog check x.yaml --json``."""
    return _walk(group, args)[0]


def _walk(group: click.Group, args: list[str]) -> tuple[list[str], click.Command]:
    command: click.Command = group
    path: list[str] = []
    for token in args:
        if not isinstance(command, click.Group) or token.startswith("-"):
            break
        found = command.commands.get(token)
        if found is None:
            break
        command, path = found, path + [token]
    return path, command


#: The youngest generation's collection threshold in an ``evaljobs`` process (Python's default: 700).
GC_YOUNG = 100_000
_gc_tuned = threading.Lock()


def tune_gc(command_line: bool) -> None:
    """Fewer garbage collections in an ``evaljobs`` process: none of the heap at exit, and, when this
    process is the command (``command_line``: its arguments are ``sys.argv``), fewer on the way.

    Why (issue 42, BENCHMARKS.md): a width-16 first run of 33 pairs at 0.5 s a call spent 130
    collections and 0.18-0.33 s in them on a loaded 2-core machine, most while importing ~630 modules
    (the heap grows by ~65,000 objects, and each full collection scans all of it); with the youngest
    generation collected every 10,000 allocations instead of 700, 8 collections and 0.07-0.10 s; at
    100,000 (issue 42, session 13) a one-scenario run collects nothing after its command line is read
    (~40,000 objects tracked when it ends; at 10,000, 5 collections and 2 % of its instructions), and a
    500-pair run's peak memory moved 0.3 MiB (50.0 against 49.7).
    Then the interpreter's finalization collected the whole heap again, more than once, before
    the process could end: 0.2 s of exit in process and 0.5-1 s on Redis there, 10-70 ms with the
    heap frozen first. Exit handlers all still run (the freeze is one of them; a frozen object is
    only left out of collections); what goes without its finalizer is an object in an unreachable
    cycle, which the OS reclaims. A caller embedding the CLI (``main(args)``, click's test runner)
    keeps its own thresholds.
    """
    if _gc_tuned.acquire(blocking=False):
        atexit.register(gc.freeze)
    if command_line:
        gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


class Group(click.Group):
    """The ``evaljobs`` group: every subcommand's errors go through :func:`exit_for`; global options
    forwarded."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        tune_gc(command_line=args is None)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            argv = forward_global_options(self, argv)
            self.typed = argv
        except click.UsageError as exc:
            if not standalone_mode:
                raise
            click.echo(f"error: {message(exc.format_message())} (see `evaljobs --help`)", err=True)
            sys.exit(EXIT_USAGE)
        return super().main(argv, prog_name, complete_var, standalone_mode, **extra)

    #: The arguments of the command line being run (after the global options were forwarded).
    typed: list[str] = []

    def invoke(self, ctx: click.Context) -> Any:
        with one_line_errors(ctx, self.typed):
            return super().invoke(ctx)


# -- options shared by several commands -------------------------------------------------------


db_option = click.option("--db", envvar="EVALJOBS_DATABASE_URL", default=None,
                         help="Database URL: sqlite:///path.db (default .evaljobs/evaljobs.db) or postgresql://…")
broker_option = click.option("--broker", envvar="EVALJOBS_BROKER_URL", default="memory", show_default=True,
                             help="'memory' (in-process workers) or redis://host:port/db.")
providers_option = click.option("--providers", envvar="EVALJOBS_PROVIDERS", default=None,
                                type=click.Path(dir_okay=False),
                                help="Providers config (YAML): base URLs, API-key env vars, prices. Stored "
                                     "with each run (variable names only): every worker uses it.")
metrics_port_option = click.option(
    "--metrics-port", type=click.IntRange(1, 65535), envvar="EVALJOBS_METRICS_PORT", default=None,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (needs evaljobs[metrics]).")
metrics_host_option = click.option(
    "--metrics-host", envvar="EVALJOBS_METRICS_HOST", default="127.0.0.1", show_default=True,
    help="Address of the metrics and health servers (0.0.0.0: every interface, e.g. in a container).")
health_port_option = click.option(
    "--health-port", type=click.IntRange(1, 65535), envvar="EVALJOBS_HEALTH_PORT", default=None,
    help="Answer /livez and /readyz on this port (for supervisord, systemd or Kubernetes probes).")
log_format_option = click.option(
    "--log-format", type=click.Choice(["text", "json"]), envvar="EVALJOBS_LOG_FORMAT", default="text",
    show_default=True, help="json: one JSON object a line (time, level, logger, message, run, pair, worker).")
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Machine-readable output (JSON on stdout)."
)
width_option = click.option("--width", type=click.IntRange(min=1), default=8, show_default=True,
                            help="Worker threads for --broker memory and the threads strategy.")


def import_options(fn: Callable) -> Callable:
    """--format / --include-production-only / --lenient / --grader / --field for commands that read
    catalogs."""
    # catalog.importers.FORMATS, sorted, written out: importing the importers costs `evaljobs --help` about
    # half a second (tests/cli/test_cli.py checks that the two lists agree).
    formats = ("activeagent-catalog", "activeagent-suite", "jsonl", "native", "openai-evals", "promptfoo")
    fn = click.option("--field", "fields", multiple=True, metavar="NAME=FIELD",
                      help="JSONL: take a sample's input/target/id/metadata from another field, as Inspect's "
                           "FieldSpec does (--field input=question --field target=answer).")(fn)
    fn = click.option(
        "--grader",
        default=None,
        metavar="GRADER",
        help="JSONL: how replies are compared with ideal/target: match, includes, "
        "includes_ignore_case, fuzzy_match (OpenAI evals), inspect_includes, inspect_match, "
        "inspect_exact, inspect_pattern:REGEX, inspect_answer:letter|word|line (Inspect), "
        "model_graded_fact (the judge). Required unless an OpenAI evals registry names it.",
    )(fn)
    fn = click.option(
        "--lenient",
        is_flag=True,
        help="Imports: skip assertions evaljobs cannot grade (with a warning) instead of failing.",
    )(fn)
    fn = click.option("--include-production-only", is_flag=True,
                      help="Imports: keep ActiveAgent scenarios marked production_only.")(fn)
    fn = click.option("--format", "catalog_format", type=click.Choice(formats), default=None,
                      help="Catalog format (default: detected from the file).")(fn)
    return fn


def rate(text: str | None) -> float | None:
    """A pass rate given as 0.9 or 90% (None: no gate)."""
    if text is None:
        return None
    try:
        value = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a pass rate: use 0.9 or 90%") from None
    if not 0.0 <= value <= 1.0:
        raise click.BadParameter(f"{text!r} is not a pass rate between 0 and 1 (or 0% and 100%)")
    return value


#: ``--gate``: what ``--fail-under`` judges (``evaljobs.reports.gate.GATES``, written out: start-up time).
#: ``point``: the pass rate itself; ``ci``: the lower bound of its 95 % Wilson interval.
GATES = ("point", "ci")
_GATE_KEY = "evaljobs.gate"


def _remember_gate(ctx: click.Context, param: Any, value: str | None) -> str | None:
    ctx.meta[_GATE_KEY] = value or "point"
    return value


def run_option_flag(name: str) -> Callable[[Callable], Callable]:
    """``evaljobs run``'s flag for a per-run option, as its declaration says (``evaljobs.config.RUN_OPTIONS``:
    flag, help, kind, lowest value); unset (None, a switch off), the environment's value applies."""
    option = config.run_option(name)
    assert option.flag is not None, f"run option {name!r} has no flag"
    if option.switch or option.kind is bool:
        return click.option(option.flag, is_flag=True, help=option.help)
    if option.kind is str:
        return click.option(option.flag, metavar=option.metavar, default=None, help=option.help)
    low = option.low if option.flag_low is None else option.flag_low
    high = option.flag_high  # the variable's highest is no flag's: a week of seconds is no help text
    kind = (click.FloatRange(min=low, max=high) if option.kind is float
            else click.IntRange(min=int(low or 0), max=None if high is None else int(high)))
    return click.option(option.flag, type=kind, default=None, help=option.help)


def run_flags(values: dict[str, Any]) -> dict[str, Any]:
    """The values of the per-run options' flags among a command's parameters, by option name (what
    ``Session.run`` takes): a flag declared in the table reaches the run without another list."""
    return {o.name: values[o.name] for o in config.RUN_OPTIONS if o.flag and o.name in values}


def fail_under_option(fn):
    """``--fail-under RATE`` (the command's ``gate`` parameter) and ``--gate point|ci`` (how it is judged)."""
    fn = click.option("--gate", "gate_mode", type=click.Choice(GATES), default="point", show_default=True,
                      expose_value=False, callback=_remember_gate,
                      help="What --fail-under judges: the pass rate (point) or the lower bound of its "
                           "95% Wilson interval (ci).")(fn)
    return click.option("--fail-under", "gate", default=None, metavar="RATE",
                        callback=lambda ctx, param, text: rate(text),
                        help="Exit 1 when the pass rate is under RATE (0.9 or 90%).")(fn)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises ``KeyboardInterrupt`` inside the block, as SIGINT does, so ``Session.run`` stops
    taking pairs, keeps what finished and says how to resume whichever signal stopped it."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread (a host calling main() from another one)
        return
    import signal  # start-up time: its enums cost `evaljobs --help` about a millisecond


    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def gate_mode() -> str:
    """The ``--gate`` of the command being run (``point`` unless given)."""
    context = click.get_current_context(silent=True)
    return (context.meta.get(_GATE_KEY) if context is not None else None) or "point"


def conclude(verdict: Any) -> None:
    """Tell the user what the library decided (``RunInfo.gate``'s lines) and exit with its code."""
    for line in verdict.lines:
        echo(line, err=True)
    if verdict.exit_code:
        sys.exit(verdict.exit_code)


def finish(info: Any, threshold: float | None, *, as_json: bool = False) -> None:
    """Print the run's report (a table, or JSON), then conclude with :meth:`RunInfo.gate`'s verdict.

    A run the library did not follow (``RunInfo.detached``: queued on Redis without ``--wait``) is
    only started: its id is the output, for a script to ``watch`` it, and there is nothing to gate.
    """
    from evaljobs.api import render_run  # start-up time: only once a run exists

    if info.detached:
        click.echo(info.id)
        return

    if info.report is None:
        click.echo(
            f"run {info.id} is {info.status} with {info.persisted}/{info.expected} pairs; no report yet",
            err=True,
        )
    else:
        text = render_run(info, "json" if as_json else "table")
        echo(text, nl=not text.endswith("\n"))
    conclude(info.gate(threshold, gate_mode()))


__all__ = ["EXIT_OK", "EXIT_GATE", "EXIT_USAGE", "Group", "exit_for", "one_line_errors", "message",
           "db_option", "broker_option", "providers_option", "json_option", "width_option",
           "GLOBAL_OPTIONS", "forward_global_options", "command_path", "import_options", "rate",
           "fail_under_option", "gate_mode", "conclude", "finish", "allow_code_option",
           "worker_allowance_options"]


def _allowing(fn: Callable, options: list[Callable]) -> Callable:
    """``fn`` with ``options`` that the operator's allowances are read from, put into this process's
    settings (and so into the worker processes it starts) before ``fn`` runs."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, allow_endpoint: tuple[str, ...] = (), allow_env: tuple[str, ...] = (),
                allow_code: bool = False, **kwargs: Any) -> Any:
        if allow_endpoint or allow_env or allow_code:
            from evaljobs import config  # start-up time: only when a flag is given

            now = config.settings()
            config.configure(now, allowed_base_urls=now.allowed_base_urls + tuple(allow_endpoint),
                             allowed_env=now.allowed_env + tuple(allow_env),
                             allow_code=True if allow_code else None)
        return fn(*args, **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


_ALLOW_CODE = click.option(
    "--allow-code", is_flag=True,
    help="Run the code a catalog carries (python/javascript assertions, transforms, MCP servers its tools "
         "start), in a process holding no secret (EVALJOBS_ALLOW_CODE=1); refused otherwise. "
         "docs/security.md.")


def allow_code_option(fn: Callable) -> Callable:
    """``--allow-code`` (``evaljobs run``, ``catalog check``): this process runs a catalog's code."""
    return _allowing(fn, [_ALLOW_CODE])


def worker_allowance_options(fn: Callable) -> Callable:
    """What a worker's operator allows the runs it evaluates (``evaljobs worker``, ``evaljobs pool``)."""
    return _allowing(fn, [
        click.option("--allow-endpoint", multiple=True, metavar="URL",
                     help="A base URL this worker may send its keys to for a run's stored providers, "
                          "besides its own providers file's and the presets', and the allowed variables to "
                          "for a catalog's tools (EVALJOBS_ALLOWED_BASE_URLS)."),
        click.option("--allow-env", multiple=True, metavar="NAME",
                     help="A variable a run's stored providers may read here, besides those its own "
                          "providers file and the presets name, and a catalog's tools may read "
                          "(EVALJOBS_ALLOWED_ENV)."),
        _ALLOW_CODE,
    ])
