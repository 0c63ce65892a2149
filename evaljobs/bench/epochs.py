"""The epochs figure: enqueue and finalize time for a run of scenarios × models × epochs (4,000 pairs).

``--epochs N`` multiplies the pairs of a run; this measures what that costs the
pipeline itself, with no provider in the way: how long ``start_run`` takes to
enqueue every (scenario, model, epoch) message on the real broker, and how long
after the last result the report (with its statistics over epochs) is committed.

The results are recorded in this process through the real barrier
(:func:`evaljobs.store.record_result`), with statuses drawn from a seeded RNG so
that some scenarios are flaky and the statistics have work to do. The finalize
figure is the last ``record_result`` (the one that completes the run) plus
:func:`evaljobs.store.finalize` (read 4,000 rows, build the report, commit it);
it leaves out the ``finalize_run`` message hop, measured end to end in the
throughput section of BENCHMARKS.md.
"""
from __future__ import annotations

import random
import secrets
import statistics
import time
from typing import Any

from evaljobs import store
from evaljobs.bench.engine import synthetic_catalog_text
from evaljobs.bench.model import SessionFactory, broker_label
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report


def measure_epochs(broker_url: str, db_url: str, *, sessions: SessionFactory, scenarios: int = 100,
                   models: int = 4, epochs: int = 10, repeat: int = 3, seed: int = 0) -> dict[str, Any]:
    """Median seconds to enqueue and to finalize a ``scenarios × models × epochs`` run, over ``repeat`` runs
    (the finalize also in CPU milliseconds of the process).

    The same figures for the same number of pairs without epochs (``scenarios × epochs`` scenarios,
    one epoch) are measured alternately with them, so the load of the machine hits both alike.
    """
    queue = f"bench-epochs-{secrets.token_hex(4)}"
    with_epochs = loads_catalog(synthetic_catalog_text(scenarios, f"epochs{scenarios}"),
                                source=f"epochs{scenarios}.yaml")
    flat = loads_catalog(synthetic_catalog_text(scenarios * epochs, f"flat{scenarios * epochs}"),
                         source=f"flat{scenarios * epochs}.yaml")
    names = [f"sim/m{i}" for i in range(models)]
    rng = random.Random(seed)
    figures: dict[str, dict[str, list[float]]] = {
        "epochs": {"enqueue": [], "finalize": [], "finalize_cpu": []},
        "flat": {"enqueue": [], "finalize": [], "finalize_cpu": []},
    }
    flaky = 0
    session = sessions(db=db_url, broker=broker_url, width=1, queue=queue)
    try:
        binding = session.binding()
        for _ in range(repeat):
            for label, catalog, n in (("epochs", with_epochs, epochs), ("flat", flat, 1)):
                enqueue, finalize, finalize_cpu, report = _one(binding, queue, catalog, names, n, rng)
                figures[label]["enqueue"].append(enqueue)
                figures[label]["finalize"].append(finalize)
                figures[label]["finalize_cpu"].append(finalize_cpu)
                if label == "epochs":
                    flaky = len([p for p in report["epochs"]["pairs"] if p["flaky"]])
    finally:
        session.close()
    pairs = scenarios * models * epochs

    def summary(label: str) -> dict[str, Any]:
        enqueue, finalize, cpu = (
            figures[label]["enqueue"],
            figures[label]["finalize"],
            figures[label]["finalize_cpu"],
        )
        return {
            "enqueue_seconds": round(statistics.median(enqueue), 4),
            "enqueue_all": [round(t, 4) for t in enqueue],
            "enqueue_per_second": round(pairs / statistics.median(enqueue), 1),
            "finalize_ms": round(statistics.median(finalize) * 1000, 1),
            "finalize_all_ms": [round(t * 1000, 1) for t in finalize],
            "finalize_cpu_ms": round(statistics.median(cpu) * 1000, 1),
            "finalize_cpu_all_ms": [round(t * 1000, 1) for t in cpu],
        }

    return {"scenarios": scenarios, "models": models, "epochs": epochs, "pairs": pairs, **summary("epochs"),
            "flaky_pairs": flaky, "without_epochs": summary("flat"), "broker": broker_label(broker_url)}


def _one(binding, queue: str, catalog, names: list[str], epochs: int, rng: random.Random):
    """One run: (enqueue seconds, last result + finalize seconds, the same in CPU seconds of the
    process, report). The CPU figure is what a loaded machine distorts least (a wall figure there
    includes waiting for a core)."""
    run = store.create_run(catalog, names, strategy="fanout", epochs=epochs)
    started = time.perf_counter()
    binding.actors.start_run.fn(run.id)
    enqueue = time.perf_counter() - started
    binding.broker.flush(queue)
    pairs = store.missing_pairs(run.id)
    # a scenario's chance to pass is fixed per (scenario, model): most always pass, some are flaky
    chance = {(k, m): rng.choice((1.0, 1.0, 1.0, 0.0, 0.5, 0.8)) for k, m, _ in pairs}
    passes = [rng.random() < chance[(k, m)] for k, m, _ in pairs]
    results = [Result(k, m, "passed" if ok else "failed", score=1.0 if ok else 0.0, epoch=e, duration_ms=5)
               for (k, m, e), ok in zip(pairs, passes)]
    with store.holding():
        for result in results[:-1]:
            store.record_result(run.id, result)
        started, cpu = time.perf_counter(), time.process_time()
        last = store.record_result(run.id, results[-1])
        outcome = store.finalize(run.id, build_report)
        finalize, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert last.completed and outcome.created and outcome.report["summary"]["results"] == len(pairs)
    return enqueue, finalize, cpu, outcome.report


__all__ = ["measure_epochs"]
