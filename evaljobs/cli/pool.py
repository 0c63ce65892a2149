"""``evaljobs pool``: an elastic worker pool (``--min --max --idle-seconds --lane``) in one process.

Registered in ``evaljobs.cli`` with ``main.add_command(pool_worker)``; ``evaljobs
worker --min/--max`` may call :func:`run_pool` with the same arguments.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Sequence

import click

EXIT_USAGE = 2


class _OneLineErrors(click.Command):
    """A bad flag is one line on stderr and exit 2, like every other evaljobs user error."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            ctx.exit(EXIT_USAGE)


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    click.get_current_context().exit(EXIT_USAGE)


def run_pool(*, min: int, max: int, idle_seconds: float, lane: str, broker: str, db: str | None = None,
             queues: Sequence[str] = (), providers: str | None = None, recover_every: float = 0.0,
             poll: float = 0.05, stop: threading.Event | None = None) -> dict:
    """Bind the database and broker, run a :class:`~evaljobs.pool.Pool` until ``stop`` (or SIGTERM/SIGINT).

    Returns the pool's final :meth:`~evaljobs.pool.Pool.state`. Raises
    ``ValueError`` (one line) for bad arguments before connecting to anything.
    """
    from evaljobs import store
    from evaljobs.workers.pool import Pool, validate

    validate(min, max, idle_seconds, lane)
    _check_broker(broker)
    if providers:
        os.environ["EVALJOBS_PROVIDERS"] = str(Path(providers).resolve())
    os.environ["EVALJOBS_LANE"] = lane  # runtime.lane() reads the environment first
    from evaljobs.pipeline.broker import configure

    store.connect(db)
    binding = configure(broker)
    try:
        binding.broker.client.ping()
    except Exception as exc:  # noqa: BLE001 - redis' connection errors: say which URL, in one line
        binding.broker.close()
        raise ValueError(f"cannot reach the broker at {broker}: {' '.join(str(exc).split())}") from None
    binding.broker.emit_after("process_boot")  # starts TimeLimit's watchdog, as Dramatiq's CLI does
    recovery = None
    if recover_every:
        from evaljobs.pipeline.recovery import PeriodicRecovery

        recovery = PeriodicRecovery(binding, recover_every).start()
    pool = Pool(min, max, idle_seconds, lane, broker=binding.broker, queues=tuple(queues) or (binding.queue,),
                poll=poll)
    stop = stop or threading.Event()
    restore = _on_signals(stop)
    try:
        pool.start()
        logging.getLogger(__name__).info("pool %s: %d..%d members on %s, lane %s, idle %gs", pool.id,
                                         min, max, ", ".join(pool.queues), lane, idle_seconds)
        while not stop.wait(0.5):
            pass
    finally:
        pool.stop()
        if recovery is not None:
            recovery.stop()
        restore()
        binding.broker.close()
    return pool.state()


def configure_logging() -> None:
    """Dramatiq-style log lines on stderr, without one line per member start/stop or per provider call."""
    logging.basicConfig(level=logging.INFO,
                        format="[%(asctime)s] [PID %(process)d] [%(threadName)s] [%(name)s] [%(levelname)s] "
                               "%(message)s")
    logging.getLogger("dramatiq.worker.Worker").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _check_broker(url: str | None) -> None:
    if not url:
        raise ValueError("a pool needs a shared broker: --broker redis://host:port/db "
                         "(or EVALJOBS_BROKER_URL)")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"a pool needs a shared broker: --broker redis://host:port/db, not {url!r}")


def _on_signals(stop: threading.Event):
    """SIGTERM/SIGINT stop the pool gracefully (only possible from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


@click.command("pool", cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--min", "min_", type=int, default=1, show_default=True,
              help="Fewest members (worker threads).")
@click.option("--max", "max_", type=int, default=16, show_default=True, help="Most members.")
@click.option("--idle-seconds", type=float, default=30.0, show_default=True,
              help="Retire a member idle this long (never below --min).")
@click.option("--lane", envvar="EVALJOBS_LANE", default="bulk", show_default=True,
              help="Governor lane of the members' provider calls: interactive or bulk.")
@click.option("-Q", "--queues", multiple=True, help="Queues to serve (default: agents).")
@click.option("--recover-every", type=float, default=0.0, show_default=True,
              help="Also check every N seconds for runs whose messages were lost (0: off).")
@click.option("--db", envvar="EVALJOBS_DATABASE_URL", default=None,
              help="Database URL: sqlite:///path.db or postgresql://…")
@click.option("--broker", envvar="EVALJOBS_BROKER_URL", default=None, help="redis://host:port/db")
@click.option("--providers", envvar="EVALJOBS_PROVIDERS", default=None, type=click.Path(dir_okay=False),
              help="Providers config (YAML).")
def pool_worker(min_, max_, idle_seconds, lane, queues, recover_every, db, broker, providers) -> None:
    """Run an elastic worker pool: between --min and --max members, following the queue's backlog."""
    from evaljobs import store
    from evaljobs.workers.pool import validate

    try:
        validate(min_, max_, idle_seconds, lane)
        if recover_every < 0:
            raise ValueError(f"--recover-every must be at least 0, not {recover_every!r}")
        _check_broker(broker)
    except ValueError as exc:
        _fail(str(exc))
    configure_logging()
    try:
        run_pool(min=min_, max=max_, idle_seconds=idle_seconds, lane=lane, broker=broker, db=db,
                 queues=queues, providers=providers, recover_every=recover_every)
    except (ValueError, store.StoreError) as exc:
        _fail(str(exc))


if __name__ == "__main__":  # pragma: no cover - ``python -m evaljobs.cli.pool`` before it is registered
    pool_worker()
