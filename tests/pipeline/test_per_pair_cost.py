"""Shortcuts on the per-pair path (issue 42, item 4) give the answers the long way gives."""
from __future__ import annotations

import inspect
import json
import re

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


# -- session 13: one pair a message (issue 42, item 4) ------------------------------------------------

@pytest.mark.parametrize("text", [
    "sim/fast", "sim/fast@sha-1234", "plain words, no link", "Error: redis://:PW-1@h:1/0 refused",
    "postgresql://bob@localhost/db?password=PW-6&x=1", "host=h password=PW-10 port=5432",
    "a=b", "see https://example.com/docs", "",
])
def test_redact_text_skips_the_url_patterns_only_where_none_can_match(text):
    from evaljobs import redact

    long_way = redact.scrub_secrets(text)
    userinfo = (redact._USERINFO, lambda m: f"{m['head']}:{redact.MASK}@" if m["secret"] else m[0])
    for pattern, mask in (userinfo,
                          (redact._LONE, lambda m: f"{m['head']}{redact.MASK}@"),
                          (redact._PARAM, lambda m: f"{m['head']}{redact.MASK}")):
        long_way = re.sub(pattern, mask, long_way)
    assert redact.redact_text(text) == long_way


@pytest.mark.parametrize("value", [
    {"b": [1, 2.5, None, True], "a": {"é": "ünïcode", "z": ""}}, ["batch", [["s1", "m", 0]]], "x", None,
])
def test_the_shared_json_encoders_write_what_json_dumps_writes(value):
    from evaljobs.catalog import digest
    from evaljobs.pipeline import crash_counting, events
    from evaljobs.store import schema

    assert digest._canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":"),
                                                  ensure_ascii=False)
    assert schema._dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    compact = json.dumps(value, separators=(",", ":"))
    assert events._compact(value) == crash_counting._compact(value) == compact


def test_the_gate_order_kept_for_the_graders_table_follows_a_registered_grader():
    from evaljobs.catalog import criteria as catalog_criteria
    from evaljobs.catalog.criteria import POSITIVE_INT, positive_int, value_criterion
    from evaljobs.evaluation import graders, grading

    before = grading.gate_order()
    assert grading.gate_order() is before  # kept: the same table gives the same tuple
    catalog_criteria.register(value_criterion("gate_order_probe", description="probe", schema=POSITIVE_INT,
                                              check=positive_int, label=str))
    graders.register(graders.value_grader("gate_order_probe", lambda replay, most: True, fault="probed",
                                          gate_rank=65))
    try:
        during = grading.gate_order()
        assert "gate_order_probe" in during and "gate_order_probe" not in before
        assert during.index("gate_order_probe") < during.index("contains")  # rank 65 before contains' 70
        assert tuple(n for n in during if n != "gate_order_probe") == before
    finally:
        graders.unregister("gate_order_probe")
        catalog_criteria.unregister("gate_order_probe")
    assert grading.gate_order() == before and "gate_order_probe" not in grading.gate_order()


SNAPSHOT = """\
name: digests
scenarios:
  - key: judged
    prompt: "Grüße, explain"
    expect: {contains: [hi], judge: "is it kind?"}
  - key: plain
    prompt: hello
    expect: {contains: [hi]}
  - key: tooled
    prompt: look it up
    tools: [{name: lookup, returns: {a: 1}}]
    expect: {tools: [lookup]}
"""


def test_a_snapshot_read_back_keeps_each_scenario_digest_and_a_changed_scenario_changes_its_own():
    from evaljobs.catalog import catalog_from_body, loads_catalog
    from evaljobs.catalog.digest import digest_of, scenario_digest

    written = loads_catalog(SNAPSHOT)
    assert written.scenario_digests is None  # a catalog checked or submitted keeps none (catalog check)
    back = catalog_from_body(json.loads(json.dumps(written.body)))
    assert back.digest == written.digest == digest_of(written.body)  # the catalog's digest is unchanged
    assert back.scenario_digests == {s.key: scenario_digest(s) for s in written.scenarios}
    body = json.loads(json.dumps(written.body))
    body["scenarios"][1]["messages"][0]["content"] = "hello again"
    changed = catalog_from_body(body)
    assert changed.scenario_digests["plain"] != back.scenario_digests["plain"]
    assert changed.scenario_digests["plain"] == scenario_digest(changed.scenario("plain"))
    assert {k: v for k, v in changed.scenario_digests.items() if k != "plain"} \
        == {k: v for k, v in back.scenario_digests.items() if k != "plain"}
    assert changed.digest == digest_of(changed.body) != back.digest


def test_the_redis_broker_calls_the_hooks_dramatiq_would_in_its_order(redis_url):
    from dramatiq.middleware import MiddlewareError

    from evaljobs.pipeline.dramatiq_internals import WakingRedisBroker

    calls: list[str] = []

    class Defines(dramatiq.Middleware):
        def __init__(self, name):
            self.name = name

        def before_process_message(self, broker, message):
            calls.append(f"{self.name} before")

        def after_process_message(self, broker, message, *, result=None, exception=None):
            calls.append(f"{self.name} after")

    class Silent(dramatiq.Middleware):
        pass

    class Fails(dramatiq.Middleware):
        def before_process_message(self, broker, message):
            calls.append("fails before")
            raise RuntimeError("a hook's bug is logged, the next hook still runs")

    broker = WakingRedisBroker(url=redis_url, middleware=[])
    own = Silent()
    own.before_process_message = lambda broker, message: calls.append("own before")  # an instance's hook
    for middleware in (Defines("a"), Silent(), Fails(), own, Defines("b")):
        broker.add_middleware(middleware)
    message = dramatiq.Message(queue_name="q", actor_name="a", args=(), kwargs={}, options={})

    def both(signal):
        calls.clear()
        getattr(dramatiq.Broker, f"emit_{signal}")(broker, "process_message", message)  # Dramatiq's own
        theirs = list(calls)
        calls.clear()
        getattr(broker, f"emit_{signal}")("process_message", message)
        return theirs, list(calls)

    for signal in ("before", "after"):
        theirs, ours = both(signal)
        assert ours == theirs and ours
    assert both("before")[1] == ["a before", "fails before", "own before", "b before"]
    assert both("after")[1] == ["b after", "a after"]
    broker.add_middleware(Defines("late"))  # seen at the next signal
    assert both("before")[1][-1] == "late before"

    class Refuses(dramatiq.Middleware):
        def before_process_message(self, broker, message):
            raise MiddlewareError("refused")

    broker.add_middleware(Refuses())
    with pytest.raises(MiddlewareError):
        broker.emit_before("process_message", message)
    broker.close()


def test_a_fetched_message_reads_its_fields_as_its_own_and_still_shares_its_options(redis_url):
    from dramatiq.broker import MessageProxy

    from evaljobs.pipeline.dramatiq_internals import WakingRedisBroker

    broker = WakingRedisBroker(url=redis_url, middleware=[])
    broker.declare_queue("inline")
    sent = broker.enqueue(dramatiq.Message(queue_name="inline", actor_name="a", args=("run", "s1", "m"),
                                           kwargs={"rl": 1}, options={"retries": 0}))
    consumer = broker.consume("inline", prefetch=1, timeout=100)
    try:
        proxy = next(consumer)  # the message is queued already: the first fetch brings it
        assert isinstance(proxy, MessageProxy) and proxy.message_id == sent.message_id
        assert {"actor_name", "args", "kwargs", "options", "message_id", "queue_name"} <= set(vars(proxy))
        assert proxy.args == ("run", "s1", "m") and proxy.kwargs == {"rl": 1}
        assert proxy.options is proxy._message.options  # one dict: what middleware writes is encoded
        proxy.options["retries"] = 3
        assert dramatiq.Message.decode(proxy.encode()).options["retries"] == 3
        consumer.ack(proxy)
    finally:
        consumer.close()
        broker.close()


def test_a_price_kept_per_model_is_the_lookup_and_another_entry_keeps_its_own():
    from dataclasses import replace

    from evaljobs.catalog.modelspec import ProviderConfig, _lookup

    entry = ProviderConfig("p", "http://127.0.0.1:1", prices={"gpt-4o-*": [1, 2], "gpt-4o-mini-*": [3, 4],
                                                              "*": [5, 6]})
    for model in ("gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06", "other", "gpt-4o-mini-2024-07-18"):
        assert entry.price(model) == _lookup(entry.prices, model)
    assert entry.price("gpt-4o-mini-2024-07-18").input == 3  # the longest matching pattern
    repriced = replace(entry, prices={"*": [7, 8]})
    assert repriced.price("gpt-4o-mini-2024-07-18").input == 7 and entry.price("other").input == 5
    assert ProviderConfig("q", None).price("any") is None  # no price is not a price of zero, kept too
