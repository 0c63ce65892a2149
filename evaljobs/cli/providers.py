"""``evaljobs mock-provider`` (the simulated provider) and ``evaljobs governor`` (its shared budgets).

The provider code and the Redis client are imported inside the commands
(start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import json
import os

import click

from evaljobs.cli._options import ping_redis
from evaljobs.config import REDIS_SCHEMES, Settings


@click.command("mock-provider")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--latency", type=click.FloatRange(min=0), default=0.2, show_default=True, help="Seconds per call.")
@click.option("--jitter", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option("--max-concurrent", type=click.IntRange(min=1), default=None, help="429 beyond this many in flight.")
@click.option("--rpm", type=click.IntRange(min=1), default=None, help="429 beyond this many requests a minute.")
@click.option("--error-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True)
def mock_provider(host, port, latency, jitter, max_concurrent, rpm, error_rate) -> None:
    """Serve the simulated OpenAI-compatible provider (for demos, tests, benchmarks)."""
    from evaljobs.providers.simulated import SimulatedProvider  # start-up time (see the module docstring)

    provider = SimulatedProvider(host=host, port=port, latency=latency, jitter=jitter,
                                 max_concurrent=max_concurrent, rpm=rpm, error_rate=error_rate)
    try:
        provider.serve_forever(on_ready=lambda p: click.echo(
            f"simulated provider on {p.url}  (export EVALJOBS_SIM_URL={p.url}); Ctrl-C stops", err=True))
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise click.UsageError(f"cannot listen on {host}:{port}: {reason}") from None


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--redis", "redis_url", envvar="EVALJOBS_GOVERNOR_URL", default=None,
              help="Redis holding the governor's state (default: EVALJOBS_BROKER_URL).")
def governor(as_json, redis_url) -> None:
    """Show the provider governor: per deployment budget, limit, in flight, waiting, admitted, 429s, waits."""
    from evaljobs.providers.governor import Governor  # start-up time (see the module docstring)

    url = redis_url or Settings.from_env().broker_url  # read now: a test or a shell may have changed it
    if not url or not url.startswith(REDIS_SCHEMES):
        raise click.BadParameter("the governor's shared state lives in Redis: pass --redis redis://… "
                                 "or set EVALJOBS_BROKER_URL", param_hint="--redis")
    ping_redis(url)  # one line now, rather than a silent fallback to an empty local governor
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


__all__ = ["mock_provider", "governor"]
