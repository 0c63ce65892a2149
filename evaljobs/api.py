"""The Python API the CLI is built on: every command is a thin shell over a :class:`Session`.

    from evaljobs import Session
    with Session(db="sqlite:///evals.db", broker="memory", width=8) as session:
        run = session.submit("catalog.yaml", ["sim/fast", "sim/smart"])
        run = session.wait(run.id)
        print(run.report["verdict"])
        print(session.report(run.id, "md"))
        again = session.rerun(run.id, ["errored"])      # a new run over the errored pairs
        session.recover()                               # finish runs whose messages were lost

A session binds a database and (for queued strategies) a broker for this process; on the in-process
broker it also runs the workers, so whatever it queues (a run, a rerun, a recovery) is evaluated here.

Each method is a short delegation to the module that does the work (:mod:`evaljobs.pipeline.submission`,
:mod:`evaljobs.reporting`, :mod:`evaljobs.pipeline.rerun`, …); what needs no session is a function of the
module that owns it, re-exported here. docs/api.md is generated from this module.
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from evaljobs_middleware.context import discover_providers

from evaljobs import bench, config, demo, pipeline, reporting, store, workers
from evaljobs.capacity import check_width
from evaljobs.catalog import Catalog, CatalogError
from evaljobs.catalog.subset import Selection
from evaljobs.clock import shield_from_frozen_time
from evaljobs.demo import DEMO_MODELS
from evaljobs.errors import Interrupted, UsageError
from evaljobs.evaluation.result import Result
from evaljobs.outcomes import (Cancellation, DemoRun, Recovery, RenderedReport, RunDetail, render_run,
                               rerun_selection)
from evaljobs.pipeline import ownership, run_providers, run_settings, submission
from evaljobs.pipeline.strategy_names import QUEUED  # a submit to Redis runs no pair: not the strategies
from evaljobs.pipeline.broker import (CONTEXT_PROVIDER_GROUP, Binding, bind, configure as bind_broker,
                                      context_providers, start_memory_worker)
from evaljobs.pipeline.host_middleware import installed
from evaljobs.pipeline.progress import Progress, follow
from evaljobs.pipeline.submission import capture_context, check_providers as check_providers
from evaljobs.providers import parse_duration
from evaljobs.redact import redact
from evaljobs.reports.gate import Verdict
from evaljobs.reports.render import FORMATS

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

#: What hears a run's progress events; what a follower asks, when nothing moves, why; what hears a note.
Listener = Callable[[dict[str, Any]], None]
Idle = Callable[[], str | None]
Note = Callable[[str], None]


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
            self.providers = run_providers.providers(providers)
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
        self._held = ownership.Held()  # in-process runs this session evaluates (their leases)
        if self._host_broker is not None:
            # Declared now, not at the first submit: a host worker process that only builds the
            # Session (docs/hosts.md) must consume evaljobs' queue with evaljobs' middleware.
            self.binding()

    # -- context -------------------------------------------------------------------------------
    @property
    def _context(self) -> list[Any]:
        """The host's context providers (entry points, found on first use) and the built-in trace context."""
        if self._context_providers is None:
            self._context_providers = discover_providers(CONTEXT_PROVIDER_GROUP,
                                                         installed(CONTEXT_PROVIDER_GROUP))
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
        if run.strategy not in QUEUED or self.binding().is_memory:
            self._held.take(run.id)

    def _ensure_local_worker(self) -> None:
        binding = self.binding()
        with self._lock:
            if binding.is_memory and binding.owned and self._worker is None:
                self._worker = start_memory_worker(binding, self.width)

    # -- runs -------------------------------------------------------------------------------------
    def load(self, catalog: str | Path | Catalog, *, format: str | None = None,
             include_production_only: bool = False, lenient: bool = False, grader: str | None = None,
             fields: Sequence[str] | dict[str, str] | None = None) -> Catalog:
        """Load a native catalog, or import a foreign one (ActiveAgent, promptfoo, OpenAI evals, JSONL).

        ``grader`` and ``fields`` are for JSONL samples (``evaljobs run --grader/--field``): how replies are
        compared with the reference answers, and which record fields hold input and target. What an import
        leaves out (``production_only`` scenarios) is remembered in :attr:`excluded` and stored with the run
        so the report can say so.
        """
        if isinstance(catalog, Catalog):
            return catalog  # already loaded (and counted) by an earlier call
        self.excluded, self.import_warnings = 0, []
        loaded = submission.load(catalog, self.providers, format=format, lenient=lenient, grader=grader,
                                 include_production_only=include_production_only, fields=fields)
        self.excluded, self.import_warnings = loaded.excluded, list(loaded.warnings)
        return loaded.catalog

    def submit(self, catalog: str | Path | Catalog, models: Sequence[str], *, strategy: str = "fanout",
               adapter: str | None = None, judge_model: str | None = None, judge_cap: int | None = None,
               time_limit: float | None = None, cache: bool = False, epochs: int | None = None,
               cache_across_epochs: bool = False, selection: Selection | None = None,
               reuse: str | None = None, allow_self_judge: bool = False, batch: bool = False,
               batch_judge: bool = False) -> store.RunInfo:
        """Validate everything, create the run, and start it (:mod:`evaljobs.pipeline.submission`).

        The options are :class:`~evaljobs.pipeline.runtime.SubmitOptions`, each described there. In-process
        strategies (``sequential``, ``threads``) run to completion before this returns; queued ones return
        as soon as ``start_run`` is sent. Nothing is created when the catalog, a model or an option is bad.
        """
        options = run_settings.SubmitOptions(
            adapter=adapter, judge_model=judge_model, judge_cap=judge_cap, time_limit=time_limit, cache=cache,
            epochs=epochs, cache_across_epochs=cache_across_epochs, selection=selection, reuse=reuse,
            allow_self_judge=allow_self_judge, batch=batch, batch_judge=batch_judge)
        parsed = submission.check_request(models, self.providers, strategy, options)  # before the catalog
        plan = submission.plan(self.load(catalog), parsed, self.providers, strategy=strategy, options=options,
                               excluded=self.excluded, context=lambda: self._context)
        if strategy in QUEUED:
            self._check_broker()  # a broker that does not answer: one line, and no run left pending
        run = store.create_run(plan.catalog, plan.models, strategy=strategy, context=plan.context,
                               options=plan.options, epochs=plan.epochs)
        self._submitted = run.id  # what an interrupt marks (see run)
        self.reuse_note = plan.reuse_line(run.id)
        self._hold(run)
        if strategy in QUEUED:
            self._ensure_local_worker()
            self.binding().actors.start_run.send(run.id)
            return store.get_run(run.id)
        inline = partial(pipeline.strategies.run_inline, width=self.width, context_providers=self._context)
        return self._held.evaluate(run.id, partial(inline, run.id))

    def follows(self, strategy: str, wait: bool | None = None) -> bool:
        """Whether :meth:`run` follows a run of ``strategy`` to its report (``wait`` None: the default).

        In-process strategies always finish inside the call; queued ones are followed on the
        in-process broker (this session's workers do the work) and, on Redis, only when asked.
        """
        if strategy not in QUEUED:
            return True
        return wait if wait is not None else self.binding().is_memory

    def run(self, catalog: str | Path | Catalog, models: Sequence[str], *, strategy: str = "fanout",
            wait: bool | None = None, on_event: Listener | None = None, idle: Idle | None = None,
            on_submit: Callable[[store.RunInfo], None] | None = None, timeout: float | None = None,
            poll: float = 5.0, progress: bool = False, on_note: Note | None = None, format: str | None = None,
            include_production_only: bool = False, lenient: bool = False, grader: str | None = None,
            fields: Sequence[str] | dict[str, str] | None = None,
            **options: Unpack[run_settings.SubmitOptions]) -> store.RunInfo:
        """:meth:`submit`, then follow the run to its report, inline and queued runs alike.

        ``on_event`` hears every progress event of the run: an in-process run's events as
        its pairs finish, a queued run's through :meth:`wait` (a ``Progress`` is also fed
        the database's numbers). ``on_submit(info)`` is called once the run exists, before it
        is followed. A queued run on Redis is followed only with ``wait=True`` (:meth:`follows`); otherwise
        the submitted run is returned at once, marked ``detached``. ``options`` are :meth:`submit`'s
        (:class:`~evaljobs.pipeline.run_settings.SubmitOptions`; another name is a ``TypeError``, before the
        catalog is read). Hold the result to a threshold with :meth:`RunInfo.gate`.

        ``format``, ``include_production_only``, ``lenient``, ``grader`` and ``fields`` say how a
        catalog file is read (:meth:`load`). ``on_note`` is told, one line each, what an import
        warned about or left out, which scenarios a ``selection`` chose, what ``reuse`` copied and,
        once the run exists, its size, strategy and broker (``evaljobs run`` prints them on stderr).
        ``progress`` shows the bar on stderr instead of ``on_event``; when nothing moves it says why
        (no worker takes the queue, events cannot reach this process, provider batches pending).
        """
        run_settings.check_submit_options(dict(options), "Session.run")
        catalog = self.load(catalog, format=format, include_production_only=include_production_only,
                            lenient=lenient, grader=grader, fields=fields)
        if progress or on_note is not None:
            on_event, idle, on_submit = workers.follow.guide(self, catalog, models, strategy, wait, options,
                                                             progress, on_note, on_event, idle, on_submit)
        self._submitted = None

        def submitted() -> store.RunInfo:
            info = self.submit(catalog, models, strategy=strategy, **options)
            if on_submit is not None:
                on_submit(info)
            return info

        return self._follow(submitted, strategy, wait, on_event, idle, timeout, poll)

    def _follow(self, start: Callable[[], store.RunInfo], strategy: str, wait: bool | None,
                on_event: Listener | None, idle: Idle | None, timeout: float | None,
                poll: float) -> store.RunInfo:
        """``start`` a run, then follow it to its report as :meth:`follows` says (``run``, ``rerun``)."""
        inline = strategy not in QUEUED
        if inline and on_event is not None:
            # the in-process strategies finish inside start: the listener hears their events
            pipeline.events.add_listener(on_event)
        try:
            with store.holding():  # SQLite: one connection for the run, not one (closed, checkpointed) a call
                info = start()
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

    def _interrupted(self) -> Interrupted:
        """An interrupt of the run being followed (:func:`evaljobs.pipeline.ownership.interrupt`)."""
        remote = self._binding is not None and not self._binding.is_memory
        return ownership.interrupt(self._submitted, remote=remote, stop=self._stop_worker, held=self._held)

    def _stop_worker(self) -> None:
        """Stop this session's in-process workers: a pair in hand gets its grace to land."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop(timeout=ownership.STOP_GRACE_MS)

    def wait(self, run_id: str, *, timeout: float | None = None, poll: float = 5.0,
             on_event: Listener | None = None, idle: Idle | None = None) -> store.RunInfo:
        """Follow a run until its report exists: woken by events, with a slow poll as the fallback.

        A :class:`~evaljobs.pipeline.progress.Progress` passed as ``on_event`` is also fed the
        database's numbers on each poll, so missed events never leave the bar behind;
        ``idle`` is then asked, at a poll that found nothing new, why nothing moves
        (its answer is shown once as a note on the bar).
        """
        binding = self._binding
        if binding is not None and binding.is_memory:
            self._ensure_local_worker()
        info = (follow(run_id, progress=on_event, poll=poll, timeout=timeout, idle=idle) if isinstance(
            on_event, Progress) else follow(run_id, on_event=on_event, poll=poll, timeout=timeout))
        return self._held.finished(info)  # a run of this session's with its report: its lease is given up

    # -- reruns and recovery -----------------------------------------------------------------------
    def create_rerun(self, run_id: str, which: Sequence[str], *, reuse: str | None = None,
                     batch: bool | None = None) -> store.RunInfo:
        """Create (do not start) a new run over ``run_id``'s ``errored``/``failed`` pairs, or ``all``.

        The original run is never touched; the new one has its catalog snapshot, host context, options and
        strategy (:mod:`evaljobs.pipeline.rerun`; ``batch`` True/False: a batch run or not, None: as the
        original). With ``reuse`` the selected pairs unchanged in that run are copied from it.
        """
        original = store.get_run(run_id)  # an unknown run is one line before anything else is said
        if original.strategy in QUEUED:
            self._check_broker()
        new, self.reuse_note = submission.resubmit(original, which, self.providers, reuse=reuse, batch=batch,
                                                   replace_providers=self.providers_path is not None)
        return new

    def start(self, run: store.RunInfo) -> store.RunInfo:
        """Start a created run (a rerun) with its stored context, as :meth:`submit` starts a new one.

        In-process strategies run to completion before this returns; queued ones
        return once ``start_run`` is sent (on the in-process broker, this
        session's workers evaluate it: :meth:`wait` for it).
        """
        self._hold(run)
        if run.strategy in QUEUED:
            self._ensure_local_worker()
            return pipeline.rerun.start(run, binding=self.binding())
        return self._held.evaluate(run.id, partial(pipeline.rerun.start, run, width=self.width,
                                                    context_providers=self._context))

    def rerun(self, run_id: str, which: Sequence[str], *, reuse: str | None = None,
              batch: bool | None = None, wait: bool | None = None, on_event: Listener | None = None,
              progress: bool = False, on_note: Note | None = None, timeout: float | None = None,
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
        if on_note is not None:
            if self.reuse_note:
                on_note(self.reuse_note)
            queued = new.strategy in QUEUED
            broker = redact(self.broker_url or self.binding().url) if queued else "none"
            on_note(f"run {new.id}: rerun of {run_id} ({'+'.join(which)}), {new.expected} pairs "
                    f"({new.strategy}, broker {broker})")
        listener, idle = self._follower(new, on_event, progress, poll)
        self._submitted = new.id  # what an interrupt marks
        return self._follow(partial(self.start, new), new.strategy, wait, listener, idle, timeout, poll)

    def _follower(self, info: store.RunInfo, on_event: Listener | None, progress: bool, poll: float, *,
                  local_workers: bool | None = None) -> tuple[Listener | None, Idle | None]:
        """What follows ``info``: ``on_event`` as given, or (``progress``) the bar and its idle check."""
        if not progress:
            return on_event, None
        local = self.binding().is_memory if local_workers is None else local_workers
        return workers.follow.follow_progress(info, self.broker_url, poll, local_workers=local)

    def watch(self, run_id: str, *, timeout: float | None = None, poll: float = 5.0,
              on_event: Listener | None = None, progress: bool = False) -> store.RunInfo:
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
        info, asked = pipeline.batching.cancel_run(self.resolve(run_id))
        return Cancellation(run=info, batches=asked)

    def recover(self, run_id: str | None = None, *, wait: bool | None = None,
                timeout: float | None = None, poll: float = 5.0, on_action: Note | None = None,
                on_runs: Callable[[int], None] | None = None) -> "Recovery":
        """Re-enqueue the lost pairs of ``run_id`` (``latest``, an id or a prefix; None: of every running
        run) and finalize complete ones.

        What nobody will process any more is queued again, with the run's stored context
        (:mod:`evaljobs.pipeline.recovery`). On the in-process broker nobody else would ever process it:
        this session's workers evaluate the recovered pairs and, by default (``wait``), the call returns
        once each recovered run has its report. On Redis the workers do the work and ``wait`` defaults to
        no. ``on_runs(n)`` is told how many runs will be checked and ``on_action(line)`` each action as it
        is taken (progress while many runs are walked).
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

    def compare(self, baseline_id: str, run_id: str, *, on_note: Note | None = None) -> Comparison:
        """What changed from ``baseline_id`` to ``run_id``: flipped pairs, score and cost deltas.

        Each may be ``latest``, an id or a prefix. Either side may be unfinished (its rows so far are
        compared); ``verdict(fail_on_regression)`` decides the exit of a gate. Runs of
        different catalog snapshots are still matched by scenario key and model;
        ``on_note`` is told so.
        """
        return reporting.compare(baseline_id, run_id, on_note=on_note)

    def report(self, run_id: str, format: str = "md", *, baseline: str | None = None,
               on_note: Note | None = None) -> str:
        """The run's report rendered as ``format`` (one of :data:`REPORT_FORMATS`), optionally against a
        baseline."""
        return reporting.report(run_id, format, baseline=baseline, on_note=on_note)

    def render_report(self, run_id: str, format: str = "md", *, baseline: str | None = None,
                      flaky: bool = False, on_note: Note | None = None, prefer_human: bool = False,
                      ) -> "RenderedReport":
        """The run's report as ``format`` (``evaljobs report``), with the run to hold to a gate.

        ``run_id`` and ``baseline`` may be ``latest``, an id or a prefix. ``flaky``: the list of
        flaky scenarios (epochs that disagree) instead of the report. The result's
        ``verdict(threshold, mode)`` is the exit: a report is a gate only when given a threshold.
        """
        return reporting.render_report(run_id, format, baseline=baseline, flaky=flaky, on_note=on_note,
                                       prefer_human=prefer_human)

    def demo(self, *, format: str = "table", html: str | Path | None = None, progress: bool = False,
             on_note: Note | None = None) -> "DemoRun":
        """Run the bundled support catalog against two simulated models (``evaljobs demo``).

        A fan-out run on this session's broker (the CLI's is the in-process one, so this session's
        workers evaluate it), followed to its report: ``progress`` shows the bar on stderr,
        ``on_note`` is told the run's line once it exists. The report is rendered as ``format``
        and written as HTML to ``html`` (default ``.evaljobs/RUN.html``).
        """
        return demo.run_demo(self, format=format, html=html, progress=progress, on_note=on_note)

    # -- catalogs, the cache and the fleet ----------------------------------------------------------
    def clear_cache(self, older_than: float | str | None = None) -> int:
        """Delete cached provider answers (all, or those written more than ``older_than`` ago).

        ``older_than``: seconds, or an age as ``evaljobs cache clear --older-than`` takes it
        (``90``, ``30m``, ``12h``, ``7d``); a bad one is a one-line ``UsageError``.
        """
        if isinstance(older_than, str):
            older_than = parse_duration(older_than, what="--older-than")
        return store.cache_clear(older_than)

    def status(self, *, queues: Sequence[str] = (), window: float | None = None) -> Any:
        """Active runs, queue depths, workers seen, governor budgets and pools (``evaljobs status``).

        Returns a :class:`evaljobs.workers.status.Status`; its ``verdict()`` says whether the
        broker could be read (a monitoring script must see an outage in the exit code).
        """
        return workers.status.collect(self.broker_url if self._host_broker is None else None, queues=queues,
                                      window=window)

    def pool(self, *, min: int, max: int, idle_seconds: float = 30.0, lane: str = "bulk",
             queues: Sequence[str] = (), recover_every: float = 0.0,
             stop: threading.Event | None = None) -> dict[str, Any]:
        """Serve an elastic worker pool on this session's broker (Redis) until ``stop`` or SIGTERM/SIGINT."""
        return workers.serve.run_pool(min=min, max=max, idle_seconds=idle_seconds, lane=lane,
                                      broker=self.broker_url or "", db=self.db_url, queues=queues,
                                      providers=self.providers_path, recover_every=recover_every, stop=stop)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        self._held.give_up_all()  # its pairs left with this process's memory: `recover` may take them
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


#: The formats :meth:`Session.report` renders.
REPORT_FORMATS = FORMATS


def benchmark(catalog: str, models: Sequence[str], *, strategies: str, widths: str, repeat: int,
              cell_timeout: float, broker: str = "memory", db: str | None = None,
              simulate: str | None = None, out: str | None = None, processes: int = 1,
              worker_env: Sequence[str] = (), governor: bool | None = None, providers: str | None = None,
              echo: Note = lambda line: None) -> "BenchRun":
    """:func:`evaljobs.bench.benchmark` (``evaljobs bench``), each cell a fresh run of a :class:`Session`."""
    return bench.benchmark(catalog, models, sessions=Session, strategies=strategies, widths=widths,
                           repeat=repeat, broker=broker, db=db, simulate=simulate, out=out,
                           processes=processes, cell_timeout=cell_timeout, worker_env=worker_env,
                           governor=governor, providers=providers, echo=echo)


#: Functions that need no session, each from the module that owns it, loaded on first use (PEP 562):
#: `evaljobs run` needs none of them (start-up time, tests/cli/test_import_budget.py).
_EXPORTS = {
    **dict.fromkeys(("work", "serve_pool", "serve_simulated_provider", "governor_budgets", "upgrade_schema"),
                    "evaljobs.fleet"),
    **dict.fromkeys(("check_catalog", "convert_catalog", "catalog_schema", "list_providers",
                     "check_providers_live", "CatalogCheck", "ProviderCheck", "ProviderList",
                     "ConvertedCatalog"), "evaljobs.checks"),
    **dict.fromkeys(("export_labels", "import_labels", "judge_agreement", "human_review", "JudgeAgreement"),
                    "evaljobs.labels"),
    **dict.fromkeys(("serve_viewer", "export_run"), "evaljobs.view"),
    "run_pool": "evaljobs.workers.serve",
    "start_project": "evaljobs.starter",
}
#: The names exported under another name than their module's.
_RENAMED = {"export_run": "export_bundle"}


def __getattr__(name: str) -> Any:
    """The names of :data:`_EXPORTS`, imported on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), _RENAMED.get(name, name))


__all__ = ["Session", "Selection", "Recovery", "RunDetail", "Cancellation", "RenderedReport", "DemoRun",
           "Verdict", "UsageError", "CatalogError", "capture_context", "rerun_selection", "render_run",
           "REPORT_FORMATS", "DEMO_MODELS", "run_pool", "work", "serve_pool", "serve_simulated_provider",
           "benchmark", "governor_budgets", "upgrade_schema", "start_project", "serve_viewer", "export_run",
           "check_catalog", "convert_catalog", "catalog_schema", "list_providers", "check_providers_live",
           "CatalogCheck", "ProviderCheck", "ProviderList", "ConvertedCatalog", "export_labels",
           "import_labels", "judge_agreement", "human_review", "JudgeAgreement"]
