"""Recovery: finish runs whose messages were lost, without disturbing healthy ones.

A run can stall when its messages vanish (Redis flushed or restarted without
persistence, a RabbitMQ queue purged or its node's data lost, a message
dead-lettered by a bug). Recovery compares what the database is missing with
what the broker still holds, re-enqueues only the pairs nobody will process —
with the run's stored host context — and sends ``finalize_run`` for runs that
are complete but have no report. A healthy run (every missing pair still has a
message) is left untouched, and so is a run a live process evaluates in its own
memory (its lease: :mod:`evaljobs.pipeline.ownership`).
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Iterable

from evaljobs import store
from evaljobs.config import AMQP_SCHEMES
from evaljobs.pipeline import on_demand, ownership
from evaljobs.pipeline.messages import pair_args
from evaljobs.pipeline.pairs import pair_options
from evaljobs.store import batches as stored_batches

logger = logging.getLogger("evaljobs.recovery")


def pending_work(binding) -> tuple[set[tuple[str, str, str, int]], set[tuple[str, str]], set[str]]:
    """(run, scenario, model, epoch) pairs, (run, model) per-model jobs and runs with a start message, still
    queued.

    Reads the queue's own message hashes (ready, in flight and delayed) — the
    queue, not the keyspace. On RabbitMQ, the ready messages of the queue and its delay queue only:
    what a live consumer holds is invisible (:func:`_in_flight_unseen`).
    """
    pairs: set[tuple[str, str, str, int]] = set()
    models: set[tuple[str, str]] = set()
    starts: set[str] = set()
    for body in _queued_bodies(binding):
        try:
            data = json.loads(body)
            actor, args = data.get("actor_name"), data.get("args") or []
            kwargs = data.get("kwargs") or {}
        except (ValueError, AttributeError):
            continue
        if actor == "evaluate_scenario" and len(args) >= 3:
            epoch = args[3] if len(args) > 3 else kwargs.get("epoch", 0) if isinstance(kwargs, dict) else 0
            pairs.add((args[0], args[1], args[2], epoch))
        elif actor == "evaluate_model" and len(args) >= 2:
            models.add((args[0], args[1]))
        elif actor == "start_run" and args:
            starts.add(args[0])
    return pairs, models, starts


def pending_batch_work(binding) -> tuple[set[str], set[tuple[str, str, str]]]:
    """Provider batches with a poller queued, and (run, provider, model) groups with a collector queued."""
    polls: set[str] = set()
    collects: set[tuple[str, str, str]] = set()
    for body in _queued_bodies(binding):
        try:
            data = json.loads(body)
            actor, args = data.get("actor_name"), data.get("args") or []
        except (ValueError, AttributeError):
            continue
        if actor == "poll_batch" and args:
            polls.add(args[0])
        elif actor == "collect_batch" and len(args) >= 3:
            collects.add((args[0], args[1], args[2]))
    return polls, collects


def _recover_batches(binding, run: store.RunInfo, actions: list[str]) -> set[tuple[str, str, int]]:
    """A batch run's batch work: a poller for each open batch that has none (it resolves a batch left
    ``submitting`` by a crash: found at the provider, or submitted then), a collector for each group
    with unclaimed requests — even one with a collector queued: that one may be delayed by a long
    ``batch_wait``, and a collector that finds nothing unclaimed does nothing. Returns the pairs
    parked on a request, which their pollers move on."""
    polls, _ = pending_batch_work(binding)
    actors = binding.actors
    for info in stored_batches.open_batches(run.id):
        if info.key not in polls:
            binding.broker.enqueue(_with_context(binding, actors.poll_batch.message(info.key), run))
            actions.append(f"{run.id}: batch {info.key} ({info.state}) polled again")
    for provider, model in stored_batches.unclaimed_groups(run.id):
        binding.broker.enqueue(
            _with_context(binding, actors.collect_batch.message(run.id, provider, model), run)
        )
        actions.append(f"{run.id}: parked requests of {provider}/{model} collected again")
    return set(stored_batches.parked_pairs(run.id))


def _queued_bodies(binding) -> Iterable[bytes | str]:
    broker = binding.broker
    if binding.is_memory:
        for queue in list(broker.queues.values()):
            for message in list(queue.queue):
                yield message if isinstance(message, (bytes, str)) else message.encode()
        return
    if is_rabbitmq(binding):
        yield from on_demand.rabbitmq.ready_bodies(binding.url, binding.queue)  # pika only on RabbitMQ
        return
    client = broker.client
    namespace = broker.namespace
    for name in (binding.queue, f"{binding.queue}.DQ"):
        for _, body in client.hscan_iter(f"{namespace}:{name}.msgs", count=500):
            yield body


def is_rabbitmq(binding) -> bool:
    return binding.url.startswith(AMQP_SCHEMES)


def _in_flight_unseen(binding) -> int:
    """Consumers that may hold messages recovery cannot see: on RabbitMQ a message a live worker holds
    unacknowledged is invisible to other connections (it returns to the queue if that worker dies)."""
    if not is_rabbitmq(binding):
        return 0
    return on_demand.rabbitmq.consumers(binding.url, binding.queue)  # pika only on RabbitMQ, as above


def _with_context(binding, message, run: store.RunInfo):
    """Give a re-enqueued message the context the run was started with."""
    if not run.context:
        return message
    for middleware in binding.broker.middleware:
        attach = getattr(middleware, "attach", None)
        if attach is not None:
            attach(message, run.context)
    return message


class _Actions(list):
    """The action lines, each also handed to ``on_action`` as it is taken (progress for many runs)."""

    def __init__(self, on_action):
        super().__init__()
        self.on_action = on_action

    def append(self, line: str) -> None:
        super().append(line)
        if self.on_action is not None:
            self.on_action(line)


def recover(binding, run_id: str | None = None, *, on_action=None, on_runs=None,
            held: list[str] | None = None) -> list[str]:
    """Recover one run, or every running/pending run. Returns one line per action taken.

    ``on_action(line)`` is called as each action is taken and ``on_runs(n)`` once the runs to
    check are known, so a command can show progress while it walks many runs. A run another live
    process evaluates in its memory is left alone (:class:`~evaljobs.pipeline.ownership.RunOwned`
    when ``run_id`` names it); on the in-process broker this process leases each run it takes
    over, and adds its id to ``held`` (to give the leases up when it stops).
    """
    actions: list[str] = _Actions(on_action)
    runs = ([store.get_run(run_id)] if run_id
            else store.list_runs(limit=1000, statuses=list(store.UNFINISHED_STATUSES)))
    if on_runs is not None:
        on_runs(len(runs))
    if not runs:
        return list(actions)
    pairs, models, starts = pending_work(binding)
    unseen = _in_flight_unseen(binding)
    actors = binding.actors
    for run in runs:
        if run.status in ("complete", "partial", "failed", "cancelled") and run.report is not None:
            continue
        if run.status == store.CANCELLED and not run_id:
            continue  # a sweep of every run leaves cancelled runs alone; one named is resumed
        if not _free(binding, run.id, asked=run_id is not None):
            continue  # a live process evaluates it in its memory: its pairs are not lost
        if binding.is_memory and held is not None:
            held.append(run.id)
        # stopped by SIGINT/SIGTERM (or cancelled, and named): resumed like a run whose messages were lost
        if run.status in (store.INTERRUPTED, store.CANCELLED):
            store.resume(run.id)
            actions.append(f"{run.id}: resuming the {run.status} run")
        missing = store.missing_pairs(run.id)
        if not missing:
            if run.report is None:
                actors.finalize_run.send(run.id)
                actions.append(f"{run.id}: all {run.expected} pairs persisted; sent finalize_run")
            continue
        if run.id in starts:
            continue  # start_run will enqueue the missing pairs itself
        if run.strategy == "per-model":
            lost_models = sorted({m for _, m, _ in missing} - {m for r, m in models if r == run.id})
            for model in lost_models:
                binding.broker.enqueue(
                    _with_context(binding, actors.evaluate_model.message(run.id, model), run)
                )
            if lost_models:
                actions.append(f"{run.id}: re-enqueued {len(lost_models)} per-model jobs")
            continue
        parked = _recover_batches(binding, run, actions) if (run.options or {}).get("batch") else set()
        lost = [pair for pair in missing if (run.id, *pair) not in pairs and tuple(pair) not in parked]
        if not lost:
            continue
        if unseen:
            # Fail closed: re-enqueueing pairs a live worker holds would evaluate them twice.
            actions.append(f"{run.id}: {len(lost)} missing pairs have no ready message, but {unseen} "
                           f"consumer(s) of RabbitMQ queue '{binding.queue}' may hold them: stop the workers "
                           "and recover again")
            continue
        if run.status == "pending":
            store.mark_running(run.id)
        for key, model, epoch in lost:
            message = actors.evaluate_scenario.message_with_options(
                args=pair_args(run.id, key, model, epoch), **pair_options(run.id, run=run))
            binding.broker.enqueue(_with_context(binding, message, run))
        actions.append(f"{run.id}: re-enqueued {len(lost)} of {len(missing)} missing pairs")
    return list(actions)


def _free(binding, run_id: str, *, asked: bool) -> bool:
    """Whether recovery may touch ``run_id``: no other live process holds it (an in-process run).

    On the in-process broker this process takes the run's lease (it will evaluate the pairs); a run
    held elsewhere is :class:`~evaljobs.pipeline.ownership.RunOwned` when it was ``asked`` for by id,
    else left alone as a healthy run is.
    """
    try:
        if binding.is_memory:
            ownership.hold(run_id)
        else:
            ownership.check(run_id)
    except ownership.RunOwned:
        if asked:
            raise
        return False
    return True


class PeriodicRecovery:
    """Run :func:`recover` every ``interval`` seconds from a worker, one worker at a time.

    Several workers may run this loop; a Redis lock (``SET NX EX``) makes sure
    only one of them recovers per interval, so lost pairs are re-enqueued once.
    """

    def __init__(self, binding, interval: float):
        self.binding = binding
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="evaljobs-recovery", daemon=True)

    def start(self) -> "PeriodicRecovery":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _lock(self) -> bool:
        if self.binding.is_memory:
            return True
        # the broker's Redis, or RabbitMQ's state Redis (its ``client``), whose keys have no namespace
        key = f"{getattr(self.binding.broker, 'namespace', 'dramatiq')}:evaljobs-recovery-lock"
        return bool(self.binding.broker.client.set(key, "1", nx=True, ex=max(1, int(self.interval))))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self._lock():
                    for line in recover(self.binding):
                        logger.warning("recovery: %s", line)
            except Exception as exc:  # noqa: BLE001 - keep the loop alive through outages
                logger.warning("recovery check failed: %s", exc)
