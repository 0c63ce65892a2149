"""Entry module for ``dramatiq evaljobs.workers.boot``: binds the broker, database and actors from the environment.

``EVALJOBS_RECOVER_EVERY=SECONDS`` also runs the periodic recovery check
(one worker at a time, see :class:`evaljobs.recovery.PeriodicRecovery`).
"""
from evaljobs import config, store
from evaljobs.pipeline.broker import configure
from evaljobs.pipeline.recovery import PeriodicRecovery

_settings = config.settings()
store.connect(settings=_settings)
binding = configure(settings=_settings)
broker = binding.broker

if _settings.recover_every > 0:
    PeriodicRecovery(binding, _settings.recover_every).start()

from evaljobs.workers.graceful import tolerate_group_sigterm  # noqa: E402

tolerate_group_sigterm()  # systemd / supervisord stopasgroup signal every process of the group at once

import sys  # noqa: E402

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
