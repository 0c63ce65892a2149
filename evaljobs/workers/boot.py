"""Entry module for ``dramatiq evaljobs.workers.boot``: binds the broker, database and actors from the
environment.

This is the module to give Dramatiq's own CLI (``dramatiq evaljobs.workers.boot --processes 2
--threads 8``), as ``evaljobs worker`` does. Everything comes from the environment
(:class:`evaljobs.config.Settings`): ``EVALJOBS_BROKER_URL`` (required: a worker process
consumes the shared Redis or RabbitMQ broker; without one it exits with a one-line error instead of
waiting on an in-process broker nothing ever sends to), ``EVALJOBS_DATABASE_URL``,
``EVALJOBS_MIDDLEWARE`` (host middleware, ``module:Class,…``) and the rest of the environment list in
docs/cli.md.
``EVALJOBS_RECOVER_EVERY=SECONDS`` also runs the periodic recovery check
(one worker at a time, see :class:`evaljobs.pipeline.recovery.PeriodicRecovery`).
"""
import sys

from evaljobs import config
from evaljobs.errors import ConfigurationError

try:
    _settings = config.settings()
except ConfigurationError as _refused:  # an amqp:// broker without EVALJOBS_REDIS_URL, a short key, …
    print(f"error: {_refused}", file=sys.__stderr__ or sys.stderr, flush=True)  # one line, as below
    sys.exit(2)
if not (_settings.redis_broker or _settings.amqp_broker):
    # Exit code 2 is Dramatiq's "import failed": its main process stops the other workers and exits 2.
    # Written to the process's own stderr (sys.__stderr__), not to sys.stderr: in a Dramatiq worker
    # process that is the pipe to the main process's log watcher, which stops reading when the worker
    # exits and, on a busy machine, stopped before reading this line (the command then exited 2 in
    # silence; seen under scripts/test --stress).
    from evaljobs.redact import redact

    given = f" (EVALJOBS_BROKER_URL={redact(_settings.broker_url)!r})" if _settings.broker_url else ""
    print(
        f"error: evaljobs.workers.boot needs a shared broker{given}: set "
        "EVALJOBS_BROKER_URL=redis://host:port/db or amqp://… (or run `evaljobs worker --broker redis://...`)",
        file=sys.__stderr__ or sys.stderr,
        flush=True,
    )
    sys.exit(2)

from evaljobs import store  # noqa: E402 - after the check: a worker without a broker connects to nothing
from evaljobs.pipeline.broker import configure  # noqa: E402
from evaljobs.pipeline.recovery import PeriodicRecovery  # noqa: E402

if _settings.log_format == "json":
    import logging

    from evaljobs.workers.logs import use_json_logs

    use_json_logs(logging.DEBUG if _settings.verbose else logging.INFO)

store.connect(settings=_settings)
binding = configure(settings=_settings)

if _settings.otlp_endpoint:
    from evaljobs import extras

    if not extras.installed("otel"):
        print("error: OTEL_EXPORTER_OTLP_ENDPOINT is set (tracing) but the 'otel' extra is not installed: "
              "pip install 'evaljobs[otel]'", file=sys.__stderr__ or sys.stderr, flush=True)
        sys.exit(2)
    from evaljobs.workers import tracing

    binding.broker.add_middleware(tracing.start(_settings))

if _settings.health_dir:
    from evaljobs.workers.health import ConsumerBeacon

    binding.broker.add_middleware(ConsumerBeacon(_settings.health_dir))  # for /readyz (workers.health)

if _settings.log_format == "json":
    from evaljobs.workers.logs import LogContext

    binding.broker.add_middleware(LogContext())

if _settings.metrics_port is not None:
    if not _settings.metrics_dir:
        print("error: EVALJOBS_METRICS_PORT needs PROMETHEUS_MULTIPROC_DIR (an empty folder the worker "
              "processes share; `evaljobs worker --metrics-port` makes one)",
              file=sys.__stderr__ or sys.stderr, flush=True)
        sys.exit(2)
    from evaljobs.workers.metrics import start_recording  # the metrics extra, only when asked for

    start_recording()
broker = binding.broker

if _settings.recover_every > 0:
    PeriodicRecovery(binding, _settings.recover_every).start()

from evaljobs.workers.graceful import tolerate_group_sigterm  # noqa: E402

tolerate_group_sigterm()  # systemd / supervisord stopasgroup signal every process of the group at once

from evaljobs.workers.supervision import exit_with_parent  # noqa: E402

exit_with_parent()  # a SIGKILLed main process takes its worker processes with it (graceful SIGTERM)

# A worker thread spends its life waiting on sockets (provider, Redis, database). When one
# wakes, it needs the GIL back from whichever thread is running Python; by default that
# thread keeps it for up to 5 ms, so each handoff (a permit freed → the next call sent,
# a response read → the result persisted) can stall that long. 1 ms trades a little
# switching for those waits.
sys.setswitchinterval(0.001)

import logging  # noqa: E402

# Dramatiq's CLI logs at INFO, and httpx.Client logs every request at INFO (tool calls use one):
# a line per call, formatted here, piped to and written by the parent process — for provider
# calls, before they left httpx.Client, a tenth of a worker's CPU on a fast provider. Faults are in
# the results; `evaljobs worker --verbose` (DEBUG) logs every call, provider calls included.
if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
    logging.getLogger("httpx").setLevel(logging.WARNING)
