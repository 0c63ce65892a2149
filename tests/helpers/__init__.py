"""What the tests share, in one place: real servers, real worker processes, fleets and catalog builders.

Tests import from here (``from helpers import Fleet, numbered_catalog``), never from
another test module: a test module is a list of tests, and importing one runs its
fixtures' module-level set-up and hides where a helper lives. Fixtures (the real
Redis and PostgreSQL of the session, the simulated provider) are in ``conftest.py``.

* :mod:`helpers.servers` — throwaway ``redis-server``, ``rabbitmq-server`` and PostgreSQL on loopback.
* :mod:`helpers.retry_after` — a pair answered 429 once, and the retry gap its provider measured.
* :mod:`helpers.paths` — the ``PYTHONPATH`` a child process finds the tests' own modules on.
* :mod:`helpers.workers` — ``evaljobs worker`` processes and the ``evaljobs`` command line.
* :mod:`helpers.fleet` — a supervised fleet of workers running one run, and the checks
  every fault test ends with.
* :mod:`helpers.catalogs` — catalogs of any size, written as YAML through the real loader.
* :mod:`helpers.database` — a big populated database and its query plans (the "no full scan" tests).
* :mod:`helpers.browser` — headless Chromium over the DevTools protocol (HTML report, viewer).
* :mod:`helpers.viewer` — ``evaljobs view`` as a process on a free port.
* :mod:`helpers.parity` — fixed answers for the parity suites (source tool vs evaljobs, same answers).
* :mod:`helpers.counting` — a counting OpenAI-compatible provider process (a provider we did not write).
* :mod:`helpers.recording` — a loopback endpoint that records every request's headers ("anywhere").
* :mod:`helpers.otlp` — an OTLP/HTTP trace receiver (what a collector would be sent, decoded).
* :mod:`helpers.prometheus` — a real Prometheus server scraping loopback targets, and PromQL.
* :mod:`helpers.cli` — the ``evaljobs`` command line in the test's process (the ``cli`` fixture).
* :mod:`helpers.events` — the ``complete`` events a run publishes, counted.
* :mod:`helpers.results` — results of the support catalog that the report tests render.
* :mod:`helpers.supervisor` — supervisord on scripts/supervisord.conf, and supervisorctl.
* :mod:`helpers.netns_runs` — a worker "machine" in a network namespace behind links of its own (fixtures
  registered by tests/conftest.py), and the checks its runs end with.
* :mod:`helpers.stub` — the ``evaljobs.testing`` plugin's StubBroker with the declared actors and queue.
"""
import importlib
from typing import Any

# Where each name lives. Loaded on first use (PEP 562), so that the benchmark scripts, which run
# in a virtualenv without the test extra, can use `helpers.servers` and `helpers.workers` without
# importing pytest through `helpers.stub`.
_HOMES = {
    "catalogs": ["abc_catalog_yaml", "numbered_catalog"],
    "database": ["assert_no_full_scans", "full_scans", "populate", "postgres_rows", "sql_log", "utc_now"],
    "fleet": [
        "FAST",
        "Events",
        "Fleet",
        "FleetRun",
        "assert_all_passed",
        "assert_every_pair_once",
        "expected_pairs",
        "fleet_run",
        "graceful_stop",
        "observe",
        "redis_queue_state",
    ],
    "counting": ["CountingServer", "counting_files"],
    "events": ["counted_completes"],
    "otlp": ["OtlpReceiver", "ReceivedSpan"],
    "prometheus": ["PrometheusServer"],
    "retry_after": ["RETRY_AFTER", "retry_after_catalog", "retry_gap"],
    "stub": ["StubBinding", "plugin_broker"],
    "parity": ["disagreements", "expand", "run_evaljobs", "say", "write_jsonl"],
    "recording": ["RecordingServer"],
    "results": ["ORDER_LOOKUP", "claimed_cancel", "shipped_order"],
    "servers": ["PostgresServer", "RabbitmqServer", "RedisServer", "ServerError", "free_port", "send_json",
                "serving", "url_of"],
    "viewer": ["Viewer", "finished_run", "viewer_and_browser"],
    "workers": ["ROOT", "CommandProcess", "WorkerProcess", "evaljobs_cli", "one_result_on", "pool_thread",
                "wait_until"],
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'helpers' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"helpers.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "CountingServer",
    "counting_files",
    "abc_catalog_yaml",
    "numbered_catalog",
    "StubBinding",
    "plugin_broker",
    "full_scans",
    "populate",
    "postgres_rows",
    "sql_log",
    "utc_now",
    "Viewer",
    "finished_run",
    "viewer_and_browser",
    "FAST",
    "Events",
    "Fleet",
    "FleetRun",
    "assert_all_passed",
    "assert_every_pair_once",
    "expected_pairs",
    "fleet_run",
    "graceful_stop",
    "observe",
    "redis_queue_state",
    "PostgresServer",
    "RabbitmqServer",
    "RedisServer",
    "RETRY_AFTER",
    "retry_after_catalog",
    "retry_gap",
    "ServerError",
    "free_port",
    "ROOT",
    "WorkerProcess",
    "evaljobs_cli",
    "wait_until",
    "disagreements",
    "expand",
    "run_evaljobs",
    "say",
    "write_jsonl",
]
