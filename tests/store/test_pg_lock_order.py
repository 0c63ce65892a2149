"""Lock order on PostgreSQL: a worker booting while the others record results.

Under repeated SIGKILL of workers (``test_faults``), PostgreSQL reported ``deadlock detected``.
The two transactions, and the table locks they take in opposite orders:

* :func:`evaljobs.store.record_result` — ``SELECT … FROM run … FOR UPDATE`` (ROW SHARE on ``run``),
  ``INSERT INTO result`` (ROW EXCLUSIVE on ``result``), then ``UPDATE run SET persisted``
  (ROW EXCLUSIVE on ``run``): ``result`` before the strong lock on ``run``.
* ``store.schema.upgrade_tables``, run by ``store.connect()`` in every process that binds the database — every
  worker that boots, so one a second in that test. ``create_tables(safe=True)`` sends
  ``CREATE INDEX IF NOT EXISTS`` for indexes that exist; PostgreSQL takes SHARE on the table
  *before* it finds the index there: SHARE on ``run``, then SHARE on ``result``.

SHARE on ``run`` is granted next to the recorder's ROW SHARE; the booting worker then waits for the
recorder's ROW EXCLUSIVE on ``result``, and the recorder's ``UPDATE run`` waits for the boot's
SHARE on ``run``. PostgreSQL aborts one of them. Nothing is lost or doubled (a recorder that loses
rolls back and ``_reconnecting`` runs it again; a boot that loses inserted nothing), but a worker
whose boot loses dies before its first message.
"""
from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import pytest

from evaljobs import store
from evaljobs.evaluation.result import Result
from helpers import ROOT, numbered_catalog

pytestmark = [pytest.mark.postgres]

BOOT = "from evaljobs import store; import sys; store.connect(sys.argv[1])"


def _waiting_on_a_lock(pg_url: str) -> list[str]:
    """The statements of this database's sessions that wait on a heavyweight lock."""
    import psycopg2

    conn = psycopg2.connect(pg_url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT query FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock'")
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


def test_a_worker_booting_while_a_result_is_recorded_deadlocks_neither(pg_url, monkeypatch, caplog):
    store.connect(pg_url)
    run = store.create_run(numbered_catalog(2, "lock-order"), ["sim/a"], strategy="fanout")

    # Hold record_result between its INSERT into result and its UPDATE of run.
    inserted, carry_on = threading.Event(), threading.Event()
    insert_result = store.results._insert_result  # white-box: pause inside record_result

    def paused(*args, **kwargs):
        done = insert_result(*args, **kwargs)
        if threading.current_thread().name == "recorder":
            inserted.set()
            carry_on.wait(30)
        return done

    monkeypatch.setattr(store.results, "_insert_result", paused)
    outcome: list[object] = []

    def record() -> None:
        try:
            outcome.append(store.record_result(run.id, Result("s0000", "sim/a", "passed", score=1.0)))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            outcome.append(exc)

    caplog.set_level(logging.WARNING, logger="evaljobs.store")
    recorder = threading.Thread(target=record, name="recorder")
    recorder.start()
    boot = None
    try:
        assert inserted.wait(30), "record_result never reached its INSERT"
        # What `evaljobs worker` does first: bind the database (and check its schema) in a new process.
        boot = subprocess.Popen([sys.executable, "-c", BOOT, pg_url], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 30
        while boot.poll() is None and time.monotonic() < deadline:
            if _waiting_on_a_lock(pg_url):
                break  # the boot waits for the recorder: now let the recorder take its next lock
            time.sleep(0.05)
    finally:
        carry_on.set()
        recorder.join(30)
        output = boot.communicate(timeout=30)[0] if boot is not None else ""

    assert len(outcome) == 1 and isinstance(outcome[0], store.Recorded), outcome
    assert outcome[0].inserted and outcome[0].persisted == 1
    assert "deadlock" not in caplog.text, caplog.text          # the recorder was not the victim...
    assert boot.returncode == 0 and "deadlock" not in output, output[-2000:]  # ...nor the boot
    assert store.get_run(run.id).persisted == 1
