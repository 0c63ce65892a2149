"""The ``evaljobs`` command line (click).

Every error a user can cause is one line on stderr and a non-zero exit
(2 for bad input, 1 for a failed gate) — never a traceback.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from evaljobs import store
from evaljobs.pipeline.strategies import DEFAULT_STRATEGY, STRATEGIES

EXIT_GATE = 1
EXIT_USAGE = 2


def _user_errors() -> tuple[type[BaseException], ...]:
    from evaljobs.evaluation.adapters import AdapterError
    from evaljobs.api import UsageError
    from evaljobs.pipeline.broker import BrokerError
    from evaljobs.catalog.modelspec import ModelSpecError

    errors: list[type[BaseException]] = [AdapterError, UsageError, BrokerError, ModelSpecError,
                                         store.StoreError, store.UnknownRun]
    try:
        from evaljobs_middleware.context import ContextError

        errors.append(ContextError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


class Group(click.Group):
    """Turns the errors a user can cause into one line and exit code 2."""

    def invoke(self, ctx: click.Context):
        from evaljobs.catalog import CatalogError

        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            # One line, not click's usage block: what is wrong, and where to look.
            command = f"evaljobs {exc.ctx.info_name} " if exc.ctx and exc.ctx.parent else "evaljobs "
            hint = f" (see `{command.strip()} --help`)"
            click.echo(f"error: {_one_line(exc.format_message())}{hint}", err=True)
            ctx.exit(EXIT_USAGE)
        except CatalogError as exc:
            for problem in exc.problems:
                click.echo(f"error: {problem}", err=True)
            ctx.exit(EXIT_USAGE)
        except _user_errors() as exc:
            click.echo(f"error: {_one_line(exc)}", err=True)
            ctx.exit(EXIT_USAGE)
        except _connection_errors() as exc:
            click.echo(f"error: cannot reach a server: {_one_line(exc)}", err=True)
            ctx.exit(EXIT_USAGE)


def _connection_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.exceptions.ConnectionError, ConnectionError)


def _ping_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        client.ping()
    finally:
        client.close()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.splitlines())


db_option = click.option("--db", envvar="EVALJOBS_DATABASE_URL", default=None,
                         help="Database URL: sqlite:///path.db (default .evaljobs/evaljobs.db) or postgresql://…")
broker_option = click.option("--broker", envvar="EVALJOBS_BROKER_URL", default="memory", show_default=True,
                             help="'memory' (in-process workers) or redis://host:port/db.")
providers_option = click.option("--providers", envvar="EVALJOBS_PROVIDERS", default=None,
                                type=click.Path(dir_okay=False),
                                help="Providers config (YAML): base URLs, API-key env vars, prices.")


def import_options(fn):
    """--format / --include-production-only / --lenient for commands that read catalogs."""
    from evaljobs.catalog.importers import FORMATS

    fn = click.option("--lenient", is_flag=True,
                      help="Imports: skip assertions evaljobs cannot grade (with a warning) instead of failing.")(fn)
    fn = click.option("--include-production-only", is_flag=True,
                      help="Imports: keep ActiveAgent scenarios marked production_only.")(fn)
    fn = click.option("--format", "catalog_format", type=click.Choice(sorted(FORMATS)), default=None,
                      help="Catalog format (default: detected from the file).")(fn)
    return fn


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evaljobs")
def main() -> None:
    """Run LLM-agent evaluation catalogs (scenarios × models) as a fan-out, with one trustworthy report."""


def _rate(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a pass rate (0.9 or 90%)") from None
    if not 0.0 <= value <= 1.0:
        raise click.BadParameter(f"{text!r} is not a pass rate between 0 and 1 (or 0% and 100%)")
    return value


@main.command()
@click.argument("catalog", type=click.Path(dir_okay=False))
@click.option("-m", "--model", "models", multiple=True, required=True,
              help="Model spec provider/model[@label]; repeat for several models.")
@click.option("--strategy", type=click.Choice(STRATEGIES), default=DEFAULT_STRATEGY, show_default=True)
@click.option("--width", type=click.IntRange(min=1), default=8, show_default=True,
              help="Worker threads for --broker memory and the threads strategy.")
@click.option("--wait/--no-wait", default=None,
              help="Follow the run to its report (default: yes, except fanout/per-model on Redis).")
@click.option("--fail-under", default=None, help="Exit 1 when the pass rate is under this (0.9 or 90%).")
@click.option("--adapter", default=None, help="Host adapter module:callable or entry-point name.")
@click.option("--judge-model", default=None, help="Model for llm_judge criteria (default: the catalog's).")
@click.option("--judge-cap", type=click.IntRange(min=0), default=None, help="Most judge calls for this run.")
@click.option("--time-limit", type=click.FloatRange(min=0.1), default=None, help="Seconds per pair.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
@click.option("--cache", is_flag=True,
              help="Answer repeated provider calls from the shared response cache (TTL: EVALJOBS_CACHE_TTL, 7d).")
@import_options
@db_option
@broker_option
@providers_option
def run(catalog, models, strategy, width, wait, fail_under, adapter, judge_model, judge_cap, time_limit,
        as_json, cache, catalog_format, include_production_only, lenient, db, broker, providers) -> None:
    """Evaluate CATALOG against each -m MODEL."""
    from evaljobs.pipeline import events
    from evaljobs.api import Session
    from evaljobs.pipeline.progress import Progress

    gate = _rate(fail_under)
    if not Path(catalog).exists():
        raise click.BadParameter(f"catalog file '{catalog}' does not exist", param_hint="CATALOG")
    session = Session(db=db, broker=broker, width=width, providers=providers)
    try:
        catalog_obj = session.load(catalog, format=catalog_format, lenient=lenient,
                                   include_production_only=include_production_only)
        for warning in session.import_warnings:
            click.echo(f"warning: {warning}", err=True)
        if session.excluded:
            click.echo(f"note: {session.excluded} production_only scenarios left out "
                       f"(--include-production-only keeps them)", err=True)
        expected = len(catalog_obj.scenarios) * len(models)
        progress = Progress(expected)
        inline = strategy not in ("fanout", "per-model")
        if inline:
            events.add_listener(progress)
        try:
            info = session.submit(catalog_obj, list(models), strategy=strategy, adapter=adapter,
                                  judge_model=judge_model, judge_cap=judge_cap, time_limit=time_limit,
                                  cache=cache)
        finally:
            if inline:
                events.remove_listener(progress)
        click.echo(f"run {info.id}: {len(catalog_obj.scenarios)} scenarios × {len(models)} models "
                   f"= {info.expected} pairs ({strategy}, broker {session.binding().url if not inline else 'none'})",
                   err=True)
        follow = wait if wait is not None else (inline or session.binding().is_memory)
        if not inline and not follow:
            click.echo(info.id)
            return
        if not inline:
            info = session.wait(info.id, on_event=progress)
        _print_outcome(info, as_json)
        if info.status == "failed":  # every pair errored: nothing was evaluated
            first = next((r.error for r in store.list_results(info.id) if r.error), "")
            click.echo(f"error: run {info.id} failed: all {info.expected} pairs errored (first: {first[:200]})",
                       err=True)
            sys.exit(EXIT_GATE)
        _gate(info, gate)
    finally:
        session.close()


def _print_outcome(info: store.RunInfo, as_json: bool) -> None:
    from evaljobs.reports.build import render_json, render_table

    if info.report is None:
        click.echo(f"run {info.id} is {info.status} with {info.persisted}/{info.expected} pairs; no report yet",
                   err=True)
        return
    click.echo(render_json(info.report) if as_json else render_table(info.report))


def _gate(info: store.RunInfo, gate: float | None) -> None:
    if gate is None or info.report is None:
        return
    rate = info.report["summary"]["pass_rate"]
    if rate < gate:
        click.echo(f"FAIL: pass rate {rate:.1%} is under --fail-under {gate:.1%}", err=True)
        sys.exit(EXIT_GATE)
    click.echo(f"OK: pass rate {rate:.1%} meets --fail-under {gate:.1%}", err=True)


@main.command()
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@db_option
def runs(limit, as_json, db) -> None:
    """List recent runs."""
    store.connect(db)
    items = store.list_runs(limit=limit)
    if as_json:
        click.echo(json.dumps([_run_summary(r) for r in items], indent=2))
        return
    if not items:
        click.echo("no runs yet: try `evaljobs demo`", err=True)
        return
    click.echo(f"{'RUN':<16} {'STATUS':<9} {'PAIRS':>9} {'PASS':>6}  {'STRATEGY':<10} {'CATALOG':<20} CREATED")
    for r in items:
        rate = f"{r.report['summary']['pass_rate']:.0%}" if r.report else "-"
        click.echo(f"{r.id:<16} {r.status:<9} {r.persisted:>4}/{r.expected:<4} {rate:>6}  {r.strategy:<10} "
                   f"{r.catalog_name[:20]:<20} {r.created_at}")


def _run_summary(r: store.RunInfo) -> dict:
    return {"id": r.id, "status": r.status, "catalog": r.catalog_name, "digest": r.digest, "models": r.models,
            "strategy": r.strategy, "expected": r.expected, "persisted": r.persisted,
            "created_at": str(r.created_at), "finished_at": str(r.finished_at) if r.finished_at else None,
            "pass_rate": r.report["summary"]["pass_rate"] if r.report else None}


@main.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
@db_option
def show(run_id, as_json, db) -> None:
    """Show one run: status, progress and each result."""
    store.connect(db)
    info = store.get_run(run_id)
    results = store.list_results(run_id)
    if as_json:
        click.echo(json.dumps({**_run_summary(info), "results": [r.to_dict() for r in results]}, indent=2,
                              default=str))
        return
    click.echo(f"run {info.id}  {info.status}  {info.persisted}/{info.expected} pairs  catalog {info.catalog_name}"
               f" ({info.digest[:19]})  strategy {info.strategy}")
    click.echo(f"models: {', '.join(info.models)}")
    if info.context:
        click.echo(f"context: {json.dumps(info.context)}")
    for r in results:
        extra = f"  [{r.fault}]" if r.fault else ""
        error = f"  {r.error[:100]}" if r.error else ""
        click.echo(f"  {r.status:<7} {r.score:4.2f}  {r.scenario_key} × {r.model}{extra}{error}")
    missing = store.missing_pairs(run_id)
    if missing:
        click.echo(f"missing {len(missing)} pairs (e.g. {missing[0][0]} × {missing[0][1]})")


@main.group()
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
@db_option
def db_upgrade(db) -> None:
    """Create or upgrade the schema."""
    store.connect(db)
    done = store.upgrade()
    click.echo("\n".join(done) if done else "schema is up to date")


@main.group()
def catalog() -> None:
    """Catalog tools."""


def _read_catalog(path, providers, catalog_format, include_production_only, lenient, grader=None):
    from evaljobs.pipeline import runtime
    from evaljobs.catalog.importers import load_any

    if not Path(path).exists():
        raise click.BadParameter(f"catalog file '{path}' does not exist", param_hint="PATH")
    imported = load_any(path, format=catalog_format, include_production_only=include_production_only,
                        lenient=lenient, grader=grader)
    for warning in imported.warnings:
        click.echo(f"warning: {warning}", err=True)
    return imported, runtime.providers(providers)


_grader_option = click.option(
    "--grader", type=click.Choice(["includes", "match", "fuzzy_match", "model_graded_fact"]), default=None,
    help="JSONL only: how replies are compared with ideal/target (default: includes).")


@catalog.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
@import_options
@_grader_option
@providers_option
def catalog_check(path, catalog_format, include_production_only, lenient, grader, providers) -> None:
    """Validate a catalog (native or imported) and print its digest and what was imported how."""
    from evaljobs.catalog import CatalogSource, parse_source, read_catalog
    from evaljobs.providers.livetools import expand_source

    imported, config = _read_catalog(path, providers, catalog_format, include_production_only, lenient, grader)
    source = read_catalog(path) if imported.format == "native" else CatalogSource(source=path, data=imported.data)
    cat = parse_source(expand_source(source), providers=config)
    extra = f", {imported.excluded} production_only left out" if imported.excluded else ""
    click.echo(f"{path}: ok — {imported.format} catalog '{cat.name}', {len(cat.scenarios)} scenarios{extra}, "
               f"{cat.digest}")
    counts = imported.counts
    if counts:
        click.echo(f"assertions: {counts.get('assertions', 0)} imported, {counts.get('mapped', 0)} mapped to "
                   f"native checks, {counts.get('external', 0)} executed externally (Node, Python, jsonschema), "
                   f"{counts.get('refused', 0)} refused")


@catalog.command("convert")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the native YAML here (default: stdout).")
@import_options
@_grader_option
@providers_option
def catalog_convert(path, output, catalog_format, include_production_only, lenient, grader, providers) -> None:
    """Convert an ActiveAgent, promptfoo or JSONL catalog to the native YAML format."""
    from evaljobs.catalog import parse_catalog
    from evaljobs.catalog.importers import dump_native

    imported, config = _read_catalog(path, providers, catalog_format, include_production_only, lenient, grader)
    parse_catalog(imported.data, source=path, providers=config)  # never write a catalog that would not load
    text = dump_native(imported.data)
    if output:
        Path(output).write_text(text, encoding="utf-8")
        count = len(imported.data.get("scenarios", [])) + sum(len(g.get("scenarios", []))
                                                             for g in imported.data.get("groups", []))
        click.echo(f"wrote {output}: {count} scenarios from {imported.format}"
                   + (f" ({imported.excluded} production_only left out)" if imported.excluded else ""), err=True)
    else:
        click.echo(text, nl=False)


@main.command("mock-provider")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--latency", type=click.FloatRange(min=0), default=0.2, show_default=True, help="Seconds per call.")
@click.option("--jitter", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--max-concurrent", type=click.IntRange(min=1), default=None, help="429 beyond this many in flight.")
@click.option("--rpm", type=click.IntRange(min=1), default=None, help="429 beyond this many requests a minute.")
@click.option("--error-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True)
def mock_provider(host, port, latency, jitter, max_concurrent, rpm, error_rate) -> None:
    """Serve the simulated OpenAI-compatible provider (for demos, tests, benchmarks)."""
    from evaljobs.providers.simulated import SimulatedProvider

    provider = SimulatedProvider(host=host, port=port, latency=latency, jitter=jitter,
                                 max_concurrent=max_concurrent, rpm=rpm, error_rate=error_rate)
    try:
        provider.serve_forever(on_ready=lambda p: click.echo(
            f"simulated provider on {p.url}  (export EVALJOBS_SIM_URL={p.url}); Ctrl-C stops", err=True))
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise click.UsageError(f"cannot listen on {host}:{port}: {reason}") from None


@main.command()
@click.option("--width", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--db", default=None, help="Database URL (default: a fresh SQLite file under .evaljobs/).")
@click.option("--html", "html_path", default=None,
              help="Where to write the HTML report (default .evaljobs/RUN.html).")
def demo(width, db, html_path) -> None:
    """Run the bundled support catalog against two simulated models and print the report."""
    from evaljobs.api import Session
    from evaljobs.reports.html import render_html
    from evaljobs.pipeline.progress import Progress
    from evaljobs.reports.build import render_table

    here = Path(__file__).resolve().parent
    catalog_path = here / "examples" / "support.yaml"
    if not catalog_path.exists():
        # A source checkout: examples/ sits beside the evaljobs package (this file is evaljobs/cli/__init__.py).
        catalog_path = here.parent.parent / "examples" / "catalogs" / "support.yaml"
    models = ["sim/fast", "sim/smart"]
    with Session(db=db, broker="memory", width=width) as session:
        cat = session.load(catalog_path)
        progress = Progress(len(cat.scenarios) * len(models))
        info = session.submit(cat, models, strategy="fanout")
        click.echo(f"run {info.id}: {len(cat.scenarios)} scenarios × {len(models)} simulated models, "
                   f"fan-out over {width} in-process workers", err=True)
        info = session.wait(info.id, on_event=progress)
        click.echo(render_table(info.report))
        html_file = Path(html_path) if html_path else Path(".evaljobs") / f"{info.id}.html"
        html_file.parent.mkdir(parents=True, exist_ok=True)
        html_file.write_text(render_html(info.report, store.list_results(info.id)), encoding="utf-8")
        click.echo(f"\nnext: evaljobs show {info.id}   |   evaljobs report {info.id} --format md", err=True)
        click.echo(f"HTML report: {html_file.resolve()}")


@main.command()
@click.option("--threads", type=click.IntRange(min=1), default=8, show_default=True, help="Threads per process.")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("-Q", "--queues", multiple=True, help="Queues to consume (default: agents).")
@click.option("--recover-every", type=click.FloatRange(min=0), default=0, show_default=True,
              help="Also check every N seconds for runs whose messages were lost (0: off).")
@click.option("--min", "min_", type=int, default=None, help="Elastic pool: fewest members (with --max).")
@click.option("--max", "max_", type=int, default=None, help="Elastic pool: most members.")
@click.option("--idle-seconds", type=float, default=30.0, show_default=True,
              help="Elastic pool: retire members idle this long.")
@click.option("--lane", envvar="EVALJOBS_LANE", default="bulk", show_default=True,
              help="Governor lane for this worker's provider calls: interactive or bulk.")
@click.option("-v", "--verbose", is_flag=True,
              help="Debug logs: Dramatiq's, the database's, and a line for every provider call.")
@db_option
@click.option("--broker", envvar="EVALJOBS_BROKER_URL", required=True, help="redis://host:port/db")
@providers_option
def worker(threads, processes, queues, recover_every, min_, max_, idle_seconds, lane, verbose, db, broker,
           providers) -> None:
    """Run Dramatiq workers with evaljobs' broker and middleware (Ctrl-C / SIGTERM stops gracefully).

    With --min/--max the worker is an elastic pool that follows the queue's backlog.
    """
    if not broker.startswith(("redis://", "rediss://", "unix://")):
        raise click.BadParameter("workers need a shared broker: --broker redis://host:port/db", param_hint="--broker")
    if lane not in ("interactive", "bulk"):
        raise click.BadParameter(f"'{lane}' is not a lane: use interactive or bulk", param_hint="--lane")
    _ping_redis(broker)  # one line now, rather than Dramatiq retrying the connection forever
    if min_ is not None or max_ is not None:
        from evaljobs.cli.pool import configure_logging, run_pool

        low = min_ if min_ is not None else 1
        configure_logging()
        try:
            run_pool(min=low, max=max_ if max_ is not None else max(low, threads), idle_seconds=idle_seconds,
                     lane=lane, broker=broker, db=db, queues=queues, providers=providers,
                     recover_every=recover_every)
        except ValueError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_USAGE)
        return
    env = dict(os.environ, EVALJOBS_BROKER_URL=broker, EVALJOBS_LANE=lane)
    # Dramatiq's idle consumer polls up to worker_timeout apart (default 1 s): that delays start_run,
    # finalize_run and every delayed re-send (governor Busy, Retry-After) by up to a second.
    env.setdefault("dramatiq_worker_timeout", "100")
    if recover_every:
        env["EVALJOBS_RECOVER_EVERY"] = str(recover_every)
    if db:
        env["EVALJOBS_DATABASE_URL"] = db
    if providers:
        env["EVALJOBS_PROVIDERS"] = str(Path(providers).resolve())
    args = [sys.executable, "-m", "dramatiq", "evaljobs.workers.boot", "--processes", str(processes),
            "--threads", str(threads)]
    for queue in queues:
        args += ["--queues", queue]
    if verbose:
        args.append("--verbose")
    os.execve(sys.executable, args, env)


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--redis", "redis_url", envvar="EVALJOBS_GOVERNOR_URL", default=None,
              help="Redis holding the governor's state (default: EVALJOBS_BROKER_URL).")
def governor(as_json, redis_url) -> None:
    """Show the provider governor: per deployment budget, limit, in flight, waiting, admitted, 429s, waits."""
    from evaljobs.providers.governor import Governor

    url = redis_url or os.environ.get("EVALJOBS_BROKER_URL")
    if not url or not url.startswith(("redis://", "rediss://", "unix://")):
        raise click.BadParameter("the governor's shared state lives in Redis: pass --redis redis://… "
                                 "or set EVALJOBS_BROKER_URL", param_hint="--redis")
    _ping_redis(url)  # one line now, rather than a silent fallback to an empty local governor
    gov = Governor(url)
    try:
        rows = gov.stats()
    finally:
        gov.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no budgets yet: the governor records a budget on its first provider call")
        return
    click.echo(f"{'BUDGET':<32} {'LIMIT':>5} {'IN FLIGHT':>9} {'WAITING':>7} {'ADMITTED':>8} {'429s':>5} "
               f"{'MEAN WAIT':>9} {'MAX WAIT':>8}")
    for row in rows:
        click.echo(f"{row['budget'][:32]:<32} {row['limit']:>5} {row['in_flight']:>9} {row['waiting']:>7} "
                   f"{row['admitted']:>8} {row['rate_limited']:>5} {row['mean_wait_ms']:>7.0f}ms "
                   f"{row['max_wait_ms']:>6.0f}ms")


@main.command()
@click.argument("run_id", required=False)
@db_option
@broker_option
def recover(run_id, db, broker) -> None:
    """Re-enqueue lost pairs of running runs and finalize complete-but-unreported ones."""
    from evaljobs.pipeline.recovery import recover as do_recover

    store.connect(db)
    from evaljobs.pipeline.broker import configure

    binding = configure(broker)
    actions = do_recover(binding, run_id)
    if not actions:
        click.echo("nothing to recover")
    for line in actions:
        click.echo(line)


# Registered last: these command modules import the helpers above (_gate, _rate, db_option).
from evaljobs.cli.reports import compare as _compare_command, report as _report_command  # noqa: E402

main.add_command(_report_command)
main.add_command(_compare_command)

from evaljobs.cli.pool import pool_worker  # noqa: E402

main.add_command(pool_worker)


from evaljobs.cli.ops import (cache as cache_group,
                              rerun as rerun_command,
                              status as status_command,
                              watch as watch_command)  # noqa: E402 - registered once main exists

for _command in (watch_command, status_command, rerun_command, cache_group):
    main.add_command(_command)

from evaljobs.cli.bench import bench as bench_command  # noqa: E402

main.add_command(bench_command)

from evaljobs.cli.view import view as view_command  # noqa: E402

main.add_command(view_command)


if __name__ == "__main__":  # pragma: no cover
    main()
