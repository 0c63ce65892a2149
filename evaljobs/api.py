"""The Python API the CLI is built on: submit a run, wait for it, recover it.

    from evaljobs import Session
    with Session(db="sqlite:///evals.db", broker="memory", width=8) as session:
        run = session.submit("catalog.yaml", ["sim/fast", "sim/smart"])
        run = session.wait(run.id)
        print(run.report["verdict"])
"""
from __future__ import annotations

from evaljobs.errors import UsageError
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from evaljobs.pipeline import runtime, strategies
from evaljobs import store
from evaljobs.catalog import Catalog, CatalogError, CatalogSource, parse_source, read_catalog
from evaljobs.providers.livetools import expand_source
from evaljobs.catalog.modelspec import ModelSpecError, parse_model_spec



def capture_context(providers: Sequence) -> dict[str, Any] | None:
    """The host context to store on the run, checked exactly as the middleware will carry it.

    Runs before the run is created, so a value that cannot travel fails here,
    naming its provider, and leaves no pending run behind.
    """
    from evaljobs_middleware.context import ContextError

    values = {}
    for provider in providers:
        value = provider.capture()
        if value is None:
            continue
        try:
            values[provider.name] = json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ContextError(f"context provider {provider.name!r} returned a value that is not "
                               f"JSON-serializable ({type(value).__name__}): {exc}") from None
    size = len(json.dumps({"v": values}, sort_keys=True, separators=(",", ":")))
    if size > CONTEXT_MAX_BYTES:
        raise ContextError(f"host context is {size} bytes, over the cap of {CONTEXT_MAX_BYTES} bytes "
                           f"(providers: {', '.join(sorted(values))}); carry an identifier instead")
    return values or None


#: The ContextMiddleware's default cap, checked before a run exists so an oversized context leaves no run.
CONTEXT_MAX_BYTES = 8192


class Session:
    """Binds a database and (for queued strategies) a broker for one process."""

    def __init__(self, *, db: str | None = None, broker: str | None = None, width: int = 8,
                 providers: str | None = None, queue: str | None = None,
                 context_providers: Sequence | None = None):
        if width < 1:
            raise UsageError(f"--width must be at least 1, not {width}")
        if providers:
            os.environ["EVALJOBS_PROVIDERS"] = str(providers)
        self.providers = runtime.providers(providers)
        self.db_url = db
        store.connect(db)
        self.broker_url = broker
        self.width = width
        self.queue = queue
        self._context_providers = context_providers
        self._binding = None
        self._worker = None
        self._lock = threading.RLock()  # host threads may submit concurrently: bind and start once
        self.excluded = 0
        self.import_warnings: list[str] = []

    # -- context -------------------------------------------------------------------------------
    @property
    def context_providers(self) -> list:
        if self._context_providers is None:
            from evaljobs_middleware.context import discover_providers

            from evaljobs.pipeline.broker import CONTEXT_PROVIDER_GROUP

            self._context_providers = discover_providers(CONTEXT_PROVIDER_GROUP)
        return list(self._context_providers)

    # -- broker ---------------------------------------------------------------------------------
    def binding(self):
        with self._lock:
            if self._binding is None:
                from evaljobs.pipeline.broker import configure

                self._binding = configure(self.broker_url, queue=self.queue,
                                          context_providers=self._context_providers)
            return self._binding

    def _ensure_local_worker(self) -> None:
        binding = self.binding()
        with self._lock:
            if binding.is_memory and self._worker is None:
                from evaljobs.pipeline.broker import start_memory_worker

                self._worker = start_memory_worker(binding, self.width)

    # -- runs -------------------------------------------------------------------------------------
    def load(self, catalog: str | Path | Catalog, *, format: str | None = None,
             include_production_only: bool = False, lenient: bool = False) -> Catalog:
        """Load a native catalog, or import a foreign one (ActiveAgent, promptfoo, JSONL samples).

        What an import leaves out (``production_only`` scenarios) is remembered
        in :attr:`excluded` and stored with the run so the report can say so.
        """
        if isinstance(catalog, Catalog):
            return catalog  # already loaded (and counted) by an earlier call
        self.excluded = 0
        self.import_warnings = []
        from evaljobs.catalog.importers import load_any

        imported = load_any(str(catalog), format=format, include_production_only=include_production_only,
                            lenient=lenient)
        if imported.format == "native":
            # MCP tool imports are listed from their servers here, an explicit step: parsing does no I/O.
            return parse_source(expand_source(read_catalog(catalog)), providers=self.providers)
        self.excluded = imported.excluded
        self.import_warnings = list(imported.warnings)
        source = expand_source(CatalogSource(source=str(catalog), data=imported.data))
        return parse_source(source, providers=self.providers)

    def submit(self, catalog: str | Path | Catalog, models: Sequence[str], *, strategy: str = "fanout",
               adapter: str | None = None, judge_model: str | None = None, judge_cap: int | None = None,
               time_limit: float | None = None, cache: bool = False) -> store.RunInfo:
        """Validate everything, create the run, and start it.

        ``cache``: answer repeated provider calls from the shared response cache (``evaljobs.providers.cache``).

        In-process strategies (``sequential``, ``threads``) run to completion
        before this returns; queued ones return as soon as ``start_run`` is sent.
        Nothing is created when the catalog, a model or an option is bad.
        """
        if strategy not in strategies.STRATEGIES:
            raise UsageError(f"unknown strategy '{strategy}': use one of {', '.join(strategies.STRATEGIES)}")
        if not models:
            raise UsageError("no model given: pass at least one -m provider/model")
        specs = []
        for text in models:
            try:
                specs.append(parse_model_spec(text, self.providers).spec)
            except ModelSpecError as exc:
                raise UsageError(str(exc)) from None
        if len(set(specs)) != len(specs):
            raise UsageError(f"a model is given twice: {', '.join(specs)}")
        if judge_model:
            try:
                parse_model_spec(judge_model, self.providers)
            except ModelSpecError as exc:
                raise UsageError(f"--judge-model: {exc}") from None
        if adapter or cache:
            runtime.adapter(adapter, cache=cache)  # fail now, not on a worker
        cat = self.load(catalog)
        from evaljobs.evaluation.judge import JudgeModelMissing, require_judge_models

        try:  # no self-judging: a judged catalog needs a judge model before anything is created
            require_judge_models(cat.scenarios, judge_model, self.providers)
        except JudgeModelMissing as exc:
            raise UsageError(f"{cat.source}: {exc}") from None
        external = [a for s in cat.scenarios for a in s.expect.assertions]
        if external:
            from evaljobs.evaluation.assertions import refusal

            problem = refusal(external)  # e.g. javascript without node: one line, before anything exists
            if problem:
                raise UsageError(f"{cat.source}: {problem}")
        settings = runtime.RunSettings(adapter=adapter, judge_model=judge_model, judge_cap=judge_cap,
                                       time_limit=time_limit, cache=cache or None)
        context = capture_context(self.context_providers)
        options = settings.to_options()
        if self.excluded:
            options["excluded"] = self.excluded
        run = store.create_run(cat, specs, strategy=strategy, context=context, options=options)
        if strategy in strategies.QUEUED:
            self._ensure_local_worker()
            self.binding().actors.start_run.send(run.id)
            return store.get_run(run.id)
        return strategies.run_inline(run.id, width=self.width, context_providers=self.context_providers)

    def wait(self, run_id: str, *, timeout: float | None = None, poll: float = 5.0,
             on_event: Callable[[dict[str, Any]], None] | None = None) -> store.RunInfo:
        """Follow a run until its report exists: woken by events, with a slow poll as the fallback.

        A :class:`~evaljobs.progress.Progress` passed as ``on_event`` is also fed the
        database's numbers on each poll, so missed events never leave the bar behind.
        """
        from evaljobs.pipeline.progress import Progress, follow

        binding = self._binding
        if binding is not None and binding.is_memory:
            self._ensure_local_worker()
        if isinstance(on_event, Progress):
            return follow(run_id, progress=on_event, poll=poll, timeout=timeout)
        return follow(run_id, on_event=on_event, poll=poll, timeout=timeout)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        if self._binding is not None:
            self._binding.broker.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Session", "UsageError", "CatalogError", "capture_context"]
