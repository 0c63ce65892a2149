"""Session-wide real servers (started only when a test asks), per-test URLs, and the simulated provider.

What tests share that is not a fixture (fleets of workers, catalog builders, server
classes) is in ``tests/helpers/``.
"""
from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from evaljobs.simulated import SimulatedProvider
from helpers.browser import find_chromium
from helpers.cli import Cli
from helpers.schedule import slowest_first
from helpers.servers import PostgresServer, RabbitmqServer, RedisServer, ServerError

#: Fixtures of tests/network/ (a worker "machine" in a network namespace): module-scoped, so each module that
#: uses them builds its own, and two such modules run at once on two xdist workers.
pytest_plugins = ["helpers.netns_runs"]

#: ``EVALJOBS_*`` variables of the shell that started pytest: the ``cli`` fixture's commands do not see them.
_OUTER_EVALJOBS_VARIABLES = tuple(name for name in os.environ if name.startswith("EVALJOBS_"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False, help="also run the long soak variants")


def pytest_configure(config: pytest.Config) -> None:
    for line in ("redis: needs a real redis-server (started by the test session)",
                 "postgres: needs a real PostgreSQL cluster (started by the test session)",
                 "rabbitmq: needs a real rabbitmq-server (started by the test session)",
                 "slow: long soak variants, run with --soak"):
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The slowest modules first (helpers/schedule.py): scripts/test's xdist workers take whole modules
    # in this order, so neither is left running a long module alone at the end.
    items[:] = slowest_first(items)
    if config.getoption("--soak"):
        return
    opt_in = pytest.mark.skip(reason="soak variant: run with --soak")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(opt_in)


def _session_server(factory: Callable[[], Any]) -> Iterator[Any]:
    """A server for the whole session; one that cannot start fails the tests that need it, in one line."""
    try:
        server = factory()
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_server():
    yield from _session_server(RedisServer)


@pytest.fixture(scope="module")
def module_redis_url(redis_server: RedisServer) -> str:
    """The session Redis for a module's own fixtures (a viewer, a fleet), started again if a test that
    ran before on this worker stopped it (tests of Redis outages do): ``redis_url`` does the same for a
    test, but is per test. Not emptied: a module's fixture shares it with that module's tests."""
    redis_server.start()
    return redis_server.url


@pytest.fixture(scope="session")
def postgres_server():
    yield from _session_server(PostgresServer)


@pytest.fixture(scope="session")
def rabbitmq_server():
    """One RabbitMQ node for the session (it takes seconds to start)."""
    yield from _session_server(RabbitmqServer)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless Chromium binary (helpers.browser.Browser drives it); missing is a failure, never a
    skip."""
    path = find_chromium()
    if path is None:
        pytest.fail("chromium is not installed: scripts/test installs it (apt-get install -y chromium); "
                    "the HTML report and the viewer are checked in a real headless browser", pytrace=False)
    return path


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session Redis, emptied (and restarted if a test stopped it)."""
    import redis

    redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture
def amqp_url(rabbitmq_server: RabbitmqServer, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session RabbitMQ (restarted if a test stopped it) with the default queue's leftovers deleted,
    and the session Redis, emptied, as its state store (``EVALJOBS_REDIS_URL``, which it needs)."""
    from evaljobs.config import DEFAULT_QUEUE

    rabbitmq_server.start()
    rabbitmq_server.delete_queues(DEFAULT_QUEUE)
    monkeypatch.setenv("EVALJOBS_REDIS_URL", redis_url)
    return rabbitmq_server.url


@pytest.fixture(params=["redis", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)])
def broker_url(request: pytest.FixtureRequest) -> str:
    """Run the test once on a Redis broker and once on RabbitMQ (its state in the same Redis)."""
    return request.getfixturevalue("redis_url" if request.param == "redis" else "amqp_url")


@pytest.fixture
def pg_url(postgres_server: PostgresServer):
    """A fresh database in the session cluster (restarted if a test stopped it), dropped afterwards."""
    if not postgres_server.running:
        postgres_server.start()
    name = f"test_{uuid.uuid4().hex[:12]}"
    yield postgres_server.create_database(name)
    if postgres_server.running:
        postgres_server.drop_database(name)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/evaljobs.db"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """Run the test once against SQLite and once against a real PostgreSQL."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture
def counting_server():
    """``counting_server(cap=4, latency=0.05, announce=False)``: a counting provider process
    (:class:`helpers.CountingServer`), stopped at teardown."""
    from helpers import CountingServer

    servers: list = []

    def start(**options):
        servers.append(CountingServer(**options))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(autouse=True)
def _settings_follow_the_environment(monkeypatch):
    """evaljobs reads ``EVALJOBS_*`` once, into ``evaljobs.config.Settings``; tests change them with
    ``monkeypatch.setenv``/``delenv``, so the process's settings are rebuilt after each change
    (and at the start of every test, once the previous test's changes are undone)."""
    from evaljobs import config

    config.configure()
    for name in ("setenv", "delenv"):
        def changed(*args, _original=getattr(monkeypatch, name), **kwargs):
            _original(*args, **kwargs)
            config.configure()

        setattr(monkeypatch, name, changed)


@pytest.fixture(autouse=True)
def _no_lease_outlives_its_test() -> Iterator[None]:
    """Fail a test that ends with a run lease its process took still held.

    The process's ``evaljobs-leases`` thread (evaljobs/pipeline/ownership.py) renews it for the rest of the
    pytest worker: against the database the test dropped (``retrying renew`` warnings, holding the store's
    lock while a later test forks), or another test's. Torn down after the test's other fixtures (a
    ``Session`` fixture has closed, its database is dropped). Leases of a wider fixture, taken before the
    test, are not the test's. Looked at only if something imported the module (nothing else holds one).
    """
    module = sys.modules.get("evaljobs.pipeline.ownership")
    before = module.held() if module is not None else frozenset()
    yield
    module = sys.modules.get("evaljobs.pipeline.ownership")
    leaked = sorted(module.held() - before) if module is not None else []
    if leaked:
        from evaljobs import store

        with store.without_waiting():
            module.release(leaked)  # no later test inherits its renewal (its database may be gone)
        pytest.fail(f"the test left the leases of {', '.join(leaked)} held: close the Session (or give up "
                    "what it holds) before the test ends", pytrace=False)


@pytest.fixture
def allow_code(monkeypatch):
    """This process, and the commands and workers it starts, run a catalog's code (python/javascript
    assertions, transforms): ``--allow-code``, ``EVALJOBS_ALLOW_CODE=1`` (refused otherwise)."""
    monkeypatch.setenv("EVALJOBS_ALLOW_CODE", "1")


class _SimulatedProviders:
    """Starts simulated providers on free loopback ports and stops them all at the end of its scope."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch | None) -> None:
        self._monkeypatch = monkeypatch
        self._started: list[SimulatedProvider] = []

    def __call__(self, *, export: bool | None = None, **options) -> SimulatedProvider:
        """``export`` (default: when the scope is one test) sets ``EVALJOBS_SIM_URL`` to the new provider."""
        if export and self._monkeypatch is None:
            raise TypeError("a module-scoped provider cannot set EVALJOBS_SIM_URL for each test: "
                            "set it in the test (monkeypatch.setenv) or use the simulated_provider fixture")
        provider = SimulatedProvider(**options).start()
        self._started.append(provider)
        if export is not False and self._monkeypatch is not None:
            # Every ``sim/...`` model of this process, and of the worker processes the test starts
            # (they inherit the environment), talks to this provider.
            self._monkeypatch.setenv("EVALJOBS_SIM_URL", provider.url)
        return provider

    def stop_all(self) -> None:
        for provider in reversed(self._started):
            provider.stop()


@pytest.fixture
def simulated_provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., SimulatedProvider]]:
    """Factory: ``simulated_provider(latency=0.01, ...)`` starts a :class:`SimulatedProvider` with those
    options for this test, stopped after it, and points ``EVALJOBS_SIM_URL`` at it (``export=False``
    leaves the environment alone: a provider reached through a providers file)."""
    providers = _SimulatedProviders(monkeypatch)
    yield providers
    providers.stop_all()


@pytest.fixture(scope="module")
def module_simulated_provider() -> Iterator[Callable[..., SimulatedProvider]]:
    """The same factory for a module-scoped provider shared by a module's tests. It cannot set the
    environment for them (that is per test): a test that needs ``EVALJOBS_SIM_URL`` sets it."""
    providers = _SimulatedProviders(None)
    yield providers
    providers.stop_all()


def _sim_options(module: Any) -> dict[str, Any]:
    return dict(getattr(module, "SIM_OPTIONS", {"latency": 0.0}))


@pytest.fixture(scope="module")
def module_sim(module_simulated_provider: Callable[..., SimulatedProvider],
               request: pytest.FixtureRequest) -> SimulatedProvider:
    """The provider ``sim`` returns in a module without ``SIM_PER_TEST``, for module-scoped fixtures that
    need it (``sim`` itself is per test, since it sets the environment)."""
    options = _sim_options(request.module)
    options.pop("export", None)
    return module_simulated_provider(**options)


@pytest.fixture
def sim(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> SimulatedProvider:
    """The simulated provider of a test module: the ONE ``sim`` fixture (tests/system/test_architecture.py
    refuses a module-local one). A module tunes it with two module constants:

    * ``SIM_OPTIONS``: the provider's options (default: no latency); ``export=False`` leaves
      ``EVALJOBS_SIM_URL`` alone (a provider reached only through a providers file or a client).
    * ``SIM_PER_TEST = True``: a fresh provider for each test (its counters, its 429s, its batches are the
      test's own), instead of one the module's tests share (:func:`module_sim`).

    ``EVALJOBS_SIM_URL`` points at it for the test, so the ``sim/...`` models of this process and of the
    worker processes the test starts (they inherit the environment) talk to it.
    """
    options = _sim_options(request.module)
    export = options.pop("export", True)
    if getattr(request.module, "SIM_PER_TEST", False):
        factory = request.getfixturevalue("simulated_provider")
        return factory(export=export, **options)
    provider: SimulatedProvider = request.getfixturevalue("module_sim")
    if export:
        monkeypatch.setenv("EVALJOBS_SIM_URL", provider.url)
    return provider


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """evaljobs' command line, run in this process: ``cli("run", catalog, "-m", "sim/fast")`` (see
    :class:`helpers.cli.Cli`); the ONE place a test builds click's ``CliRunner``
    (tests/system/test_architecture.py).

    A clean environment: no ``EVALJOBS_*`` variable from the shell that started pytest, no broker and no
    providers file unless the test sets one, and a database of the test's own (``cli.db``) unless
    ``EVALJOBS_DATABASE_URL`` is set already.
    """
    for name in _OUTER_EVALJOBS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name in ("EVALJOBS_BROKER_URL", "EVALJOBS_PROVIDERS"):
        if name not in os.environ:
            # set-then-delete: removed again afterwards even if a command sets it
            # (Session(providers=...) exports EVALJOBS_PROVIDERS for its in-process workers)
            monkeypatch.setenv(name, "")
            monkeypatch.delenv(name)
    if "EVALJOBS_DATABASE_URL" not in os.environ:
        monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/cli.db")
    return Cli(os.environ["EVALJOBS_DATABASE_URL"])


@pytest.fixture
def session(sqlite_url: str, sim: SimulatedProvider) -> Iterator[Any]:
    """A :class:`~evaljobs.api.Session` on the in-process broker (4 worker threads) and the test's SQLite
    database, its ``sim/...`` models answered by ``sim``."""
    from evaljobs.api import Session

    with Session(db=sqlite_url, broker="memory", width=4) as opened:
        yield opened


@pytest.fixture
def oai(sim: SimulatedProvider) -> Iterator[Any]:
    """The OpenAI SDK's client on ``sim`` (no retries: the test sees every answer)."""
    import openai

    client = openai.OpenAI(base_url=sim.url, api_key="sk-test", max_retries=0)
    yield client
    client.close()


@pytest.fixture
def ant(sim: SimulatedProvider) -> Iterator[Any]:
    """The Anthropic SDK's client on ``sim`` (no retries)."""
    import anthropic

    client = anthropic.Anthropic(base_url=sim.url[: -len("/v1")], api_key="sk-ant-test", max_retries=0)
    yield client
    client.close()


@pytest.fixture(params=["redis", "local"])
def governors(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """Build provider governors on the Redis store and on the in-process one (the parameter).

    ``governors(budget, config=None, **options)`` configures ``budget`` when a config is given; at
    teardown each governor is closed, and a Redis one must never have fallen back to its local store.
    """
    from evaljobs.governor import Governor

    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    made: list[Governor] = []

    def factory(budget: str, config: Any = None, **options: Any) -> Governor:
        governor = Governor(url, **options)
        if config is not None:
            governor.configure(budget, config)
        made.append(governor)
        return governor

    yield factory
    for governor in made:
        assert governor.backend == request.param, "the Redis governor fell back to its local store"
        governor.close()
