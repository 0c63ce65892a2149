"""``evaljobs mock-provider``: serve the simulated provider (for demos, tests and benchmarks).

A thin shell over :func:`evaljobs.api.serve_simulated_provider`, imported inside the
command (start-up time of ``evaljobs --help``).
"""
from __future__ import annotations

import click


@click.command("mock-provider")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option(
    "--latency", type=click.FloatRange(min=0), default=0.2, show_default=True, help="Seconds per call."
)
@click.option("--jitter", type=click.FloatRange(min=0), default=0.0, show_default=True)
@click.option(
    "--max-concurrent", type=click.IntRange(min=1), default=None, help="429 beyond this many in flight."
)
@click.option(
    "--rpm", type=click.IntRange(min=1), default=None, help="429 beyond this many requests a minute."
)
@click.option("--error-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True)
@click.option(
    "--batch-delay",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds from a batch's creation to its end (OpenAI Batch, Anthropic Message Batches).",
)
@click.option(
    "--batch-window",
    type=click.FloatRange(min=0),
    default=None,
    help="A batch not ended this many seconds after creation expires (default: never).",
)
def mock_provider(
    host, port, latency, jitter, max_concurrent, rpm, error_rate, batch_delay, batch_window
) -> None:
    """Serve the simulated OpenAI-compatible provider (for demos, tests, benchmarks)."""
    from evaljobs import api  # start-up time (see the module docstring)

    api.serve_simulated_provider(
        host=host, port=port, latency=latency, jitter=jitter, max_concurrent=max_concurrent, rpm=rpm,
        error_rate=error_rate, batch_delay=batch_delay, batch_window=batch_window,
        on_ready=lambda url: click.echo(
            f"simulated provider on {url}  (export EVALJOBS_SIM_URL={url}); Ctrl-C stops", err=True))


__all__ = ["mock_provider"]
