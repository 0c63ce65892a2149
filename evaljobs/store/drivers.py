"""peewee without its PostgreSQL driver until a PostgreSQL URL is opened (start-up time).

peewee imports psycopg2 when it is itself imported, if the driver is installed
(``evaljobs[postgres]``), and registers psycopg2's UUID adapter: every SQLite
command — ``evaljobs run`` on the embedded default above all — would pay for a
driver it never uses. So :func:`import_peewee` imports peewee with psycopg2
hidden, and :func:`attach_psycopg2` gives peewee, when the first PostgreSQL
database is opened, exactly what its own import would have set (the module
globals ``psycopg2``, ``pg_extensions``, ``Json_pg2``, ``pg_register_uuid`` and
``Psycopg2Adapter``'s transaction-status constants). Any ``PostgresqlDatabase``
created afterwards — ours or a host's own in the same process — attaches the
driver first (``PostgresqlDatabase.init`` is wrapped), as peewee picks and builds
its driver adapter there.

``tests/cli/test_import_budget.py`` pins this against the installed peewee: a
peewee imported this way and then attached has the same driver state as one
imported normally. If peewee was imported before evaljobs (by a host), nothing
is hidden and attaching does nothing.
"""
from __future__ import annotations

import sys
import threading
from types import ModuleType

#: The driver peewee would import at its own import time, and we defer.
DEFERRED = "psycopg2"
#: The transaction-status constants peewee copies onto Psycopg2Adapter at import time.
ADAPTER_STATUSES = {"txn_idle": "TRANSACTION_STATUS_IDLE", "txn_inerror": "TRANSACTION_STATUS_INERROR",
                    "txn_unknown": "TRANSACTION_STATUS_UNKNOWN"}

_lock = threading.Lock()


def import_peewee() -> ModuleType:
    """peewee, imported (if not yet) with psycopg2 hidden from it."""
    with _lock:
        loaded = sys.modules.get("peewee")
        if loaded is not None:
            return loaded
        hide = DEFERRED not in sys.modules
        if hide:
            # None in sys.modules makes `import psycopg2` raise ImportError (typeshed allows modules only)
            sys.modules[DEFERRED] = None  # type: ignore[assignment]
        try:
            import peewee as imported
        finally:
            if hide and sys.modules.get(DEFERRED, False) is None:
                del sys.modules[DEFERRED]
        # As a plain module: the globals peewee sets for its driver are not in its type stubs.
        peewee: ModuleType = imported
        if hide and peewee.psycopg2 is None:
            _attach_on_init(peewee)
        return peewee


def _attach_on_init(peewee: ModuleType) -> None:
    """Any PostgreSQL database created from now on (ours, or a host's own in the same process)
    attaches the driver first, as peewee's adapter is chosen and built in ``init``."""
    original = peewee.PostgresqlDatabase.init

    def init(self, *args, **kwargs):
        try:
            attach_psycopg2()
        except ImportError:  # not installed: peewee says so itself when a connection is opened
            pass
        return original(self, *args, **kwargs)

    init.__wrapped__ = original  # type: ignore[attr-defined]
    peewee.PostgresqlDatabase.init = init


def attach_psycopg2() -> None:
    """Give peewee the psycopg2 driver (ImportError when it is not installed); idempotent."""
    peewee = import_peewee()
    with _lock:
        if peewee.psycopg2 is not None:
            return
        import psycopg2
        from psycopg2 import extensions as pg_extensions
        from psycopg2.extras import Json as Json_pg2
        from psycopg2.extras import register_uuid as pg_register_uuid

        pg_register_uuid()
        # setattr: the globals peewee sets for its driver are not in its type stubs.
        setattr(peewee, "pg_extensions", pg_extensions)
        setattr(peewee, "Json_pg2", Json_pg2)
        setattr(peewee, "pg_register_uuid", pg_register_uuid)
        for attribute, constant in ADAPTER_STATUSES.items():
            setattr(peewee.Psycopg2Adapter, attribute, getattr(pg_extensions, constant))
        setattr(peewee, "psycopg2", psycopg2)  # last: the attribute other threads check


__all__ = ["import_peewee", "attach_psycopg2", "DEFERRED", "ADAPTER_STATUSES"]
