"""``evaljobs providers list`` and ``evaljobs providers check``: what is configured, and does it answer.

``list`` reads configuration only and never prints a key, only whether its
variable is set. ``check`` makes one minimal real call per model (a few tokens)
and prints its latency or the exact error, so a bad key or URL is found before a
run is started.
"""
from __future__ import annotations

import json

import click

from evaljobs.cli._options import conclude, echo


@click.group("providers")
def providers_group() -> None:
    """Providers: presets and configured entries (list), and one real call per model (check)."""


@providers_group.command("list")
@click.option("--providers", envvar="EVALJOBS_PROVIDERS", default=None, type=click.Path(dir_okay=False),
              help="Providers config (YAML) on top of the presets.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per provider instead of a table.")
def providers_list(providers, as_json) -> None:
    """Every provider: wire format, base URL, key variable (set or not, never the key), streaming, prices."""
    from evaljobs import api  # start-up time of `evaljobs --help`

    listed = api.list_providers(providers)
    rows = listed.rows
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    header = (
        "PROVIDER",
        "API",
        "BASE URL",
        "KEY VARIABLE",
        "KEY",
        "STREAM",
        "PRICES",
        "CHECKED",
        "FROM",
        "READY",
    )
    table = [header] + [(r["name"], r["api"], r["base_url"], r["api_key_env"] or "-", r["key"],
                         "yes" if r["stream"] else "no", str(r["prices"]), r["checked"] or "-", r["origin"],
                         "yes" if r["ready"] else "no") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    click.echo(f"\nproviders: {listed.source}", err=True)


@providers_group.command("check")
@click.option("-m", "--model", "models", multiple=True,
              help="Model spec provider/model to call; repeat. Default: the first priced model of each "
                   "provider that is ready (key set).")
@click.option("--providers", envvar="EVALJOBS_PROVIDERS", default=None, type=click.Path(dir_okay=False),
              help="Providers config (YAML) on top of the presets.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds per call.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per model instead of a line.")
def providers_check(models, providers, timeout, as_json) -> None:
    """One minimal real call per model: its latency (and time to first token), or the exact error.

    Exits 1 when any call failed, 2 when a model names no known provider.
    """
    from evaljobs import api  # start-up time of `evaljobs --help`

    def show(outcome) -> None:
        if as_json:
            click.echo(json.dumps({"model": outcome.model, "ok": outcome.error is None,
                                   "error": outcome.error,
                                   "latency_ms": outcome.latency_ms, "ttft_ms": outcome.ttft_ms,
                                   "answer": outcome.answer}))
        elif outcome.error is not None:
            echo(f"{outcome.model}  FAIL  {outcome.error}")
        else:
            ttft = f", first token {outcome.ttft_ms:.0f} ms" if outcome.ttft_ms is not None else ""
            click.echo(f"{outcome.model}  ok  {outcome.latency_ms:.0f} ms{ttft}  {outcome.answer!r}")

    checked = api.check_providers_live(models, providers=providers, timeout=timeout, on_probe=show)
    for note in checked.notes:
        click.echo(f"note: {note}", err=True)
    conclude(checked.verdict())
