"""The embedded broker's worker stops at once without losing work (evaljobs.pipeline.memory_worker).

Pins the Dramatiq internals it relies on (``StubBroker.declare_queue``, ``Worker.work_queue``
handed to the threads at ``start``), then checks what a stop must keep: a message in hand is
finished before ``stop`` returns, a message still queued is left in the broker's queue, and a
run on the memory broker persists every pair. How long a stop takes is in BENCHMARKS.md, not
asserted here.
"""
from __future__ import annotations

import threading

import dramatiq
from dramatiq.brokers.stub import StubBroker

from evaljobs.pipeline.memory_worker import MemoryBroker, MemoryWorker, WakeablePriorityQueue, WakeableQueue
from helpers import numbered_catalog


class _Recorder(dramatiq.Middleware):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def before_declare_queue(self, broker, queue_name):
        self.events.append(("before_declare_queue", queue_name))

    def after_declare_queue(self, broker, queue_name):
        self.events.append(("after_declare_queue", queue_name))

    def after_declare_delay_queue(self, broker, queue_name):
        self.events.append(("after_declare_delay_queue", queue_name))


def test_declare_queue_is_the_stub_brokers_with_wakeable_queues():
    seen = {}
    for cls in (StubBroker, MemoryBroker):
        recorder = _Recorder()
        broker = cls(middleware=[recorder])
        broker.declare_queue("agents")
        broker.declare_queue("agents")  # a second declaration does nothing
        seen[cls] = (recorder.events, sorted(broker.queues), sorted(broker.delay_queues))
        if cls is MemoryBroker:
            assert all(isinstance(q, WakeableQueue) for q in broker.queues.values())
    assert seen[StubBroker] == seen[MemoryBroker]


def test_every_thread_gets_the_wakeable_work_queue():
    broker = MemoryBroker()
    broker.declare_queue("agents")
    worker = MemoryWorker(broker, worker_threads=3, worker_timeout=50)
    worker.start()
    try:
        assert isinstance(worker.work_queue, WakeablePriorityQueue)
        assert len(worker.workers) == 3 and len(worker.consumers) == 2  # the queue and its delay queue
        assert all(t.work_queue is worker.work_queue for t in [*worker.workers, *worker.consumers.values()])
    finally:
        worker.stop()
    assert not any(t.is_alive() for t in [*worker.workers, *worker.consumers.values()])


def test_a_stop_finishes_the_messages_in_hand_and_leaves_the_queued_ones():
    broker = MemoryBroker()
    started = threading.Semaphore(0)
    release = threading.Event()
    finished: list[int] = []

    @dramatiq.actor(queue_name="work", broker=broker, max_retries=0)
    def hold(n: int) -> None:
        started.release()
        release.wait(60)
        finished.append(n)

    worker = MemoryWorker(broker, worker_threads=2, worker_timeout=50)
    worker.start()
    for n in range(2):
        hold.send(n)
    for _ in range(2):
        assert started.acquire(timeout=60)  # both threads hold a message
    hold.send(2)  # queued behind them (prefetched by the consumer, or still in the broker's queue)
    stopper = threading.Thread(target=worker.stop)
    stopper.start()
    release.set()
    stopper.join(120)
    assert not stopper.is_alive()
    assert sorted(finished[:2]) == [0, 1]
    # The third: finished too if a thread took it before it saw the stop, else back in the broker's
    # queue (Dramatiq's own stub consumer dropped a prefetched message; ours hands it back).
    if finished[2:] != [2]:
        assert len(finished) == 2 and broker.queues["work"].qsize() == 1
        restarted = MemoryWorker(broker, worker_threads=1, worker_timeout=50)
        restarted.start()
        broker.join("work", timeout=60_000)
        restarted.stop()
        assert sorted(finished) == [0, 1, 2]


def test_requeue_puts_a_prefetched_message_back_before_acking_it():
    broker = MemoryBroker()
    broker.declare_queue("work")
    message = dramatiq.Message(queue_name="work", actor_name="a", args=(), kwargs={}, options={})
    broker.enqueue(message)
    consumer = broker.consume("work", prefetch=2, timeout=50)
    fetched = next(consumer)
    assert fetched is not None and broker.queues["work"].unfinished_tasks == 1
    consumer.requeue([fetched])
    queue = broker.queues["work"]
    assert queue.qsize() == 1 and queue.unfinished_tasks == 1  # back, and the old delivery acked
    assert dramatiq.Message.decode(queue.get_nowait()).message_id == message.message_id


def test_a_run_on_the_memory_broker_persists_every_pair(tmp_path, simulated_provider):
    from evaljobs.api import Session

    simulated_provider(latency=0)  # EVALJOBS_SIM_URL points at it
    catalog = numbered_catalog(40, "many")
    with Session(db=f"sqlite:///{tmp_path}/m.db", broker="memory", width=4) as session:
        info = session.wait(session.submit(catalog, ["sim/fast"], strategy="fanout").id)
        assert info.status == "complete" and info.persisted == info.expected == 40
        assert info.report["summary"]["passed"] == 40
        assert len({(r.scenario_key, r.model) for r in session.results(info.id)}) == 40
    # The session's worker stopped: none of its threads is left.
    assert not [t for t in threading.enumerate() if type(t).__module__ == "dramatiq.worker"]
