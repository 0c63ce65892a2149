"""How long a model's pairs took in its last finished run: what a new run may learn about its provider.

At zero latency a Dramatiq message costs a worker more CPU than the provider call it carries, so a fan-out
run of a provider known to answer fast goes several pairs to a message (``evaljobs.pipeline.message_size``).
"Known" means measured: the pairs of the newest complete run that evaluated the model (and of the runs
before it while there are fewer than :data:`ENOUGH`), each its own ``duration_ms`` (provider calls, tools
and grading). Two indexed queries, never a scan (invariant 9): the
newest runs by ``(status, created_at)``, then one run's rows by its ``(run, …)`` unique index.
"""
from __future__ import annotations

import json

from evaljobs.store.connections import _connection

#: Newest complete runs looked through for one that evaluated the model.
RUNS_LOOKED_AT = 20
#: Pairs of that run read (enough for a median, few enough to stay a short query).
ROWS_READ = 50
#: Pairs measured before older runs are no longer read.
ENOUGH = 8


def recent_pair_durations(model: str) -> list[float]:
    """``duration_ms`` of up to :data:`ROWS_READ` pairs of ``model`` evaluated in the newest complete run
    that had it, and the runs before it until there are :data:`ENOUGH` (pairs answered from the response
    cache, reused or errored left out); [] when none did. A run of one pair measured under a passing load
    does not decide alone; a run of ``ENOUGH`` pairs or more does."""
    durations: list[float] = []
    with _connection() as db:
        p = db.param
        runs = db.execute_sql(f"SELECT id, models FROM run WHERE status = 'complete' "
                              f"ORDER BY created_at DESC LIMIT {p}", (RUNS_LOOKED_AT,)).fetchall()
        for run_id, models in runs:
            try:
                names = json.loads(models)
            except (TypeError, ValueError):
                continue
            if not isinstance(names, list) or model not in names:
                continue
            rows = db.execute_sql(f"SELECT duration_ms FROM result WHERE run_id = {p} AND model = {p} "
                                  f"AND status != 'errored' AND NOT cached AND reused_from IS NULL LIMIT {p}",
                                  (run_id, model, ROWS_READ)).fetchall()
            durations += [float(row[0]) for row in rows if row[0] is not None]
            if len(durations) >= ENOUGH:
                break
    return durations
