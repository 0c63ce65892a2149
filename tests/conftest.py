"""Session-wide real servers (started only when a test asks) and per-test URLs.

What tests share that is not a fixture (fleets of workers, catalog builders, server
classes) is in ``tests/helpers/``.
"""
from __future__ import annotations

import uuid

import pytest

from helpers.servers import PostgresServer, RedisServer, ServerError


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False, help="also run the long soak variants")


def pytest_configure(config: pytest.Config) -> None:
    for line in ("redis: needs a real redis-server (started by the test session)",
                 "postgres: needs a real PostgreSQL cluster (started by the test session)",
                 "slow: long soak variants, run with --soak"):
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    opt_in = pytest.mark.skip(reason="soak variant: run with --soak")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(opt_in)


@pytest.fixture(scope="session")
def redis_server():
    try:
        server = RedisServer()
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.close()


@pytest.fixture(scope="session")
def postgres_server():
    try:
        server = PostgresServer()
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.close()


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
