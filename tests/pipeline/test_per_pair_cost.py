"""Shortcuts on the per-pair path (issue 42, item 4) give the answers the long way gives."""
from __future__ import annotations

import inspect

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.broker import MessageProxy
from dramatiq.middleware import SkipMessage
from evaljobs_middleware.refusals import Refusals

from evaljobs.evaluation.result import OUTPUT_CAP
from evaljobs.redact import redact_value, register_secret
from evaljobs.store import results


def _long_way(value):
    return results._dumps(redact_value(results._capped(value)))


@pytest.mark.parametrize("value", [
    {"messages": [{"role": "user", "content": "hi"}], "judge": None},
    [{"name": "lookup", "result": "x" * (OUTPUT_CAP + 5)}],
    {"nested": ("a", ["b", {"c": "é" * (OUTPUT_CAP // 2)}])},
    None,
])
def test_stored_json_is_the_capped_and_redacted_json(value):
    assert results._stored_json(value) == _long_way(value)


def test_stored_json_scrubs_a_registered_secret_in_a_short_value():
    register_secret("sk-per-pair-cost-0123456789")
    value = {"messages": [{"content": "key sk-per-pair-cost-0123456789 echoed"}]}
    stored = results._stored_json(value)
    assert "sk-per-pair-cost" not in stored and stored == _long_way(value)


def test_arguments_are_bound_once_per_shape_and_a_misfit_is_still_refused(monkeypatch):
    broker = StubBroker()
    refusals = Refusals()

    def pair(run_id, key, model, epoch=0):
        return None

    dramatiq.Actor(pair, broker=broker, actor_name="pair", queue_name="q", priority=0, options={})
    binds = []
    real_bind = inspect.Signature.bind
    monkeypatch.setattr(inspect.Signature, "bind",
                        lambda self, *a, **k: (binds.append(a), real_bind(self, *a, **k))[1])

    def deliver(*args, **kwargs):
        message = dramatiq.Message(queue_name="q", actor_name="pair", args=args, kwargs=kwargs, options={})
        refusals.before_process_message(broker, MessageProxy(message))

    for i in range(3):
        deliver("r", f"s{i}", "m")
    deliver("r", "s9", "m", epoch=2)
    assert len(binds) == 2  # one shape of three positional arguments, one with the epoch keyword
    with pytest.raises(SkipMessage):
        deliver("r", "s1")  # too few: refused, whatever fitted before
    with pytest.raises(SkipMessage):
        deliver("r", "s1", "m", colour=1)
