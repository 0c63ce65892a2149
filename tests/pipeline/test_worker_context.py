"""The worker context: the governance a process hands to its provider calls, bound from Settings."""
from __future__ import annotations

import threading

import pytest

from evaljobs import config
from evaljobs.catalog.modelspec import load_providers, parse_model_spec
from evaljobs.config import Settings
from evaljobs.pipeline import context, events
from evaljobs.pipeline.context import WorkerContext

PROVIDERS = """
providers:
  acme:
    base_url: http://127.0.0.1:9/v1
    governor: {initial: 2, ceiling: 8}
  shared:
    base_url: http://127.0.0.1:9/v1
    governor: {budget_key: account}
"""


@pytest.fixture
def providers(tmp_path):
    path = tmp_path / "providers.yaml"
    path.write_text(PROVIDERS)
    return load_providers(str(path))


@pytest.fixture
def no_bound_redis():
    """No broker's Redis known to this process, whatever ran before in it (under pytest-xdist each worker
    runs its own sequence of modules, and a Redis broker bound by one of them binds events too)."""
    previous = events.redis_url()
    events.bind_redis(None)
    yield
    events.bind_redis(previous)


def test_the_governor_follows_the_settings(providers, no_bound_redis):
    off = WorkerContext(Settings(governor=False))
    assert off.governor() is None
    spec = parse_model_spec("acme/m1", providers)
    assert off.budget_for(providers, spec) == "acme:m1"  # named even with the governor off

    on = WorkerContext(Settings(governor=True))
    try:
        governor = on.governor()
        assert governor is not None and governor.backend == "local"  # no Redis known: per process
        assert on.governor() is governor  # built once
        assert on.budget_for(providers, spec) == "acme:m1"
        assert governor.config("acme:m1").initial == 2 and governor.config("acme:m1").ceiling == 8
        assert on.budget_for(providers, parse_model_spec("shared/x", providers)) == "shared:*"
    finally:
        on.close()


def test_lane_and_permit_wait():
    ctx = WorkerContext(Settings(permit_wait=3.5))
    assert ctx.lane() == "bulk" and ctx.permit_wait() == 3.5
    ctx.set_default_lane("interactive")
    assert ctx.lane() == "interactive"
    assert WorkerContext(Settings(lane="bulk"), default_lane="interactive").lane() == "bulk"  # settings win
    with pytest.raises(ValueError, match="lane must be"):
        ctx.set_default_lane("fast")

    ctx.set_permit_wait(60.0)  # this thread's message waits in place
    seen: list[float] = []
    other = threading.Thread(target=lambda: seen.append(ctx.permit_wait()))
    other.start()
    other.join(5)
    assert ctx.permit_wait() == 60.0 and seen == [3.5]  # per thread
    ctx.set_permit_wait(None)
    assert ctx.permit_wait() == 3.5


def test_the_process_context_is_rebuilt_when_the_settings_are_replaced():
    config.configure(Settings(governor=False))
    first = context.current()
    assert context.current() is first and first.settings is config.settings()
    first.set_default_lane("interactive")
    config.configure(Settings(governor=False, permit_wait=9.0))
    second = context.current()
    assert second is not first and second.permit_wait() == 9.0
    assert second.lane() == "interactive"  # a pool's lane survives new settings
