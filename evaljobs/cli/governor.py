"""``evaljobs governor``: the provider governor's shared budgets, read from its Redis.

A thin shell over :func:`evaljobs.api.governor_budgets`, imported inside the command
(start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import json

import click


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--broker", envvar="EVALJOBS_BROKER_URL", default=None,
              help="The broker's Redis, which holds the governor's state (unless EVALJOBS_GOVERNOR_URL names "
                   "another).")
def governor(as_json, broker) -> None:
    """Show the provider governor: per deployment budget, limit, in flight, waiting, admitted, 429s, waits."""
    from evaljobs import api  # start-up time (see the module docstring)

    rows = api.governor_budgets(broker)
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


__all__ = ["governor"]
