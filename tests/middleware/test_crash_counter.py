"""evaljobs_middleware.crashes on its own: a plain Dramatiq app on a real Redis broker, no evaljobs.

A crash is a start that never ended; these tests leave such starts in Redis (what a worker killed
mid-message leaves behind) and then deliver the message to a real worker. The fleet test in
test_faults.py kills real worker processes.
"""
from __future__ import annotations

import json
import threading

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import SkipMessage

from evaljobs_middleware import crashes
from evaljobs_middleware.crashes import CrashCounter

pytestmark = pytest.mark.redis


class App:
    """One actor ``work(group, item)`` counted by ``(crashes:<group>, item)``; records what happened."""

    def __init__(
        self, redis_url: str, *, max_crashes: int = 3, give_up_raises: type[Exception] | None = None
    ):
        self.ran: list[str] = []
        self.gave_up: list[tuple[str, int]] = []
        self.done = threading.Event()
        self.alone_seen: list[bool] = []
        counter = CrashCounter(self.key, self.give_up, max_crashes=max_crashes)
        self.counter = counter
        self.broker = RedisBroker(url=redis_url)
        self.broker.add_middleware(counter)
        self.raises = give_up_raises

        def work(group: str, item: str) -> None:
            self.alone_seen.append(counter.solo._alone)
            self.ran.append(item)
            self.done.set()

        self.work = dramatiq.Actor(work, broker=self.broker, actor_name="work", queue_name="crash-test",
                                   priority=0, options={"max_retries": 0})
        self.client = self.broker.client

    @staticmethod
    def key(message: dramatiq.Message) -> tuple[str, str] | None:
        if message.actor_name != "work":
            return None
        group, item = message.args
        return f"crashes:{group}", json.dumps(item)

    def give_up(self, broker, message, count: int) -> None:
        self.gave_up.append((message.args[1], count))
        self.done.set()
        if self.raises is not None:
            raise self.raises("not ours")

    def crashed_before(self, group: str, item: str, times: int) -> None:
        for _ in range(times):
            crashes.begin_attempt(self.client, f"crashes:{group}", json.dumps(item))

    def deliver(self, group: str, item: str) -> None:
        self.done.clear()
        self.work.send(group, item)
        worker = dramatiq.Worker(self.broker, worker_threads=1, worker_timeout=50)
        worker.start()
        try:
            assert self.done.wait(10), "the message was neither processed nor given up on"
            self.broker.join("crash-test", timeout=10_000)
        finally:
            worker.stop()

    def count(self, group: str, item: str) -> int:
        return crashes.crashes(self.client, f"crashes:{group}", json.dumps(item))

    def close(self) -> None:
        self.broker.close()


@pytest.fixture
def app(redis_url):
    made: list[App] = []

    def make(**kwargs) -> App:
        made.append(App(redis_url, **kwargs))
        return made[-1]

    yield make
    for one in made:
        one.close()


def test_a_message_that_returns_ends_its_count(app):
    a = app()
    a.deliver("g", "fine")
    assert a.ran == ["fine"] and a.gave_up == [] and a.alone_seen == [False]
    assert a.count("g", "fine") == 0


def test_a_settled_message_keeps_its_start_counted_until_forgotten(app):
    a = app()

    def work(group: str, item: str) -> None:
        a.ran.append(item)
        crashes.settled()  # its outcome is durable: no round trip spent ending the count
        a.done.set()

    a.work.fn = work
    a.deliver("g", "kept")
    assert a.ran == ["kept"] and a.count("g", "kept") == 1
    crashes.forget(a.client, "crashes:g")
    assert a.count("g", "kept") == 0


def test_the_last_chance_runs_alone_and_a_message_past_the_limit_is_given_up(app):
    a = app(max_crashes=3)
    a.crashed_before("g", "suspect", 2)  # one crash short of the limit: its last chance
    a.deliver("g", "suspect")
    assert a.ran == ["suspect"] and a.alone_seen == [True] and a.gave_up == []
    assert a.count("g", "suspect") == 2  # this delivery ended: still two crashes

    a.crashed_before("g", "poison", 3)
    a.deliver("g", "poison")
    assert "poison" not in a.ran  # not processed again
    assert a.gave_up == [("poison", 3)]
    assert a.count("g", "poison") == 3  # the skipped delivery's own start was ended


def test_a_give_up_that_raises_fails_the_message_instead_of_skipping_it(app):
    a = app(max_crashes=1, give_up_raises=ValueError)
    a.crashed_before("g", "stranger", 1)
    a.deliver("g", "stranger")
    assert a.ran == [] and a.gave_up == [("stranger", 1)]
    dead = a.client.zcard(f"{a.broker.namespace}:crash-test.XQ")
    assert dead == 1  # no retries allowed: dead-lettered
    assert a.counter.solo._alone is False  # the lone lock was handed back


def test_brokers_without_redis_and_messages_it_does_not_name_are_not_counted(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    counter = CrashCounter(lambda message: ("crashes:g", message.actor_name) if message.actor_name == "work"
                           else None, lambda *args: None, max_crashes=1)
    work = dramatiq.Message(queue_name="q", actor_name="work", args=(), kwargs={}, options={})
    other = dramatiq.Message(queue_name="q", actor_name="other", args=(), kwargs={}, options={})

    class InProcess:  # no ``client``, like the StubBroker
        pass

    class WithRedis:
        pass

    WithRedis.client = client
    try:
        crashes.begin_attempt(client, "crashes:g", "work")  # past the limit of 1
        counter.before_process_message(InProcess(), work)  # nothing to count with: processed
        counter.after_process_message(InProcess(), work)
        counter.before_process_message(WithRedis(), other)  # not named by key(): processed
        counter.after_process_message(WithRedis(), other)
        with pytest.raises(SkipMessage):
            counter.before_process_message(WithRedis(), work)  # named, on Redis: given up on
        counter.after_skip_message(WithRedis(), work)
        assert client.keys("crashes:*") == [b"crashes:g"]
        assert counter.solo._running == 0 and not counter.solo._alone
    finally:
        client.close()
    with pytest.raises(ValueError, match="max_crashes"):
        CrashCounter(lambda message: None, lambda *args: None, max_crashes=0)
