"""Pipelined enqueue: the same messages, hooks and order as one ``broker.enqueue`` per message."""
from __future__ import annotations

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from evaljobs.pipeline import enqueue


class Recorder(dramatiq.Middleware):
    def __init__(self) -> None:
        self.before: list[str] = []
        self.after: list[str] = []

    def before_enqueue(self, broker, message, delay):
        message.options["stamped"] = True  # what the context middleware does: options set here are sent
        self.before.append(message.message_id)

    def after_enqueue(self, broker, message, delay):
        self.after.append(message.message_id)


def _messages(broker, n: int, queue: str) -> list[dramatiq.Message]:
    @dramatiq.actor(broker=broker, queue_name=queue, actor_name=f"noop_{queue}")
    def noop(i: int) -> None:  # pragma: no cover - never run
        pass

    return [noop.message(i) for i in range(n)]


@pytest.mark.redis
def test_redis_enqueue_is_pipelined_in_chunks_and_keeps_order_hooks_and_unique_ids(redis_url, monkeypatch):
    from dramatiq.brokers.redis import RedisBroker

    recorder = Recorder()
    broker = RedisBroker(url=redis_url, middleware=[recorder])
    monkeypatch.setattr(enqueue, "CHUNK", 100)
    sent = _messages(broker, 1234, "pipelined")
    from evaljobs_middleware.commands import ThreadCommands

    calls = []
    real = ThreadCommands.execute
    monkeypatch.setattr(ThreadCommands, "execute", lambda self, *commands: calls.append(len(commands))
                        or real(self, *commands))

    enqueue.enqueue_many(broker, sent)

    assert calls == [100] * 12 + [34]  # 12 full chunks of 100 and one of 34: 13 round trips, not 1,234
    ids = [m.message_id for m in sent]
    assert recorder.before == ids and recorder.after == ids
    assert broker.client.llen("dramatiq:pipelined") == 1234
    received = []
    consumer = broker.consume("pipelined", prefetch=2000, timeout=100)
    for message in consumer:
        if message is None:
            break
        received.append(message)
        consumer.ack(message)
    assert [m.message_id for m in received] == ids
    assert [m.args for m in received] == [(i,) for i in range(1234)]
    assert all(m.options["stamped"] for m in received)
    assert len({m.options["redis_message_id"] for m in received}) == 1234
    consumer.close()
    broker.close()


def test_other_brokers_enqueue_one_by_one():
    recorder = Recorder()
    broker = StubBroker(middleware=[recorder])
    sent = _messages(broker, 5, "stub")
    enqueue.enqueue_many(broker, sent)
    assert recorder.after == [m.message_id for m in sent]
    assert broker.queues["stub"].qsize() == 5
