"""Operations that need no session (a worker or a viewer is not a session of its own): serving workers,
pools and the simulated provider, the governor's budgets and the schema upgrade.

Each opens what it needs. Re-exported by :mod:`evaljobs.api` (loaded on first use: ``evaljobs run``
needs none of this module), as are :func:`evaljobs.starter.start_project`,
:func:`evaljobs.view.serve_viewer` and :func:`evaljobs.view.export_bundle` (as ``export_run``).
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, ContextManager, Sequence

from evaljobs import config, store
from evaljobs.errors import OptionError, cannot_listen
from evaljobs.governor import Governor
from evaljobs.redact import redact
from evaljobs.simulated import SimulatedProvider
from evaljobs.workers import launch


def work(*, broker: str, threads: int | None = None, processes: int | None = None,
         min: int | None = None, max: int | None = None, idle_seconds: float = 30.0, lane: str = "bulk",
         queues: Sequence[str] = (), recover_every: float = 0.0, db: str | None = None,
         providers: str | None = None, middleware: Sequence[str] = (), verbose: bool = False,
         metrics_port: int | None = None, metrics_host: str = "127.0.0.1",
         health_port: int | None = None, log_format: str = "text") -> dict[str, Any]:
    """Serve Dramatiq workers on ``broker`` (Redis) until stopped (``evaljobs worker``).

    Everything is checked first, each problem one line (a ``UsageError``): options a pool would
    ignore, the broker and lane, sizes the machine cannot start, taken ports, host middleware,
    a broker that does not answer. With ``min``/``max`` an elastic pool is served in this
    process and its final state returned; otherwise this process becomes ``processes`` Dramatiq
    processes of ``threads`` threads (``exec``: a supervisor's signals reach them) and never returns.
    """
    return launch.work(broker=broker, threads=threads, processes=processes, min=min, max=max,
                idle_seconds=idle_seconds, lane=lane, queues=queues, recover_every=recover_every, db=db,
                providers=providers, middleware=middleware, verbose=verbose,
                serving=launch.Serving(metrics_port, metrics_host, health_port, log_format))


def serve_pool(*, min: int = 1, max: int = 16, idle_seconds: float = 30.0, lane: str = "bulk",
               broker: str | None = None, db: str | None = None, queues: Sequence[str] = (),
               providers: str | None = None, recover_every: float = 0.0, metrics_port: int | None = None,
               metrics_host: str = "127.0.0.1", health_port: int | None = None,
               log_format: str = "text") -> dict[str, Any]:
    """Serve an elastic pool with its logs, metrics and probes until SIGTERM/SIGINT (``evaljobs pool``).

    The arguments are checked before anything is contacted; returns the pool's final state.
    :meth:`pool` serves one on this session's broker, for a host that holds a session.
    """
    return launch.serve_pool(min=min, max=max, idle_seconds=idle_seconds, lane=lane, broker=broker, db=db,
                      queues=queues, providers=providers, recover_every=recover_every,
                      serving=launch.Serving(metrics_port, metrics_host, health_port, log_format))


def serve_simulated_provider(*, host: str = "127.0.0.1", port: int = 8765, latency: float = 0.2,
                             jitter: float = 0.0, max_concurrent: int | None = None,
                             rpm: int | None = None, error_rate: float = 0.0, batch_delay: float = 0.0,
                             batch_window: float | None = None,
                             on_ready: Callable[[str], None] | None = None) -> None:
    """Serve the simulated provider until Ctrl-C or SIGTERM (``evaljobs mock-provider``).

    ``on_ready(url)`` is told its address once it listens; a port in use is one ``UsageError``.
    """
    provider = SimulatedProvider(host=host, port=port, latency=latency, jitter=jitter,
                                 max_concurrent=max_concurrent, rpm=rpm, error_rate=error_rate,
                                 batch_delay=batch_delay, batch_window=batch_window)
    try:
        provider.serve_forever(on_ready=None if on_ready is None else lambda p: on_ready(p.url))
    except OSError as exc:
        raise cannot_listen(host, port, exc) from None


def governor_budgets(broker: str | None = None) -> list[dict[str, Any]]:
    """The provider governor's shared budgets, one row each (``evaljobs governor``).

    Read from the governor's Redis (``EVALJOBS_GOVERNOR_URL``, else ``broker``): without one, or
    when it does not answer, one line (never a silent empty local governor).
    """
    now = config.Settings.from_env()  # read now: a shell may have changed it
    url = now.governor_url or config.state_redis(broker, now) or broker
    if not url or not url.startswith(config.REDIS_SCHEMES):
        raise OptionError("the governor's shared state lives in Redis: "
                          "pass --broker redis://… or set EVALJOBS_BROKER_URL", "--broker")
    launch.ping_redis(url)
    governor = Governor(url)
    try:
        return governor.stats()
    finally:
        governor.close()


def upgrade_schema(db: str | None = None, *,
                   stage: "Callable[[str], ContextManager[Any]] | None" = None) -> list[str]:
    """Create or upgrade the database's schema (``evaljobs db upgrade``): the changes made, if any.

    ``stage(label)`` wraps the work, its label naming the database with its password masked: an
    upgrade may wait on a lock or a long ALTER, and a command silent for a minute looks hung.
    """
    label = f"db upgrade: {redact(db or config.settings().database_url or store.DEFAULT_URL)}"
    with stage(label) if stage is not None else nullcontext():
        store.connect(db)
        return store.upgrade()


__all__ = ["work", "serve_pool", "serve_simulated_provider", "governor_budgets",
           "upgrade_schema"]
