"""The Python API the CLI is built on: every command is a thin shell over a :class:`Session`.

    from evaljobs import Session
    with Session(db="sqlite:///evals.db", broker="memory", width=8) as session:
        run = session.submit("catalog.yaml", ["sim/fast", "sim/smart"])
        run = session.wait(run.id)
        print(run.report["verdict"])
        print(session.report(run.id, "md"))
        again = session.rerun(run.id, ["errored"])      # a new run over the errored pairs
        session.recover()                               # finish runs whose messages were lost

A session binds a database and (for queued strategies) a broker for this
process; on the in-process broker it also runs the workers, so whatever it
queues (a run, a rerun, a recovery) is evaluated here.

The module stays whole: :class:`Session` is the one face the CLI and hosts call, each method a
short delegation to the package that does the work, and docs/api.md is generated from it.
"""
from __future__ import annotations

import importlib
import json
import threading
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from evaljobs_middleware.context import ContextError, discover_providers

from evaljobs import config, pipeline, reports, store, workers
from evaljobs.capacity import check_width
from evaljobs.clock import shield_from_frozen_time
from evaljobs.catalog import Catalog, CatalogError, CatalogSource, parse_source, read_catalog
from evaljobs.catalog.importers import load_any
from evaljobs.catalog.modelspec import ModelSpecError, ProvidersConfig, parse_model_spec, storable_definition
from evaljobs.catalog.subset import Selection, select, selection_note
from evaljobs.errors import Interrupted, UsageError
from evaljobs.redact import redact
from evaljobs.evaluation.assertions import refusal
from evaljobs.evaluation.result import Result
from evaljobs.evaluation.judge import JudgeModelMissing, judge_models, require_judge_models, self_judging
from evaljobs.pipeline import batching, ownership, runtime, strategies
from evaljobs.pipeline.broker import (CONTEXT_PROVIDER_GROUP, Binding, bind, configure as bind_broker,
                                      context_providers, start_memory_worker)
from evaljobs.pipeline.host_middleware import installed
from evaljobs.pipeline.progress import Progress, follow
from evaljobs.tools import catalog_refusal, expand_source
from evaljobs.tools.roots import folder_of
from evaljobs.reports.gate import Verdict
from evaljobs.reports.build import build_report
from evaljobs.reports.render import FORMATS, render
from evaljobs.providers import require_callable

if TYPE_CHECKING:  # only for the annotation: the API does not import Dramatiq until it binds a broker
    import dramatiq
    from typing_extensions import Unpack  # typing's own from Python 3.11

    from evaljobs.bench import BenchRun
    from evaljobs.reports.compare import Comparison
    # exported below (_EXPORTS), loaded on first use (start-up time)
    from evaljobs.checks import (CatalogCheck, ConvertedCatalog, ProviderCheck, ProviderList, catalog_schema,
                                 check_catalog, check_providers_live, convert_catalog, list_providers)
    from evaljobs.fleet import (governor_budgets, serve_pool, serve_simulated_provider,
                                upgrade_schema, work)
    from evaljobs.labels import JudgeAgreement, export_labels, human_review, import_labels, judge_agreement
    from evaljobs.starter import start_project
    from evaljobs.view import export_bundle as export_run, serve_viewer
    from evaljobs.workers.serve import run_pool
# Reruns, recovery, reuse, comparisons and worker pools are imported by the methods that use them:
# `evaljobs run` needs none of them (start-up time, tests/test_import_budget.py).
from evaljobs.extras import require_for_catalog
from evaljobs.outcomes import (Cancellation, DemoRun, Recovery, RenderedReport, RunDetail, render_run,
                               rerun_selection)



def check_providers(models: Sequence[str], providers: str | ProvidersConfig | None = None) -> None:
    """Raise ``ProviderProblems`` (a ``UsageError``, one line per problem) unless every model can be called.

    Checks configuration only, no network: the provider is known, its wire format
    is supported, its base URL is http(s), its API-key variable is set (or it needs
    none). ``run``, ``rerun`` and ``bench`` call this before creating anything;
    ``evaljobs providers check`` goes further and makes one real call per model.
    """
    config_ = providers if isinstance(providers, ProvidersConfig) else runtime.providers(providers)
    require_callable(config_, models)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in _strings(item)]
    return []


def _refuse_tools(data: Any, source: str) -> None:
    """One line before any server is started or any run exists: a live tool this process's operator does
    not allow (a variable, an endpoint, a program: evaljobs.tools.allowance), checked as a worker would."""
    problem = catalog_refusal(data)
    if problem:
        raise UsageError(f"{source}: {problem}")


def _check_simulated_models(cat: Catalog, names: Sequence[str]) -> None:
    """Refuse a ``sim/`` model the catalog's ``[sim@NAME: …]`` directives would silently skip (a typo)."""
    if not names:
        return
    # start-up time: only a run with sim/ models reads the directives
    from evaljobs.simulated.directives import unknown_model_problem

    texts = _strings(cat.body)
    for name in names:
        problem = unknown_model_problem(name, texts, source=cat.source)
        if problem:
            raise UsageError(problem)


def _check_simulated_judges(cat: Catalog, judges: Sequence[str], given: str | None,
                            providers: ProvidersConfig) -> None:
    """Refuse a ``sim/`` judge model the simulator does not know (``--judge-model sim/jduge``): a model
    under test may be any name, but a judge is a role the simulated provider plays under its own names."""
    parsed = [(judge, parse_model_spec(judge, providers)) for judge in judges]
    names = [(judge, spec.model) for judge, spec in parsed if spec.provider == "sim"]
    if not names:
        return
    # start-up time: only a run with a simulated judge reads the directives
    from evaljobs.simulated.directives import unknown_judge_problem

    texts = _strings(cat.body)
    for judge, model in names:
        problem = unknown_judge_problem(model, texts)
        if problem:
            raise UsageError(f"--judge-model: {problem}" if judge == given else f"{cat.source}: {problem}")


def capture_context(providers: Sequence[Any]) -> dict[str, Any] | None:
    """The host context to store on the run, checked exactly as the middleware will carry it.

    Runs before the run is created, so a value that cannot travel fails here,
    naming its provider, and leaves no pending run behind.
    """
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


#: How long (ms) a pair already in hand may take to land when a run is interrupted; past it the
#: process exits without it (the pair is missing, and ``recover`` evaluates it again).
STOP_GRACE_MS = 1000


#: The ContextMiddleware's default cap, checked before a run exists so an oversized context leaves no run.
CONTEXT_MAX_BYTES = 8192


class Session:
    """Binds a database and (for queued strategies) a broker for one process."""

    def __init__(self, *, settings: config.Settings | None = None, db: str | None = None,
                 broker: "str | dramatiq.Broker | None" = None, width: int = 8,
                 providers: str | None = None, queue: str | None = None,
                 context_providers: Sequence[Any] | None = None, create: bool = True) -> None:
        """``settings``: this process's settings from now on (every ``EVALJOBS_*`` value, explicitly);
        without them, the environment as it is now: a variable changed since the settings were read
        is honoured (:func:`evaljobs.config.honour_environment`), an unusable one refused in one line.
        ``db``, ``broker`` and ``providers`` override the settings' database, broker and providers file.
        ``create`` False (a session that only reads: ``show``, ``runs``, ``report``): a SQLite file that
        does not exist is one line (:class:`evaljobs.store.NoDatabase`), never an empty database.
        """
        check_width(width)  # bounded by what the machine can start: one line, not an abort mid-run
        shield_from_frozen_time()  # a host's freezegun must not freeze our delays and deadlines
        # The settings (and the providers file) become this process's, so the in-process workers read
        # the same ones; never written to os.environ. Replaced only when they change: new settings
        # rebuild the worker context (its governor and what it learned).
        self._previous_settings = config.configured()
        self.providers_path = str(providers) if providers else None
        wanted = settings if settings is not None else config.honour_environment()
        if self.providers_path and wanted.providers_path != self.providers_path:
            wanted = wanted.replace(providers_path=self.providers_path)
        self._configured = wanted is not config.configured()
        if self._configured:
            config.configure(wanted)
        try:
            self.providers = runtime.providers(providers)
            store.connect(db, create=create)
        except BaseException:
            self._restore_settings()  # a session that never opened leaves the process as it found it
            raise
        self.db_url = db
        # A host's own broker object: bound as it is, and its workers are the host's (none started here).
        self._host_broker: dramatiq.Broker | None = (None if broker is None or isinstance(broker, str)
                                                     else broker)
        self.broker_url: str | None = broker if isinstance(broker, str) else None
        self.width = width
        self.queue = queue
        self._context_providers = context_providers
        self._binding: Binding | None = None
        self._worker: dramatiq.Worker | None = None
        self._lock = threading.RLock()  # host threads may submit concurrently: bind and start once
        self.excluded = 0
        self.import_warnings: list[str] = []
        #: What the last ``--reuse`` did, as the one line ``run``/``rerun`` print (None: no --reuse).
        self.reuse_note: str | None = None
        self._submitted: str | None = None
        self._held: list[str] = []  # in-process runs this session evaluates (their leases)
        if self._host_broker is not None:
            # Declared now, not at the first submit: a host worker process that only builds the
            # Session (docs/hosts.md) must consume evaljobs' queue with evaljobs' middleware.
            self.binding()

    # -- context -------------------------------------------------------------------------------
    @property
    def _context(self) -> list[Any]:
        """The host's context providers (entry points, found on first use) and the built-in trace context."""
        if self._context_providers is None:
            self._context_providers = discover_providers(
                CONTEXT_PROVIDER_GROUP, installed(CONTEXT_PROVIDER_GROUP)
            )
        return context_providers(self._context_providers)  # and the built-in trace context

    # -- broker ---------------------------------------------------------------------------------
    def binding(self) -> Binding:
        with self._lock:
            if self._binding is None and self._host_broker is not None:
                self._binding = bind(self._host_broker, queue=self.queue,
                                     context_providers=self._context_providers)
            if self._binding is None:
                self._binding = bind_broker(self.broker_url, queue=self.queue,
                                          context_providers=self._context_providers)
            return self._binding

    def _check_broker(self) -> None:
        """Raise the broker's own connection error now when its Redis does not answer: a submit that
        cannot start its run creates none (it was left ``pending``, issue 40.17)."""
        binding = self.binding()
        if binding.owned and binding.url.startswith(config.SHARED_BROKER_SCHEMES):
            # a RedisBroker's client, or the state Redis beside RabbitMQ (whose own publishes are
            # confirmed: an unreachable RabbitMQ fails the first one)
            binding.broker.client.ping()  # type: ignore[attr-defined]

    def _hold(self, run: store.RunInfo) -> None:
        """Lease a run whose pairs this process evaluates in memory, so `recover` elsewhere leaves it."""
        if run.strategy not in strategies.QUEUED or self.binding().is_memory:
            ownership.hold(run.id)
            self._held.append(run.id)

    def _ensure_local_worker(self) -> None:
        binding = self.binding()
        with self._lock:
            if binding.is_memory and binding.owned and self._worker is None:
                self._worker = start_memory_worker(binding, self.width)

    # -- runs -------------------------------------------------------------------------------------
    def load(self, catalog: str | Path | Catalog, *, format: str | None = None,
             include_production_only: bool = False, lenient: bool = False, grader: str | None = None,
             fields: Sequence[str] | dict[str, str] | None = None) -> Catalog:
        """Load a native catalog, or import a foreign one (ActiveAgent, promptfoo, OpenAI evals, JSONL
        samples).

        ``grader`` and ``fields`` are for JSONL samples (``evaljobs run --grader/--field``): how replies
        are compared with the reference answers, and which record fields hold input and target.

        What an import leaves out (``production_only`` scenarios) is remembered
        in :attr:`excluded` and stored with the run so the report can say so.
        """
        if isinstance(catalog, Catalog):
            return catalog  # already loaded (and counted) by an earlier call
        self.excluded, self.import_warnings = 0, []
        imported = load_any(str(catalog), format=format, include_production_only=include_production_only,
                            lenient=lenient, grader=grader, fields=fields)
        # A catalog with MCP tools and no `mcp` extra: one line now, not a connect timeout per server later.
        require_for_catalog(imported.data, source=str(catalog))
        _refuse_tools(imported.data, str(catalog))
        if imported.format == "native":
            # MCP tool imports are listed from their servers here, an explicit step: parsing does no I/O.
            source = imported.native or read_catalog(catalog)  # read once: 100,000 scenarios in seconds
            return parse_source(expand_source(source), providers=self.providers)
        self.excluded = imported.excluded
        self.import_warnings = list(imported.warnings)
        source = expand_source(CatalogSource(source=str(catalog), data=imported.data))
        return parse_source(source, providers=self.providers)

    def submit(self, catalog: str | Path | Catalog, models: Sequence[str], *, strategy: str = "fanout",
               adapter: str | None = None, judge_model: str | None = None, judge_cap: int | None = None,
               time_limit: float | None = None, cache: bool = False, epochs: int | None = None,
               cache_across_epochs: bool = False, selection: Selection | None = None,
               reuse: str | None = None, allow_self_judge: bool = False, batch: bool = False,
               batch_judge: bool = False) -> store.RunInfo:
        """Validate everything, create the run, and start it.

        ``cache``: answer repeated provider calls from the shared response cache
        (``evaljobs.providers.cache``).
        ``epochs``: evaluate each scenario × model pair that many times, each epoch a pair of its own
        (default: the catalog's ``defaults: epochs:``, else 1). With ``cache``, each epoch has its
        own cache entries unless ``cache_across_epochs``.
        ``selection``: run only some scenarios (:mod:`evaljobs.catalog.subset`); the run records it and an
        empty selection is a one-line error before anything is created.
        ``reuse``: a run id, a prefix or ``latest``: its unchanged pairs are copied instead of evaluated
        (:mod:`evaljobs.pipeline.reuse`).
        ``allow_self_judge``: let a model under test be a judge model too (refused otherwise: a model
        grading its own answers is not a verdict); the run and its report record it.
        ``batch``, ``batch_judge``: the model's, the judge's calls via batch APIs (:mod:`.pipeline.batching`).

        In-process strategies (``sequential``, ``threads``) run to completion
        before this returns; queued ones return as soon as ``start_run`` is sent.
        Nothing is created when the catalog, a model or an option is bad.
        """
        if strategy not in strategies.STRATEGIES:
            raise UsageError(f"unknown strategy '{strategy}': use one of {', '.join(strategies.STRATEGIES)}")
        if not models:
            raise UsageError("no model given: pass at least one -m provider/model")
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
            raise UsageError(f"--epochs must be a whole number of 1 or more, not {epochs!r}")
        parsed = []
        for text in models:
            try:
                parsed.append(parse_model_spec(text, self.providers))
            except ModelSpecError as exc:
                raise UsageError(str(exc)) from None
        specs = [spec.spec for spec in parsed]
        if len(set(specs)) != len(specs):
            raise UsageError(f"a model is given twice: {', '.join(specs)}")
        if judge_model:
            try:
                parse_model_spec(judge_model, self.providers)
            except ModelSpecError as exc:
                raise UsageError(f"--judge-model: {exc}") from None
        if adapter is None:  # a host adapter makes its own calls, with its own credentials
            check_providers(specs + ([judge_model] if judge_model else []), self.providers)
        if adapter or cache:
            runtime.adapter(adapter, cache=cache)  # fail now, not on a worker
        cat, chosen = select(self.load(catalog), selection or Selection())
        _check_simulated_models(cat, [spec.model for spec in parsed if spec.provider == "sim"])
        source = pipeline.reuse.source_of(reuse, cat.name) if reuse else None  # 'latest': an earlier run
        try:  # no self-judging: a judged catalog needs a judge model before anything is created
            require_judge_models(cat.scenarios, judge_model, self.providers)
        except JudgeModelMissing as exc:
            raise UsageError(f"{cat.source}: {exc}") from None
        # The judge is called by evaljobs whatever the adapter: every judge model, whether named by
        # --judge-model, the catalog or the providers file, passes the same pre-flight checks.
        judges = judge_models(cat.scenarios, judge_model, self.providers)
        check_providers(judges, self.providers)
        # --judge-model is checked even where no criterion is judged: a typo there is a typo
        _check_simulated_judges(cat, list(dict.fromkeys([*([judge_model] if judge_model else []), *judges])),
                                judge_model, self.providers)
        self_judged = self_judging(judges, specs, self.providers, allow=allow_self_judge)
        external = [a for s in cat.scenarios for a in s.expect.assertions]
        if external:
            problem = refusal(external)  # e.g. javascript without node: one line, before anything exists
            if problem:
                raise UsageError(f"{cat.source}: {problem}")
        batched = batching.choose(self.providers, specs, batch, strategy, plain=not (adapter or cache))
        judged = batching.choose_judge(self.providers, judges, batch_judge, specs, batched)
        per_message = config.settings().pairs_per_message if strategy == "fanout" and not batched else 1
        try:  # the providers file travels with the run (variable names only): every worker uses it
            stored_providers = storable_definition(self.providers)
        except ModelSpecError as exc:
            raise UsageError(str(exc)) from None
        # The per-pair limits in force here (a flag's time limit first) travel with the run: a worker
        # started with another environment applies them, not its own.
        limits = runtime.RunSettings.limits_of(config.settings(), time_limit)
        settings = runtime.RunSettings(adapter=adapter, judge_model=judge_model, judge_cap=judge_cap,
                                       **limits, cache=cache or None,
                                       cache_across_epochs=cache_across_epochs or None,
                                       pairs_per_message=per_message if per_message > 1 else None,
                                       batch=batched or None, batch_judge=judged or None,
                                       providers=stored_providers)
        context = capture_context(self._context)
        options = settings.to_options()
        # What --reuse compares besides the scenario, model and epoch (see evaljobs.pipeline.reuse).
        options["adapter_version"] = str(getattr(runtime.adapter(adapter, cache=cache), "version", "") or "")
        root = folder_of(cat.source)
        if root is not None:  # what a catalog's relative MCP paths mean, beside the snapshot (.tools.roots)
            options["catalog_root"] = root
        if self.excluded:
            options["excluded"] = self.excluded
        if chosen:
            options["selection"] = chosen
        if self_judged:  # --allow-self-judge: every report says so
            options["self_judge"] = self_judged
        if strategy in strategies.QUEUED:
            self._check_broker()  # a broker that does not answer: one line, and no run left pending
        run = store.create_run(cat, specs, strategy=strategy, context=context, options=options,
                               epochs=epochs if epochs is not None else cat.epochs)
        self._submitted = run.id  # what an interrupt marks (see run)
        self.reuse_note = pipeline.reuse.reuse_line(run.id, source, cat.name) if reuse else None
        self._hold(run)
        if strategy in strategies.QUEUED:
            self._ensure_local_worker()
            self.binding().actors.start_run.send(run.id)
            return store.get_run(run.id)
        return strategies.run_inline(run.id, width=self.width, context_providers=self._context)

    def follows(self, strategy: str, wait: bool | None = None) -> bool:
        """Whether :meth:`run` follows a run of ``strategy`` to its report (``wait`` None: the default).

        In-process strategies always finish inside the call; queued ones are followed on the
        in-process broker (this session's workers do the work) and, on Redis, only when asked.
        """
        if strategy not in strategies.QUEUED:
            return True
        return wait if wait is not None else self.binding().is_memory

    def run(self, catalog: str | Path | Catalog, models: Sequence[str], *, strategy: str = "fanout",
            wait: bool | None = None, on_event: Callable[[dict[str, Any]], None] | None = None,
            idle: Callable[[], str | None] | None = None,
            on_submit: Callable[[store.RunInfo], None] | None = None,
            timeout: float | None = None, poll: float = 5.0, progress: bool = False,
            on_note: Callable[[str], None] | None = None, format: str | None = None,
            include_production_only: bool = False, lenient: bool = False, grader: str | None = None,
            fields: Sequence[str] | dict[str, str] | None = None,
            **options: Unpack[runtime.SubmitOptions]) -> store.RunInfo:
        """:meth:`submit`, then follow the run to its report, inline and queued runs alike.

        ``on_event`` hears every progress event of the run: an in-process run's events as
        its pairs finish, a queued run's through :meth:`wait` (a ``Progress`` is also fed
        the database's numbers). ``on_submit(info)`` is called once the run exists, before it
        is followed. A queued run on Redis is followed only with ``wait=True``
        (:meth:`follows`); otherwise the submitted run is returned at once, marked
        ``detached``. ``options`` are
        :meth:`submit`'s (:class:`~evaljobs.pipeline.runtime.SubmitOptions`; another name is a ``TypeError``,
        before the catalog is read). Hold the result to a threshold with :meth:`RunInfo.gate`.

        ``format``, ``include_production_only``, ``lenient``, ``grader`` and ``fields`` say how a
        catalog file is read (:meth:`load`). ``on_note`` is told, one line each, what an import
        warned about or left out, which scenarios a ``selection`` chose, what ``reuse`` copied and,
        once the run exists, its size, strategy and broker (``evaljobs run`` prints them on stderr).
        ``progress`` shows the bar on stderr instead of ``on_event``; when nothing moves it says why
        (no worker takes the queue, events cannot reach this process, provider batches pending).
        """
        runtime.check_submit_options(dict(options), "Session.run")
        catalog = self.load(catalog, format=format, include_production_only=include_production_only,
                            lenient=lenient, grader=grader, fields=fields)
        inline = strategy not in strategies.QUEUED
        if progress or on_note is not None:
            on_event, idle, on_submit = self._guide(catalog, models, strategy, wait, options, progress,
                                                    on_note, on_event, idle, on_submit)
        if inline and on_event is not None:
            # the in-process strategies finish inside submit: the listener hears their events
            pipeline.events.add_listener(on_event)
        self._submitted = None
        try:
            info = self.submit(catalog, models, strategy=strategy, **options)
            if on_submit is not None:
                on_submit(info)
            if inline:
                return info
            if not self.follows(strategy, wait):
                return replace(info, detached=True)
            return self.wait(info.id, on_event=on_event, idle=idle, timeout=timeout, poll=poll)
        # SIGINT (and SIGTERM, which the CLI turns into one), or the reader of our output went away
        # (`evaljobs run … 2>&1 | head -3`): the same stop, the run kept and marked interrupted
        except (KeyboardInterrupt, BrokenPipeError):
            raise self._interrupted() from None
        finally:
            if inline and on_event is not None:
                pipeline.events.remove_listener(on_event)

    def _guide(self, catalog: Catalog, models: Sequence[str], strategy: str, wait: bool | None,
               options: runtime.SubmitOptions, progress: bool, on_note: Callable[[str], None] | None,
               on_event: Callable[[dict[str, Any]], None] | None, idle: Callable[[], str | None] | None,
               on_submit: Callable[[store.RunInfo], None] | None) -> tuple[Any, Any, Any]:
        """What :meth:`run` tells a person: the import's and the selection's notes now, the bar, and
        (once the run exists) what the bar asks when nothing moves and the run's line."""
        note = on_note if on_note is not None else (lambda line: None)
        for warning in self.import_warnings:
            note(f"warning: {warning}")
        if self.excluded:
            note(f"note: {self.excluded} production_only scenarios left out "
                 f"(--include-production-only keeps them)")
        chosen_catalog, chosen = select(catalog, options.get("selection") or Selection())
        if chosen:  # an empty selection stopped in select: no run is created
            note(f"selected {selection_note(chosen)}")
        inline = strategy not in strategies.QUEUED
        epochs = options.get("epochs")
        bar = (Progress(len(chosen_catalog.scenarios) * len(models)
                        * (epochs if epochs is not None else chosen_catalog.epochs)) if progress else None)
        checks: list[Callable[[], str | None] | None] = []  # known once the run exists (a batch run's)

        def asked() -> str | None:
            check = checks[0] if checks else None
            return check() if check is not None else None

        def submitted(info: store.RunInfo) -> None:
            if bar is not None and not inline and self.follows(strategy, wait):
                # on Redis with no worker taking the messages, the bar says so (not "ETA 0.0s")
                shown, check = workers.follow.follow_progress(info, self.binding().url, 5.0,
                                                              local_workers=self.binding().is_memory)
                bar.catchup_note = shown.catchup_note
                checks.append(check)
            if self.reuse_note:
                note(self.reuse_note)
            times = f" × {info.epochs} epochs" if info.epochs > 1 else ""
            broker_text = redact(self.binding().url) if not inline else "none"
            note(f"run {info.id}: {len(chosen_catalog.scenarios)} scenarios × {len(models)} models{times} "
                 f"= {info.expected} pairs ({strategy}, broker {broker_text})")
            if on_submit is not None:
                on_submit(info)

        if bar is None:
            return on_event, idle, submitted
        return bar, (asked if not inline else None), submitted

    def _interrupted(self) -> Interrupted:
        """Stop taking new pairs, keep what finished, and say how to go on (one line).

        The run's pairs are done by this process when its strategy is in-process or its broker is
        the in-process one: they stop (a pair in hand gets :data:`STOP_GRACE_MS` to land), and the
        run is marked ``interrupted`` for ``recover`` to resume. On Redis the workers elsewhere go
        on: only the following stops, and the line says how to follow again.
        """
        run_id = self._submitted
        if run_id is None:
            return Interrupted("interrupted before a run was created: nothing to resume")
        binding, info = self._binding, store.get_run(run_id)
        if binding is not None and not binding.is_memory and info.strategy in strategies.QUEUED:
            return Interrupted(f"stopped following run {run_id} ({info.persisted}/{info.expected} "
                               "pairs so far); "
                               f"its workers go on: `evaljobs watch {run_id}`")
        if self._worker is not None:
            worker, self._worker = self._worker, None
            worker.stop(timeout=STOP_GRACE_MS)
        store.interrupt(run_id)
        info = store.get_run(run_id)
        if info.status != store.INTERRUPTED:  # its last pair landed while it stopped: it is finished
            return Interrupted(f"interrupted: run {run_id} finished anyway ({info.status}): "
                               f"`evaljobs show {run_id}`")
        return Interrupted(store.resume_line(info))

    def wait(self, run_id: str, *, timeout: float | None = None, poll: float = 5.0,
             on_event: Callable[[dict[str, Any]], None] | None = None,
             idle: Callable[[], str | None] | None = None) -> store.RunInfo:
        """Follow a run until its report exists: woken by events, with a slow poll as the fallback.

        A :class:`~evaljobs.pipeline.progress.Progress` passed as ``on_event`` is also fed the
        database's numbers on each poll, so missed events never leave the bar behind;
        ``idle`` is then asked, at a poll that found nothing new, why nothing moves
        (its answer is shown once as a note on the bar).
        """
        binding = self._binding
        if binding is not None and binding.is_memory:
            self._ensure_local_worker()
        if isinstance(on_event, Progress):
            return follow(run_id, progress=on_event, poll=poll, timeout=timeout, idle=idle)
        return follow(run_id, on_event=on_event, poll=poll, timeout=timeout)

    # -- reruns and recovery -----------------------------------------------------------------------
    def create_rerun(self, run_id: str, which: Sequence[str], *, reuse: str | None = None,
                     batch: bool | None = None) -> store.RunInfo:
        """Create (do not start) a new run over ``run_id``'s ``errored``/``failed`` pairs, or ``all``.

        The original run is never touched; the new one has its catalog snapshot, host context, options and
        strategy (:mod:`evaljobs.pipeline.rerun`; ``batch`` True/False: a batch run or not, None: as the
        original). With ``reuse`` the selected pairs unchanged in that run are copied from it.
        """
        original = store.get_run(run_id)  # an unknown run is one line before anything else is said
        if original.strategy in strategies.QUEUED:
            self._check_broker()
        if not (original.options or {}).get("adapter"):  # a host adapter makes its own calls
            chosen = {model for _, model, _ in pipeline.rerun.select_pairs(run_id, sorted(set(which)))}
            check_providers([m for m in original.models if m in chosen], self.providers)
        source = pipeline.reuse.source_of(reuse, original.catalog_name) if reuse else None
        try:  # a providers file given to this session replaces the one stored with the original run
            given = storable_definition(self.providers) if self.providers_path else None
        except ModelSpecError as exc:
            raise UsageError(str(exc)) from None
        new = pipeline.rerun.create_rerun(run_id, which, batch=batch, providers=given)
        self.reuse_note = pipeline.reuse.reuse_line(new.id, source, original.catalog_name) if reuse else None
        return new

    def start(self, run: store.RunInfo) -> store.RunInfo:
        """Start a created run (a rerun) with its stored context, as :meth:`submit` starts a new one.

        In-process strategies run to completion before this returns; queued ones
        return once ``start_run`` is sent (on the in-process broker, this
        session's workers evaluate it: :meth:`wait` for it).
        """
        self._hold(run)
        if run.strategy in strategies.QUEUED:
            self._ensure_local_worker()
            return pipeline.rerun.start(run, binding=self.binding())
        return pipeline.rerun.start(run, width=self.width, context_providers=self._context)

    def rerun(self, run_id: str, which: Sequence[str], *, reuse: str | None = None,
              batch: bool | None = None, wait: bool | None = None,
              on_event: Callable[[dict[str, Any]], None] | None = None, progress: bool = False,
              on_note: Callable[[str], None] | None = None, timeout: float | None = None,
              poll: float = 5.0) -> store.RunInfo:
        """A new run over ``run_id``'s ``errored``/``failed`` pairs (or ``all``), started and followed.

        ``run_id`` may be ``latest`` or a prefix. ``which`` names at least one kind; ``all`` comes
        alone (it already holds every pair). :meth:`create_rerun` then :meth:`start`, then the new
        run is followed to its report as :meth:`run` follows one: always for in-process strategies,
        for queued ones as :meth:`follows` says (``wait``); otherwise it is returned as started, marked
        ``detached``.
        ``on_note`` is told, one line each, what ``--reuse`` copied and what was created;
        ``progress`` shows the bar on stderr (with its notes when nothing moves) instead of
        ``on_event``. Hold the result to a threshold with :meth:`RunInfo.gate`: a rerun in which
        every pair errored fails it, as a run does.
        """
        which = rerun_selection(which)
        run_id = self.resolve(run_id)
        new = self.create_rerun(run_id, which, reuse=reuse, batch=batch)
        queued = new.strategy in strategies.QUEUED
        if on_note is not None:
            if self.reuse_note:
                on_note(self.reuse_note)
            broker = redact(self.broker_url or self.binding().url) if queued else "none"
            on_note(f"run {new.id}: rerun of {run_id} ({'+'.join(which)}), {new.expected} pairs "
                    f"({new.strategy}, broker {broker})")
        listener, idle = self._follower(new, on_event, progress, poll)
        self._submitted = new.id  # what an interrupt marks
        try:
            if not queued:  # an in-process rerun finishes inside start: the listener hears its events
                if listener is not None:
                    pipeline.events.add_listener(listener)
                try:
                    return self.start(new)
                finally:
                    if listener is not None:
                        pipeline.events.remove_listener(listener)
            self.start(new)
            if not self.follows(new.strategy, wait):
                return replace(store.get_run(new.id), detached=True)
            return self.wait(new.id, on_event=listener, idle=idle, timeout=timeout, poll=poll)
        except (KeyboardInterrupt, BrokenPipeError):  # as in run: Ctrl-C, or the output was closed
            raise self._interrupted() from None

    def _follower(self, info: store.RunInfo, on_event: Callable[[dict[str, Any]], None] | None,
                  progress: bool, poll: float, *, local_workers: bool | None = None,
                  ) -> tuple[Callable[[dict[str, Any]], None] | None, Callable[[], str | None] | None]:
        """What follows ``info``: ``on_event`` as given, or (``progress``) the bar and its idle check."""
        if not progress:
            return on_event, None
        local = self.binding().is_memory if local_workers is None else local_workers
        return workers.follow.follow_progress(info, self.broker_url, poll, local_workers=local)

    def watch(self, run_id: str, *, timeout: float | None = None, poll: float = 5.0,
              on_event: Callable[[dict[str, Any]], None] | None = None,
              progress: bool = False) -> store.RunInfo:
        """Follow a run that workers elsewhere evaluate until its report exists (``evaljobs watch``).

        ``run_id`` may be ``latest`` or a prefix. A run that already has its report, or was
        cancelled, is returned as it is. Events come through this session's Redis broker when it
        has one (live), else only from this process; the database is read every ``poll`` seconds
        as well. ``progress`` shows the bar on stderr instead of ``on_event``: it says when no
        worker takes the run's messages, and when events cannot reach this process. Nothing is
        evaluated here: no worker is started, whatever the broker.
        """
        info = store.get_run(self.resolve(run_id))
        if info.report is not None or info.status == store.CANCELLED:
            return info
        state = config.state_redis(self.broker_url)
        if state:
            pipeline.events.bind_redis(state)  # live events: the broker's Redis or the state Redis
        listener, idle = self._follower(info, on_event, progress, poll, local_workers=False)
        return self.wait(info.id, timeout=timeout, poll=poll, on_event=listener, idle=idle)

    def cancel(self, run_id: str) -> "Cancellation":
        """Cancel a pending or running run (``latest``, an id or a prefix) and its open provider batches.

        Its pending pairs are not evaluated; what already finished is kept. The batches are asked
        to cancel at their providers (:func:`evaljobs.pipeline.batching.cancel_run`).
        """
        info, asked = batching.cancel_run(self.resolve(run_id))
        return Cancellation(run=info, batches=asked)

    def recover(self, run_id: str | None = None, *, wait: bool | None = None,
                timeout: float | None = None, poll: float = 5.0,
                on_action: Callable[[str], None] | None = None,
                on_runs: Callable[[int], None] | None = None) -> "Recovery":
        """Re-enqueue the lost pairs of ``run_id`` (``latest``, an id or a prefix; None: of every running
        run) and finalize complete ones.

        What nobody will process any more is queued again, with the run's stored
        context (:mod:`evaljobs.pipeline.recovery`). On the in-process broker
        nobody else would ever process it: this session's workers evaluate the
        recovered pairs and, by default (``wait``), the call returns once each
        recovered run has its report. On Redis the workers do the work and
        ``wait`` defaults to no. ``on_runs(n)`` is told how many runs will be checked and
        ``on_action(line)`` each action as it is taken (progress while many runs are walked).
        """
        run_id = self.resolve(run_id) if run_id else None
        binding = self.binding()
        if binding.is_memory:
            self._ensure_local_worker()
        actions = pipeline.recovery.recover(binding, run_id, on_action=on_action, on_runs=on_runs,
                                            held=self._held)
        touched = list(dict.fromkeys(line.split(":", 1)[0] for line in actions))  # lines are "RUN: what"
        runs = [store.get_run(rid) for rid in touched]
        if wait if wait is not None else binding.is_memory:
            runs = [self.wait(rid, timeout=timeout, poll=poll) for rid in touched]
        return Recovery(actions, runs)

    # -- reading runs and their reports -----------------------------------------------------------
    def get(self, run_id: str) -> store.RunInfo:
        return store.get_run(run_id)

    def resolve(self, run_id: str) -> str:
        """The run id ``run_id`` names: ``latest``, an id, or a unique prefix of one (see store.lookup)."""
        return store.resolve_run_id(run_id)

    def runs(self, limit: int = 20) -> list[store.RunInfo]:
        """The ``limit`` most recent runs, newest first (``evaljobs runs``)."""
        return store.list_runs(limit=limit)

    def show(self, run_id: str) -> "RunDetail":
        """One run (``latest``, an id or a prefix), each of its results and its missing pairs
        (``evaljobs show``)."""
        run_id = self.resolve(run_id)
        return RunDetail(run=store.get_run(run_id), results=store.list_results(run_id),
                         missing=store.missing_pairs(run_id))

    def results(self, run_id: str) -> list[Result]:
        return store.list_results(run_id)

    def compare(self, baseline_id: str, run_id: str, *,
                on_note: Callable[[str], None] | None = None) -> Comparison:
        """What changed from ``baseline_id`` to ``run_id``: flipped pairs, score and cost deltas.

        Each may be ``latest``, an id or a prefix. Either side may be unfinished (its rows so far are
        compared); ``verdict(fail_on_regression)`` decides the exit of a gate. Runs of
        different catalog snapshots are still matched by scenario key and model;
        ``on_note`` is told so.
        """
        base, base_side = self._side(self.resolve(baseline_id))
        info, side = self._side(self.resolve(run_id))
        return self._compare(base, base_side, info, side, on_note)

    def report(self, run_id: str, format: str = "md", *, baseline: str | None = None,
               on_note: Callable[[str], None] | None = None) -> str:
        """The run's report rendered as ``format`` (one of :data:`REPORT_FORMATS`), optionally against a
        baseline."""
        if format not in FORMATS:
            raise UsageError(f"unknown report format {format!r}: use one of {', '.join(FORMATS)}")
        if baseline and format == "junit":
            raise UsageError("--baseline does not apply to --format junit: use md, html, table or json")
        info = store.get_run(run_id)
        # a run that did not finish (cancelled, interrupted, timed out, still running) gets a partial
        # report: what finished, what is missing, and the command that resumes it (never stored)
        report = info.report if info.report is not None else store.partial_report(run_id, build_report)
        comparison = None
        if baseline:
            base, base_side = self._side(baseline)
            comparison = self._compare(base, base_side, info, report, on_note)
        results = store.list_results(run_id) if format in ("junit", "html") else ()
        from evaljobs import labels  # start-up time: the reviewers' labels, for a report only

        human = labels.human_review(run_id) if format in ("md", "table", "json") else None
        agreement = labels.agreement_of([run_id]) if human else None
        if human and format == "json":
            report = {**report, "human": human, "judge_agreement": agreement.to_dict()["agreements"]
                      if agreement else []}
        text = render(report, format, results=results, comparison=comparison)
        if human and format in ("md", "table"):
            text += reports.human.human_markdown(human)
            if agreement and agreement.agreements:
                text += "\n## Judge agreement with the reviewers\n\n" + agreement.render()
                text += "".join(f"\n{line}\n" for line in agreement.warnings)
        return text

    def render_report(self, run_id: str, format: str = "md", *, baseline: str | None = None,
                      flaky: bool = False, on_note: Callable[[str], None] | None = None,
                      prefer_human: bool = False) -> "RenderedReport":
        """The run's report as ``format`` (``evaljobs report``), with the run to hold to a gate.

        ``run_id`` and ``baseline`` may be ``latest``, an id or a prefix. ``flaky``: the list of
        flaky scenarios (epochs that disagree) instead of the report. The result's
        ``verdict(threshold, mode)`` is the exit: a report is a gate only when given a threshold.
        """
        if baseline and format == "junit":  # before anything is read
            raise UsageError("--baseline does not apply to --format junit: use md, html, table or json")
        run_id = self.resolve(run_id)
        baseline = self.resolve(baseline) if baseline else None
        info = store.get_run(run_id)
        if flaky:
            if info.report is None:
                raise UsageError(f"run {run_id} has no report yet ({info.status}): wait for it")
            return RenderedReport(text=reports.variance.flaky_text(info.report), run=info)
        from evaljobs import labels  # start-up time: the reviewers' labels, for a report only

        return RenderedReport(text=self.report(run_id, format, baseline=baseline, on_note=on_note), run=info,
                              human=labels.human_review(run_id) if prefer_human else None)

    def demo(self, *, format: str = "table", html: str | Path | None = None, progress: bool = False,
             on_note: Callable[[str], None] | None = None) -> "DemoRun":
        """Run the bundled support catalog against two simulated models (``evaljobs demo``).

        A fan-out run on this session's broker (the CLI's is the in-process one, so this session's
        workers evaluate it), followed to its report: ``progress`` shows the bar on stderr,
        ``on_note`` is told the run's line once it exists. The report is rendered as ``format``
        and written as HTML to ``html`` (default ``.evaljobs/RUN.html``).
        """
        from evaljobs.resources import demo_catalog  # start-up time: only the demo reads its catalog

        models = list(DEMO_MODELS)
        cat = self.load(demo_catalog())  # package data: works from a wheel with no source tree around
        bar = Progress(len(cat.scenarios) * len(models)) if progress else None

        def submitted(info: store.RunInfo) -> None:
            if on_note is not None:
                on_note(f"run {info.id}: {len(cat.scenarios)} scenarios × {len(models)} simulated models, "
                        f"fan-out over {self.width} in-process workers")

        info = self.run(cat, models, strategy="fanout", on_event=bar, on_submit=submitted)
        text = self.report(info.id, format)
        html_file = Path(html) if html else Path(".evaljobs") / f"{info.id}.html"
        html_file.parent.mkdir(parents=True, exist_ok=True)
        html_file.write_text(self.report(info.id, "html"), encoding="utf-8")
        return DemoRun(run=info, text=text, html_path=html_file.resolve())

    @staticmethod
    def _side(run_id: str) -> tuple[store.RunInfo, Any]:
        """What a comparison reads for a run: its report when it has one, else its rows so far."""
        info = store.get_run(run_id)
        return info, (info.report if info.report is not None else store.list_results(run_id))

    @staticmethod
    def _compare(base: store.RunInfo, base_side: Any, info: store.RunInfo, side: Any,
                 on_note: Callable[[str], None] | None) -> Comparison:
        if base.digest != info.digest and on_note is not None:
            on_note(f"{base.id} ran catalog {base.digest[:19]}, {info.id} ran {info.digest[:19]}; "
                    "pairs are matched by scenario key and model")
        # unfinished
        thresholds = {s.key: s.pass_threshold for s in store.load_snapshot(info.digest).scenarios}
        # rows stored before they carried their scenario's digest: their run's snapshot tells it
        return reports.compare.compare(base_side, side, run_a=base.id, run_b=info.id, thresholds=thresholds,
                             digests_a=partial(store.verdict_digest_in, base.digest,
                                               judges=store.run_judges(base.options)),
                             digests_b=partial(store.verdict_digest_in, info.digest,
                                               judges=store.run_judges(info.options)),
                             order=info.scenario_order or base.scenario_order)

    # -- catalogs, the cache and the fleet ----------------------------------------------------------
    def clear_cache(self, older_than: float | str | None = None) -> int:
        """Delete cached provider answers (all, or those written more than ``older_than`` ago).

        ``older_than``: seconds, or an age as ``evaljobs cache clear --older-than`` takes it
        (``90``, ``30m``, ``12h``, ``7d``); a bad one is a one-line ``UsageError``.
        """
        if isinstance(older_than, str):
            # start-up time: only `cache clear --older-than` parses an age
            from evaljobs.providers import parse_duration

            older_than = parse_duration(older_than, what="--older-than")
        return store.cache_clear(older_than)

    def status(self, *, queues: Sequence[str] = (), window: float | None = None) -> Any:
        """Active runs, queue depths, workers seen, governor budgets and pools (``evaljobs status``).

        Returns a :class:`evaljobs.workers.status.Status`; its ``verdict()`` says whether the
        broker could be read (a monitoring script must see an outage in the exit code).
        """
        return workers.status.collect(self.broker_url if self._host_broker is None else None, queues=queues,
                                      window=window)

    # -- operations: workers, servers, the schema, providers and catalogs (the CLI's other commands) --
    # Static methods: each opens what it needs (a worker or a viewer is not a session of its own).

    # -- pools --------------------------------------------------------------------------------------
    def pool(self, *, min: int, max: int, idle_seconds: float = 30.0, lane: str = "bulk",
             queues: Sequence[str] = (), recover_every: float = 0.0,
             stop: threading.Event | None = None) -> dict[str, Any]:
        """Serve an elastic worker pool on this session's broker (Redis) until ``stop`` or SIGTERM/SIGINT."""
        return workers.serve.run_pool(
            min=min,
            max=max,
            idle_seconds=idle_seconds,
            lane=lane,
            broker=self.broker_url or "",
            db=self.db_url,
            queues=queues,
            providers=self.providers_path,
            recover_every=recover_every,
            stop=stop,
        )

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        held, self._held = self._held, []
        ownership.release(held)  # its pairs left with this process's memory: `recover` may take them
        if self._binding is not None and self._binding.owned:
            self._binding.broker.close()  # a host's broker stays open: it is the host's

    def _restore_settings(self) -> None:
        if self._configured:
            config.restore(self._previous_settings)
            self._configured = False

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: The simulated models ``evaljobs demo`` runs the bundled catalog against.
DEMO_MODELS = ("sim/fast", "sim/smart")

#: The formats :meth:`Session.report` renders.
REPORT_FORMATS = FORMATS

def benchmark(catalog: str, models: Sequence[str], *, strategies: str, widths: str, repeat: int,
              cell_timeout: float, broker: str = "memory", db: str | None = None,
              simulate: str | None = None, out: str | None = None, processes: int = 1,
              worker_env: Sequence[str] = (), governor: bool | None = None, providers: str | None = None,
              echo: Callable[[str], None] = lambda line: None) -> "BenchRun":
    """Run ``catalog`` once per (strategy, width) cell and say which shape and width to use
    (``evaljobs bench``): options as the command takes them (``strategies="fanout,threads"``,
    ``widths="1,8"``, ``simulate="latency=4.6"``, ``worker_env=["NAME=VALUE"]``), each bad one a
    one-line ``UsageError`` before anything runs. Each cell is a fresh run of a :class:`Session`;
    ``echo`` is told each cell's progress. Returns the result, its table and the files written
    (bench.json, .csv, .md and, with matplotlib, .png) — see :func:`evaljobs.bench.benchmark`.
    """
    # start-up time: the benchmark's engine, meters and renderers, for `bench` only
    from evaljobs import bench

    return bench.benchmark(catalog, models, sessions=Session, strategies=strategies, widths=widths,
                           repeat=repeat, broker=broker, db=db, simulate=simulate, out=out,
                           processes=processes, cell_timeout=cell_timeout, worker_env=worker_env,
                           governor=governor, providers=providers, echo=echo)


#: Functions that need no session, each from the module that owns it, loaded on first use (PEP 562):
#: `evaljobs run` needs none of them (start-up time, tests/test_import_budget.py).
_EXPORTS = {
    "run_pool": ("evaljobs.workers.serve", "run_pool"),
    "work": ("evaljobs.fleet", "work"),
    "serve_pool": ("evaljobs.fleet", "serve_pool"),
    "serve_simulated_provider": ("evaljobs.fleet", "serve_simulated_provider"),
    "governor_budgets": ("evaljobs.fleet", "governor_budgets"),
    "upgrade_schema": ("evaljobs.fleet", "upgrade_schema"),
    "start_project": ("evaljobs.starter", "start_project"),
    "serve_viewer": ("evaljobs.view", "serve_viewer"),
    "export_run": ("evaljobs.view", "export_bundle"),
    "check_catalog": ("evaljobs.checks", "check_catalog"),
    "convert_catalog": ("evaljobs.checks", "convert_catalog"),
    "catalog_schema": ("evaljobs.checks", "catalog_schema"),
    "list_providers": ("evaljobs.checks", "list_providers"),
    "check_providers_live": ("evaljobs.checks", "check_providers_live"),
    "CatalogCheck": ("evaljobs.checks", "CatalogCheck"),
    "ProviderCheck": ("evaljobs.checks", "ProviderCheck"),
    "ProviderList": ("evaljobs.checks", "ProviderList"),
    "ConvertedCatalog": ("evaljobs.checks", "ConvertedCatalog"),
    "export_labels": ("evaljobs.labels", "export_labels"),
    "import_labels": ("evaljobs.labels", "import_labels"),
    "judge_agreement": ("evaljobs.labels", "judge_agreement"),
    "human_review": ("evaljobs.labels", "human_review"),
    "JudgeAgreement": ("evaljobs.labels", "JudgeAgreement"),
}


def __getattr__(name: str) -> Any:
    """The names of :data:`_EXPORTS`, imported on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    return getattr(importlib.import_module(module), attr)


__all__ = ["Session", "Selection", "Recovery", "RunDetail", "Cancellation", "RenderedReport", "DemoRun",
           "Verdict", "UsageError", "CatalogError", "capture_context", "rerun_selection", "render_run",
           "REPORT_FORMATS", "DEMO_MODELS", "run_pool", "work", "serve_pool", "serve_simulated_provider",
           "benchmark", "governor_budgets", "upgrade_schema", "start_project", "serve_viewer", "export_run",
           "check_catalog", "convert_catalog", "catalog_schema", "list_providers", "check_providers_live",
           "CatalogCheck", "ProviderCheck", "ProviderList", "ConvertedCatalog", "export_labels",
           "import_labels", "judge_agreement", "human_review", "JudgeAgreement"]
