"""``evaljobs.testing``: test a host's adapters and context providers on the host's own broker.

Installing evaljobs registers the pytest plugin :mod:`evaljobs.testing.plugin` (entry point
``pytest11``), so a host's test suite gets these fixtures with no ``conftest.py`` change:

``evaljobs_broker``     a Dramatiq ``StubBroker`` with evaljobs' middleware stack and actors declared
``evaljobs_worker``     a real Dramatiq ``Worker`` (4 threads) consuming that broker
``evaljobs_database``   a temporary SQLite database URL, bound for the test
``evaljobs_simulated``  evaljobs' simulated provider (``sim/...`` models), started for the test
``evaljobs_session``    an :class:`evaljobs.Session` on all four (it starts no worker of its own)
``evaljobs_run``        ``evaljobs_run(catalog, models=("sim/fast",), context=cm, **submit_options)``:
                        submits ``catalog`` (a path, a dict or a :class:`~evaljobs.Catalog`) inside
                        the context manager ``cm`` (the host context the run carries), waits for
                        the whole pipeline (start_run → evaluate_scenario × N → finalize_run) on
                        the broker and returns a :class:`FinishedRun`.

:class:`ManualClock` is the ``clock=`` to give ``Pool``, ``SimulatedProvider`` or ``Progress`` in a
test of time-dependent behaviour: the test moves it instead of sleeping.

The helpers below are what the fixtures use; a host that builds its own broker (say, with
its middleware) can call :func:`run_catalog` with its own :class:`~evaljobs.Session`.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager, Mapping, Sequence

from evaljobs.api import Session
from evaljobs.clock import ManualClock
from evaljobs.catalog import Catalog, parse_catalog
from evaljobs.evaluation.result import Result
from evaljobs import store

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

    from evaljobs.pipeline.runtime import SubmitOptions

#: How long :func:`run_catalog` waits for a run's report by default (seconds).
DEFAULT_TIMEOUT = 60.0


class RunDidNotFinish(AssertionError):
    """The run had no report when the wait ran out (an assertion: it fails the host's test)."""


@dataclass(frozen=True)
class FinishedRun:
    """A run whose report exists, with its results (one per scenario × model)."""

    run: store.RunInfo
    results: list[Result]

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def report(self) -> dict[str, Any]:
        return self.run.report or {}

    @property
    def context(self) -> dict[str, Any] | None:
        """The host context the run was started with (what every message carried)."""
        return self.run.context

    def result(self, scenario: str, model: str | None = None) -> Result:
        """The result of ``scenario`` (× ``model``, needed when the run has several models)."""
        found = [
            r for r in self.results if r.scenario_key == scenario and (model is None or r.model == model)
        ]
        if len(found) != 1:
            pairs = ", ".join(f"{r.scenario_key}×{r.model}" for r in self.results)
            raise KeyError(
                f"{len(found)} results match scenario {scenario!r} model {model!r} (have: {pairs})"
            )
        return found[0]


def as_catalog(catalog: str | Path | Mapping[str, Any] | Catalog, session: Session) -> Catalog | str | Path:
    """A dict becomes a validated :class:`Catalog`; paths and catalogs are left to ``Session.load``."""
    if isinstance(catalog, Mapping):
        name = str(catalog.get("name", "test-catalog"))
        return parse_catalog(dict(catalog), source=f"<{name}>", providers=session.providers)
    return catalog


def run_catalog(session: Session, catalog: str | Path | Mapping[str, Any] | Catalog,
                models: Sequence[str] = ("sim/fast",), *, context: ContextManager | None = None,
                timeout: float = DEFAULT_TIMEOUT, **submit_options: Unpack[SubmitOptions]) -> FinishedRun:
    """Submit ``catalog`` inside ``context`` on ``session``'s broker and wait for its report.

    The context manager is entered on this thread around ``submit`` only, exactly as a host
    starts a run: what reaches the workers is what the context providers captured then.
    """
    with context if context is not None else contextlib.nullcontext():
        run = session.submit(as_catalog(catalog, session), list(models), **submit_options)
    run = session.wait(run.id, timeout=timeout, poll=0.2)
    if run.report is None:
        raise RunDidNotFinish(f"run {run.id} has no report after {timeout:g} s (status {run.status}); "
                              "is a Dramatiq worker consuming the broker (fixture evaljobs_worker)?")
    return FinishedRun(run=run, results=store.list_results(run.id))


__all__ = ["DEFAULT_TIMEOUT", "FinishedRun", "ManualClock", "RunDidNotFinish", "as_catalog", "run_catalog"]
