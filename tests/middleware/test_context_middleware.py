"""ContextMiddleware: host state travels from the enqueuing thread to the actor and never leaks."""

from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager
from importlib import metadata
from typing import Any, Iterator

import dramatiq
import pytest
from dramatiq.broker import MessageProxy
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import Callbacks, Middleware

from evaljobs_middleware.context import (ContextError,
                                         ContextMiddleware,
                                         ContextVarProvider,
                                         Provider,
                                         ThreadLocalProvider,
                                         discover_providers)

QUEUE = "ctx"
KEY = b"test-signing-key"

# Host state, the way a host keeps it: a thread-local "publishing domain" and a context variable.
HOST = threading.local()
REQUEST: contextvars.ContextVar[str | None] = contextvars.ContextVar("request", default=None)


@contextmanager
def publishing_domain(name: Any) -> Iterator[None]:
    previous = getattr(HOST, "domain", None)
    HOST.domain = name
    try:
        yield
    finally:
        if previous is None:
            del HOST.domain
        else:
            HOST.domain = previous


def current_domain() -> Any:
    return getattr(HOST, "domain", None)


def domain_provider() -> ThreadLocalProvider:
    return ThreadLocalProvider("domain", HOST, "domain")


def request_provider() -> ContextVarProvider:
    return ContextVarProvider("request", REQUEST)


class SpyProvider:
    """Wraps a provider to count restores and optionally fail."""

    def __init__(self, inner: Provider, *, fail_restore: bool = False, fail_clear: bool = False) -> None:
        self.name = inner.name
        self.inner = inner
        self.fail_restore = fail_restore
        self.fail_clear = fail_clear
        self.restores = 0
        self.clears = 0

    def capture(self) -> Any:
        return self.inner.capture()

    def restore(self, value: Any) -> Any:
        self.restores += 1
        if self.fail_restore:
            raise RuntimeError("restore exploded")
        return self.inner.restore(value)

    def clear(self, token: Any) -> None:
        self.clears += 1
        if self.fail_clear:
            raise RuntimeError("clear exploded")
        self.inner.clear(token)


def make_broker(*, placement: str = "before", providers: list | None = None, **options: Any):
    broker = StubBroker()
    middleware = ContextMiddleware(
        providers if providers is not None else [domain_provider(), request_provider()], **options
    )
    if placement == "before":
        broker.add_middleware(middleware, before=Callbacks)
    else:
        broker.add_middleware(middleware)
    return broker, middleware


@contextmanager
def running(broker: StubBroker, threads: int = 1) -> Iterator[dramatiq.Worker]:
    worker = dramatiq.Worker(broker, worker_timeout=10, worker_threads=threads)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def drain(broker: StubBroker, worker: dramatiq.Worker) -> None:
    broker.join(QUEUE, timeout=5000, fail_fast=False)
    worker.join()


def recording_actor(broker: StubBroker, seen: list, **options: Any) -> dramatiq.Actor:
    def record(tag: Any = None) -> None:
        seen.append((tag, current_domain(), REQUEST.get()))

    return dramatiq.actor(record, broker=broker, queue_name=QUEUE, max_retries=0, **options)


# -- propagation through a real worker -------------------------------------------------------


@pytest.mark.parametrize("delay", [None, 1])
def test_actor_sees_the_enqueuing_threads_state(delay):
    broker, _ = make_broker()
    seen: list = []
    actor = recording_actor(broker, seen)
    with publishing_domain("acme"):
        token = REQUEST.set("req-1")
        try:
            message = actor.send_with_options(args=("a",), delay=delay)
        finally:
            REQUEST.reset(token)
    assert message.options["context"] == {"v": {"domain": "acme", "request": "req-1"}}
    with running(broker) as worker:
        drain(broker, worker)
    assert seen == [("a", "acme", "req-1")]


def test_nothing_captured_puts_no_option():
    broker, _ = make_broker()
    actor = recording_actor(broker, [])
    assert "context" not in actor.send().options


def test_child_message_enqueued_by_an_actor_carries_the_context():
    broker, _ = make_broker()
    seen: list = []
    child = recording_actor(broker, seen)

    def parent() -> None:
        child.send("child")  # no explicit domain here: it comes from the restored context

    parent_actor = dramatiq.actor(parent, broker=broker, queue_name=QUEUE, max_retries=0)
    with publishing_domain("acme"):
        parent_actor.send()
    assert current_domain() is None
    with running(broker) as worker:
        drain(broker, worker)
    assert seen == [("child", "acme", None)]


def test_concurrent_domains_never_mix():
    broker, _ = make_broker()
    seen: list = []
    lock = threading.Lock()

    def record(expected: Any) -> None:
        observed = current_domain()
        threading.Event().wait(0.0005)  # let other worker threads interleave
        with lock:
            seen.append((expected, observed, current_domain()))

    actor = dramatiq.actor(record, broker=broker, queue_name=QUEUE, max_retries=0)

    def sender(domain: str | None) -> None:
        if domain is None:
            for _ in range(40):
                actor.send(None)
            return
        with publishing_domain(domain):
            for _ in range(40):
                actor.send(domain)

    with running(broker, threads=4) as worker:
        senders = [threading.Thread(target=sender, args=(d,)) for d in ("acme", "globex", None)]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join()
        drain(broker, worker)
    assert len(seen) == 120
    assert all(expected == observed == after for expected, observed, after in seen)


class _DomainAtRetryEnqueue(Middleware):
    def __init__(self) -> None:
        self.domains: list = []

    def before_enqueue(self, broker, message, delay):
        if "retries" in message.options:
            self.domains.append(current_domain())


@pytest.mark.parametrize(
    ("placement", "domain_at_retry"),
    [
        ("after", None),  # appended last: cleared before Retries re-enqueues, the thread has no domain
        ("before", "globex"),  # still restored, but the actor changed the domain before failing
    ],
)
def test_retry_keeps_its_original_context(placement, domain_at_retry):
    broker, _ = make_broker(placement=placement)
    spy = _DomainAtRetryEnqueue()
    broker.add_middleware(spy)
    attempts: list = []

    def flaky() -> None:
        attempts.append(current_domain())
        if len(attempts) == 1:
            HOST.domain = "globex"
            raise RuntimeError("first attempt fails")

    actor = dramatiq.actor(
        flaky, broker=broker, queue_name=QUEUE, max_retries=3, min_backoff=1, max_backoff=5
    )
    with publishing_domain("acme"):
        actor.send()
    with running(broker) as worker:
        drain(broker, worker)
    assert spy.domains[0] == domain_at_retry  # the retry was enqueued under another (or no) domain...
    assert attempts == ["acme", "acme"]  # ...yet it ran under the one it was first enqueued with


def test_re_enqueue_keeps_the_captured_context():
    broker, _ = make_broker()
    actor = recording_actor(broker, [])
    with publishing_domain("acme"):
        message = actor.send()
    with publishing_domain("globex"):
        again = broker.enqueue(message)
    assert again.options["context"] == {"v": {"domain": "acme"}}


@pytest.mark.parametrize("first_raises", [False, True])
def test_next_message_on_the_thread_sees_no_context(first_raises):
    broker, _ = make_broker()
    seen: list = []

    def work(tag: str) -> None:
        seen.append((tag, current_domain(), REQUEST.get()))
        if tag == "first" and first_raises:
            raise RuntimeError("boom")

    actor = dramatiq.actor(work, broker=broker, queue_name=QUEUE, max_retries=0)
    with running(broker, threads=1) as worker:
        with publishing_domain("acme"):
            token = REQUEST.set("req-1")
            actor.send("first")
            REQUEST.reset(token)
        drain(broker, worker)
        actor.send("second")
        drain(broker, worker)
    assert seen == [("first", "acme", "req-1"), ("second", None, None)]


# -- enqueue-time validation -----------------------------------------------------------------


def test_non_serializable_value_fails_at_send_naming_the_provider():
    broker, _ = make_broker()
    actor = recording_actor(broker, [])
    with publishing_domain({"acme"}):
        with pytest.raises(ContextError) as info:
            actor.send()
    assert isinstance(info.value, ValueError)
    assert "context provider 'domain' returned a value that is not JSON-serializable (set)" in str(info.value)
    assert broker.queues[QUEUE].qsize() == 0


def test_oversized_context_fails_at_send_naming_size_and_cap():
    broker, _ = make_broker(max_bytes=64)
    actor = recording_actor(broker, [])
    with publishing_domain("x" * 100):
        with pytest.raises(ContextError, match=r"is 1\d\d bytes, over the cap of 64 bytes"):
            actor.send()
    assert broker.queues[QUEUE].qsize() == 0


def test_values_are_stored_as_their_json_round_trip():
    broker, _ = make_broker(signing_key=KEY)
    actor = recording_actor(broker, [])
    with publishing_domain({"tenants": ("acme", "globex"), 1: "one"}):
        message = actor.send()
    assert message.options["context"]["v"] == {"domain": {"tenants": ["acme", "globex"], "1": "one"}}


# -- signing -----------------------------------------------------------------------------------


def signed_message(actor: dramatiq.Actor, middleware: ContextMiddleware, broker: StubBroker, *args: Any):
    """A message whose context was captured under "acme" (without enqueuing it)."""
    message = actor.message(*args)
    with publishing_domain("acme"):
        middleware.before_enqueue(broker, message, None)
    return message


def test_signed_context_is_restored():
    broker, _ = make_broker(signing_key="secret")
    seen: list = []
    actor = recording_actor(broker, seen)
    with publishing_domain("acme"):
        message = actor.send("a")
    assert len(message.options["context"]["sig"]) == 64
    with running(broker) as worker:
        drain(broker, worker)
    assert seen == [("a", "acme", None)]


def test_message_without_context_runs_when_a_signing_key_is_set():
    broker, _ = make_broker(signing_key=KEY)
    seen: list = []
    actor = recording_actor(broker, seen)
    actor.send("bare")
    with running(broker) as worker:
        drain(broker, worker)
    assert seen == [("bare", None, None)]
    assert broker.dead_letters == []


def _tamper_value(context: dict) -> dict:
    return {**context, "v": {"domain": "globex"}}


def _drop_sig(context: dict) -> dict:
    return {"v": context["v"]}


def _wrong_sig(context: dict) -> dict:
    return {**context, "sig": "0" * 64}


def _non_ascii_sig(context: dict) -> dict:
    return {**context, "sig": "é" * 64}


def _other_key_sig(context: dict) -> dict:
    import hashlib
    import hmac
    import json

    body = json.dumps({"v": context["v"], "b": ""}, sort_keys=True, separators=(",", ":")).encode()
    return {**context, "sig": hmac.new(b"attacker", body, hashlib.sha256).hexdigest()}


def _malformed(context: dict) -> dict:
    return {"v": ["acme"], "sig": context["sig"]}


@pytest.mark.parametrize(
    "forge", [_tamper_value, _drop_sig, _wrong_sig, _non_ascii_sig, _other_key_sig, _malformed]
)
def test_forged_context_is_dead_lettered_without_running_the_actor(forge, caplog):
    spy = SpyProvider(domain_provider())
    broker, middleware = make_broker(providers=[spy], signing_key=KEY)
    seen: list = []
    actor = recording_actor(broker, seen)
    genuine = signed_message(actor, middleware, broker)
    forged = genuine.copy(options={"context": forge(genuine.options["context"])})
    broker.enqueue(forged)
    with running(broker) as worker:
        drain(broker, worker)
    assert seen == []
    assert [m.message_id for m in broker.dead_letters] == [forged.message_id]
    assert spy.restores == 0
    assert f"Rejected message {forged.message_id}: context" in caplog.text


def test_context_bound_to_one_run_is_rejected_on_another():
    def bind(message) -> str:
        return str(message.args[0])

    broker, middleware = make_broker(signing_key=KEY, bind=bind)
    seen: list = []
    actor = recording_actor(broker, seen)
    run_one = signed_message(actor, middleware, broker, "run-1")
    replayed = actor.message("run-2").copy(options={"context": run_one.options["context"]})
    broker.enqueue(run_one)
    broker.enqueue(replayed)
    with running(broker) as worker:
        drain(broker, worker)
    assert seen == [("run-1", "acme", None)]
    assert [m.message_id for m in broker.dead_letters] == [replayed.message_id]


def test_binding_that_fails_at_enqueue_is_a_context_error():
    broker, _ = make_broker(signing_key=KEY, bind=lambda message: message.args[5])
    actor = recording_actor(broker, [])
    with publishing_domain("acme"), pytest.raises(ContextError, match="context binding failed for record"):
        actor.send()


def test_constructor_rejects_bad_configuration():
    with pytest.raises(ValueError, match="signing_key is empty"):
        ContextMiddleware([domain_provider()], signing_key="")
    with pytest.raises(ValueError, match="two context providers are named 'domain'"):
        ContextMiddleware([domain_provider(), domain_provider()])
    with pytest.raises(TypeError, match="not a context provider"):
        ContextMiddleware([object()])


# -- clearing ----------------------------------------------------------------------------------


def _proxy_with_context(middleware: ContextMiddleware, broker: StubBroker) -> MessageProxy:
    actor = dramatiq.actor(lambda: None, actor_name="noop", broker=broker, queue_name=QUEUE)
    message = actor.message()
    with publishing_domain("acme"):
        token = REQUEST.set("req-1")
        middleware.before_enqueue(broker, message, None)
        REQUEST.reset(token)
    return MessageProxy(message)


def test_clear_keeps_going_when_a_provider_clear_raises(caplog):
    broken = SpyProvider(request_provider(), fail_clear=True)
    broker, middleware = make_broker(providers=[domain_provider(), broken])
    proxy = _proxy_with_context(middleware, broker)

    def on_fresh_thread() -> None:
        middleware.before_process_message(broker, proxy)
        assert (current_domain(), REQUEST.get()) == ("acme", "req-1")
        middleware.after_process_message(broker, proxy, exception=RuntimeError("actor failed"))
        result.append(current_domain())
        middleware.after_skip_message(broker, proxy)  # a second clear finds nothing to do

    result: list = []
    thread = threading.Thread(target=on_fresh_thread)
    thread.start()
    thread.join()
    assert result == [None]
    assert broken.clears == 1
    assert "Context provider 'request' failed to clear." in caplog.text


def test_clear_without_a_before_hook_is_a_no_op():
    broker, middleware = make_broker()
    proxy = MessageProxy(recording_actor(broker, []).message())
    errors: list = []

    def on_fresh_thread() -> None:
        try:
            middleware.after_process_message(broker, proxy, result=None)
            middleware.after_skip_message(broker, proxy)
        except Exception as e:  # pragma: no cover - the assertion below reports it
            errors.append(e)

    thread = threading.Thread(target=on_fresh_thread)
    thread.start()
    thread.join()
    assert errors == []


def test_context_left_by_a_missing_after_hook_is_cleared_before_the_next_message(caplog):
    broker, middleware = make_broker()
    with_context = _proxy_with_context(middleware, broker)
    bare = MessageProxy(recording_actor(broker, []).message())
    observed: list = []

    def on_fresh_thread() -> None:
        middleware.before_process_message(broker, with_context)  # its after-hook never runs
        middleware.before_process_message(broker, bare)
        observed.append((current_domain(), REQUEST.get()))
        middleware.after_process_message(broker, bare)

    thread = threading.Thread(target=on_fresh_thread)
    thread.start()
    thread.join()
    assert observed == [(None, None)]
    assert "Clearing context left over from a previous message" in caplog.text


def test_restore_failing_halfway_dead_letters_and_clears_what_was_restored():
    exploding = SpyProvider(ContextVarProvider("zz_request", REQUEST), fail_restore=True)
    broker, _ = make_broker(providers=[domain_provider(), exploding])
    seen: list = []
    actor = recording_actor(broker, seen)
    with running(broker, threads=1) as worker:
        with publishing_domain("acme"):
            token = REQUEST.set("req-1")
            doomed = actor.send("doomed")
            REQUEST.reset(token)
        drain(broker, worker)
        actor.send("next")
        drain(broker, worker)
    assert seen == [("next", None, None)]
    assert [m.message_id for m in broker.dead_letters] == [doomed.message_id]


# -- placement in the middleware stack ----------------------------------------------------------


@pytest.mark.parametrize(("placement", "expected"), [("before", "acme"), ("after", None)])
def test_callbacks_carry_the_context_only_when_placed_before_callbacks(placement, expected, caplog):
    broker, _ = make_broker(placement=placement)
    seen: list = []

    def on_done(message_data: dict, outcome: Any) -> None:
        seen.append((message_data["args"][0], current_domain()))

    dramatiq.actor(on_done, broker=broker, queue_name=QUEUE)

    def work(fail: bool) -> None:
        if fail:
            raise RuntimeError("boom")

    actor = dramatiq.actor(
        work, broker=broker, queue_name=QUEUE, max_retries=0, on_success="on_done", on_failure="on_done"
    )
    with publishing_domain("acme"):
        actor.send(False)
        actor.send(True)
    with running(broker) as worker:
        drain(broker, worker)
    assert sorted(seen) == [(False, expected), (True, expected)]
    misplaced = "ContextMiddleware sits after Callbacks, Pipelines, Retries" in caplog.text
    assert misplaced == (placement == "after")


# -- providers ---------------------------------------------------------------------------------


def test_thread_local_provider_restore_and_clear():
    local = threading.local()
    provider = ThreadLocalProvider("domain", local, "value")
    assert provider.capture() is None

    token = provider.restore("acme")
    assert (local.value, provider.capture()) == ("acme", "acme")
    provider.clear(token)
    assert not hasattr(local, "value")

    local.value = "outer"
    token = provider.restore("inner")
    assert token == "outer" and local.value == "inner"
    provider.clear(token)
    assert local.value == "outer"

    captured: list = []
    thread = threading.Thread(target=lambda: captured.append(provider.capture()))
    thread.start()
    thread.join()
    assert captured == [None]


def test_context_var_provider_restore_and_clear():
    var: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="nobody")
    provider = ContextVarProvider("tenant", var)
    assert provider.capture() is None  # the default is not carried

    def scenario() -> None:
        var.set("outer")
        token = provider.restore("inner")
        assert (var.get(), provider.capture()) == ("inner", "inner")
        provider.clear(token)
        assert var.get() == "outer"

    contextvars.copy_context().run(scenario)


@pytest.mark.parametrize(("default", "after"), [("nobody", "nobody"), (None, None)])
def test_context_var_clear_falls_back_when_the_token_is_from_another_context(default, after):
    var = contextvars.ContextVar("tenant", default=default) if default else contextvars.ContextVar("tenant")
    provider = ContextVarProvider("tenant", var)
    foreign = contextvars.copy_context().run(provider.restore, "inner")

    def scenario() -> None:
        var.set("leaked")
        provider.clear(foreign)
        assert var.get() == after

    contextvars.copy_context().run(scenario)


# -- entry-point discovery -----------------------------------------------------------------------

DOMAIN_PROVIDER = ThreadLocalProvider("domain", HOST, "domain")
NOT_A_PROVIDER = 42


def make_request_provider() -> ContextVarProvider:
    return ContextVarProvider("request", REQUEST)


class TenantProvider(ThreadLocalProvider):
    def __init__(self) -> None:
        super().__init__("tenant", HOST, "tenant")


def fake_entry_points(monkeypatch, **values: str) -> None:
    points = [
        metadata.EntryPoint(name=name, value=value, group="hosts.context") for name, value in values.items()
    ]

    def entry_points(*, group: str):
        return [p for p in points if p.group == group]

    monkeypatch.setattr(metadata, "entry_points", entry_points)


def test_discover_providers_accepts_instances_and_factories(monkeypatch):
    fake_entry_points(
        monkeypatch,
        domain=f"{__name__}:DOMAIN_PROVIDER",
        request=f"{__name__}:make_request_provider",
        tenant=f"{__name__}:TenantProvider",
    )
    providers = discover_providers("hosts.context")
    assert [p.name for p in providers] == ["domain", "request", "tenant"]
    assert providers[0] is DOMAIN_PROVIDER
    assert discover_providers("other.group") == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("no_such_module_for_context:thing", "failed to load: ModuleNotFoundError"),
        (f"{__name__}:NOT_A_PROVIDER", "resolved to 42, which is not a context provider"),
    ],
)
def test_discover_providers_names_a_broken_entry_point(monkeypatch, value, message):
    fake_entry_points(monkeypatch, broken=value)
    with pytest.raises(ContextError) as info:
        discover_providers("hosts.context")
    text = str(info.value)
    assert "\n" not in text
    assert f"entry point 'broken' ({value}) in group 'hosts.context'" in text
    assert message in text
