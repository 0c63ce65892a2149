"""Hostile edges (issue 16): what a hostile user or network does at the edges, against real parts.

Each test here is a row of RELIABILITY.md's "Hostile edges" table.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evaljobs import config
from evaljobs.errors import ConfigurationError
from helpers.paths import CHILD_PYTHONPATH
from helpers import RedisServer, WorkerProcess, postgres_rows, wait_until

GOOD_KEY = "k" * 32
CATALOG = """
name: edges
scenarios:
  - key: hello
    prompt: "[sim: say hi]"
    expect: {contains: [hi]}
"""


def evaljobs(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m evaljobs ARGS`` in a real process (settings are read there, from ``env``)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    full["PYTHONPATH"] = CHILD_PYTHONPATH
    full.update(env)
    return subprocess.run([sys.executable, "-m", "evaljobs", *args], env=full, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


# -- 2. context signing fails closed ---------------------------------------------------------------

@pytest.mark.parametrize("key, what", [("", "set but empty"), ("   ", "set but empty"),
                                       ("short-key", "9 bytes"), ("k" * 31, "31 bytes")])
def test_an_empty_or_short_context_key_is_refused_not_taken_for_unsigned(key, what):
    with pytest.raises(ConfigurationError) as caught:
        config.Settings.from_env({"EVALJOBS_CONTEXT_KEY": key})
    message = str(caught.value)
    assert "\n" not in message and f"EVALJOBS_CONTEXT_KEY is {what}" in message
    assert "unset the variable to run unsigned" in message
    assert key.strip() == "" or key not in message  # the (short) secret itself is never echoed


def test_only_an_unset_key_means_unsigned():
    assert config.Settings.from_env({}).context_key is None
    assert config.Settings.from_env({}).signing == "unsigned"
    assert config.Settings.from_env({"EVALJOBS_CONTEXT_KEY": GOOD_KEY}).signing == "signed"
    with pytest.raises(ConfigurationError):
        config.Settings().replace(context_key="")  # a flag or a file cannot sneak one in either


@pytest.mark.redis
@pytest.mark.parametrize("key", ["", "too-short"])
def test_worker_and_submit_refuse_to_start_with_a_bad_key(key, redis_url, tmp_path):
    db = f"sqlite:///{tmp_path}/evaljobs.db"
    (tmp_path / "c.yaml").write_text(CATALOG)
    env = {"EVALJOBS_CONTEXT_KEY": key, "EVALJOBS_DATABASE_URL": db}
    worker = evaljobs("worker", "--broker", redis_url, "--threads", "1", env=env, cwd=tmp_path)
    submit = evaljobs(
        "run", "c.yaml", "-m", "sim/a", "--broker", redis_url, "--no-wait", env=env, cwd=tmp_path
    )
    local = evaljobs("run", "c.yaml", "-m", "sim/a", env=env, cwd=tmp_path)
    for done in (worker, submit, local):
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (done.args, done.stdout, done.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: EVALJOBS_CONTEXT_KEY is "), done.stderr
        assert "Traceback" not in done.stdout + done.stderr
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        assert client.keys("*") == []  # nothing was enqueued
    finally:
        client.close()


@pytest.mark.redis
@pytest.mark.parametrize("key, line", [
    (None, "Context signing off (no signing key)"),
    (GOOD_KEY, "Context signing on: a context without a valid signature is dead-lettered"),
])
def test_a_worker_logs_once_at_start_which_signing_mode_it_is_in(key, line, redis_url, tmp_path):
    log = tmp_path / "worker.log"
    env = {"EVALJOBS_CONTEXT_KEY": key} if key else {}
    worker = WorkerProcess(redis_url, f"sqlite:///{tmp_path}/evaljobs.db", threads=1, env=env, log=log)
    if key is None:
        worker.env.pop("EVALJOBS_CONTEXT_KEY", None)
    with worker:
        assert wait_until(lambda: "Worker process is ready" in log.read_text(errors="replace"), 60), \
            log.read_text(errors="replace")
    text = log.read_text(errors="replace")
    assert text.count("Context signing ") == 1, text
    assert line in text, text


# -- 3. passwords in URLs never reach an output ---------------------------------------------------

def test_redact_masks_every_password_a_url_can_carry():
    from evaljobs.redact import redact, redact_text

    cases = {
        "redis://:PW-1@127.0.0.1:6379/0": "redis://:***@127.0.0.1:6379/0",
        "rediss://default:PW-2@h:6380/1": "rediss://default:***@h:6380/1",
        "redis://PW-3@h:1/0": "redis://***@h:1/0",  # Redis reads a lone user-info as the password
        "redis://:p@ss-PW-4@h:1/0": "redis://:***@h:1/0",  # an unencoded @ in the password
        "postgresql://bob:PW-5@localhost:5432/db?sslmode=require": "postgresql://bob:***@localhost:5432/db?sslmode=require",
        "postgresql://bob@localhost/db?password=PW-6&x=1": "postgresql://bob@localhost/db?password=***&x=1",
        "unix:///tmp/r.sock?db=1&password=PW-7": "unix:///tmp/r.sock?db=1&password=***",
        "sqlite:///tmp/x.db": "sqlite:///tmp/x.db",
        "redis://127.0.0.1:6379/0": "redis://127.0.0.1:6379/0",
        "http://example.com:8080/v1": "http://example.com:8080/v1",
        "memory": "memory",
    }
    for url, expected in cases.items():
        assert redact(url) == expected, url
    text = "Error connecting to redis://:PW-8@h:1/0; also postgresql://u:PW-9@h/db (host=h password=PW-10)"
    assert "PW-" not in redact_text(text)


def _start_redis_with_password(password: str):
    """A real redis-server of its own that requires ``password`` (the session one has none)."""
    server = RedisServer()
    import redis

    client = redis.Redis.from_url(server.url)
    try:
        client.config_set("requirepass", password)
    finally:
        client.close()
    return server


def _everything_stored(db_url: str, redis_url: str) -> dict[str, str]:
    """Every row of every table (PostgreSQL) and every Redis key and value, as text."""
    import redis

    places = postgres_rows(db_url)
    client = redis.Redis.from_url(redis_url)
    try:
        for key in client.scan_iter(count=1000):
            try:
                value = repr(client.dump(key))
            except redis.ResponseError:
                value = ""
            places[f"redis {key!r}"] = repr(key) + value
    finally:
        client.close()
    return places


@pytest.mark.redis
@pytest.mark.postgres
def test_no_command_prints_logs_or_stores_a_redis_or_postgres_password(postgres_server, tmp_path):
    """Recognisable passwords on the broker's Redis (requirepass) and the database role; every command's
    output, the worker's log and everything stored is searched for them."""
    import secrets

    import psycopg2

    from evaljobs.simulated import SimulatedProvider

    redis_password = "REDISPW" + secrets.token_hex(6)
    pg_password = "PGPW" + secrets.token_hex(6)
    if not postgres_server.running:
        postgres_server.start()
    name = f"test_{secrets.token_hex(6)}"
    base = postgres_server.create_database(name)
    role = f"edge_{secrets.token_hex(4)}"
    admin = psycopg2.connect(postgres_server.url)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} LOGIN PASSWORD %s", (pg_password,))
        cursor.execute(f'ALTER DATABASE "{name}" OWNER TO {role}')
    admin.close()
    # The session cluster trusts loopback, so the password is not checked by the server; it is in
    # every URL evaljobs handles, which is what must never be shown.
    db_url = base.replace("postgres@", f"{role}:{pg_password}@", 1) if "postgres@" in base else base
    assert pg_password in db_url, base
    server = _start_redis_with_password(redis_password)
    broker = server.url.replace("redis://", f"redis://:{redis_password}@", 1)
    wrong = server.url.replace("redis://", f"redis://:{redis_password}-WRONG@", 1)
    (tmp_path / "c.yaml").write_text(CATALOG.replace("hello", "hello") + """
  - key: broken
    prompt: "[sim: status 503 down]"
""")
    sim = SimulatedProvider().start()
    env = {"EVALJOBS_DATABASE_URL": db_url, "EVALJOBS_BROKER_URL": broker, "EVALJOBS_SIM_URL": sim.url,
           "EVALJOBS_MAX_RETRIES": "0"}
    outputs: dict[str, str] = {}

    def cmd(label: str, *args: str, expect: int | None = 0) -> subprocess.CompletedProcess:
        done = evaljobs(*args, env=env, cwd=tmp_path)
        outputs[label] = done.stdout + "\n" + done.stderr
        if expect is not None:
            assert done.returncode == expect, (label, done.stdout, done.stderr)
        return done

    log = tmp_path / "worker.log"
    worker = WorkerProcess(broker, db_url, threads=2, log=log, env=env)
    try:
        with worker:
            waited = cmd(
                "run --wait (redis)",
                "run",
                "c.yaml",
                "-m",
                "sim/a",
                "--strategy",
                "fanout",
                "--wait",
                expect=None,
            )
            assert waited.returncode in (0, 1), outputs
            queued = cmd("run --no-wait (redis)", "run", "c.yaml", "-m", "sim/a", "--strategy", "fanout",
                         "--no-wait")
            run_id = queued.stdout.strip().splitlines()[-1]
            cmd("watch", "watch", run_id, expect=None)
            cmd("run (memory)", "run", "c.yaml", "-m", "sim/a", "--broker", "memory", expect=None)
            cmd("rerun --wait (redis)", "rerun", run_id, "--errored", "--wait", expect=None)
            cmd("rerun --no-wait (redis)", "rerun", run_id, "--all", "--no-wait", expect=None)
            cmd("recover", "recover", expect=None)
            # The commands that only read, a few at a time (each is a process of its own).
            reads = {"status": ("status",), "runs": ("runs",), "show": ("show", run_id),
                     "governor": ("governor",)}
            reads.update({f"report --format {fmt}": ("report", run_id, "--format", fmt)
                          for fmt in ("table", "json", "markdown", "junit", "html")})
            with ThreadPoolExecutor(max_workers=3) as pool:
                list(pool.map(lambda item: cmd(item[0], *item[1], expect=None), reads.items()))
        env_wrong = dict(env, EVALJOBS_BROKER_URL=wrong)
        for label, args in {"run (wrong password)": ("run", "c.yaml", "-m", "sim/a", "--no-wait"),
                            "worker (wrong password)": ("worker", "--threads", "1"),
                            "status (wrong password)": ("status",)}.items():
            done = evaljobs(*args, env=env_wrong, cwd=tmp_path)
            outputs[label] = done.stdout + "\n" + done.stderr
            assert done.returncode != 0, (label, done.stdout, done.stderr)
        stored = _everything_stored(db_url, broker)
    finally:
        sim.stop()
        server.close()
        if postgres_server.running:
            postgres_server.drop_database(name)
    outputs["worker log"] = log.read_text(errors="replace")
    # the search looks at real output
    assert "***@" in outputs["run --wait (redis)"], outputs["run --wait (redis)"]
    for place, text in {**outputs, **stored}.items():
        for password in (redis_password, pg_password):
            assert password not in text, f"{password} leaked in {place}: {text[:2000]}"


# -- 7. a killed worker's pairs come back fast; a live, slow worker keeps its pairs -------------------

SLOW = """
name: slow
scenarios:
  - key: slow
    prompt: "[sim: sleep {seconds}] [sim: say done]"
    expect: {{contains: [done]}}
"""


def _slow_run(tmp_path: Path, seconds: float, db: str, broker: str, sim_url: str) -> str:
    (tmp_path / "slow.yaml").write_text(SLOW.format(seconds=seconds))
    env = {"EVALJOBS_DATABASE_URL": db, "EVALJOBS_BROKER_URL": broker, "EVALJOBS_SIM_URL": sim_url}
    done = evaljobs(
        "run", "slow.yaml", "-m", "sim/a", "--strategy", "fanout", "--no-wait", env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _recorded(db: str, run_id: str) -> list:
    from evaljobs import store

    store.connect(db)
    return store.list_results(run_id)


@pytest.mark.redis
def test_a_live_worker_busy_with_a_long_call_keeps_its_pair(redis_url, tmp_path):
    """Adversarial: heartbeat timeout 2 s, maintenance on *every* broker command, a call of 8 s (4 timeouts)
    on a worker whose only thread is busy; a second worker polls all along. The pair is called once."""
    import time

    from evaljobs.simulated import SimulatedProvider

    db = f"sqlite:///{tmp_path}/evaljobs.db"
    hostile = {"EVALJOBS_HEARTBEAT_TIMEOUT_MS": "2000", "EVALJOBS_MAINTENANCE_CHANCE": "1000000"}
    with SimulatedProvider() as sim:
        env = dict(hostile, EVALJOBS_SIM_URL=sim.url)
        busy = WorkerProcess(redis_url, db, threads=1, env=env, log=tmp_path / "busy.log")
        other = WorkerProcess(redis_url, db, threads=2, env=env, log=tmp_path / "other.log")
        with busy:
            run_id = _slow_run(tmp_path, 8, db, redis_url, sim.url)
            assert wait_until(lambda: sim.stats()["requests"] >= 1, 60), (tmp_path / "busy.log").read_text()
            started = time.monotonic()
            with other:
                assert wait_until(lambda: len(_recorded(db, run_id)) == 1, 60), (
                    tmp_path / "other.log"
                ).read_text()
                held = time.monotonic() - started
        results = _recorded(db, run_id)
        assert [r.status for r in results] == ["passed"], results
        assert sim.stats()["requests"] == 1, sim.stats()  # never handed to the polling worker
    print(f"RELIABILITY live slow worker: 8 s call, heartbeat timeout 2 s, maintenance every command: "
          f"kept its pair for {held:.1f} s; 1 provider call")


def _holder(client, namespace: str = "dramatiq") -> tuple[str, float]:
    """The evaljobs process whose ack set holds a message, and its last beat (ms, its own clock)."""
    for worker, beat in client.zrange(f"{namespace}:__evaljobs_heartbeats__", 0, -1, withscores=True):
        queues = (client.hget(f"{namespace}:__evaljobs_queues__", worker) or b"").decode()
        if any(client.scard(f"{namespace}:__acks__.{worker.decode()}.{q}") for q in queues.split(",") if q):
            return worker.decode(), beat
    raise AssertionError("no evaljobs process holds a message")


def _scout_until(client) -> float:
    """When the cold budget's scout window closes (Redis seconds; 0: no scout pending)."""
    for key in client.scan_iter("*:state"):  # the test owns this Redis
        if client.type(key) == b"hash" and client.hexists(key, "scout_until"):
            return float(client.hget(key, "scout_until") or 0)
    return 0.0


@pytest.mark.redis
def test_a_sigkilled_workers_pair_is_redelivered_with_the_default_heartbeat(redis_url, tmp_path):
    """Default heartbeat timeout and maintenance chance (not the tests' short ones): a worker holding a pair
    is SIGKILLed; a live worker's beat hands the pair back once the dead one's last beat is a timeout old
    (the documented rule, checked on the heartbeats in Redis), and it reaches the provider when the
    governor lets it: the killed call was the cold budget's scout, so not before the scout window closes
    (``SCOUT_SECONDS`` after it opened). Recorded once. The figures are printed, not asserted."""
    import time

    import redis as redis_lib

    from evaljobs.simulated import SimulatedProvider

    db = f"sqlite:///{tmp_path}/evaljobs.db"
    timeout_ms = config.Settings().heartbeat_timeout_ms
    client = redis_lib.Redis.from_url(redis_url)
    with SimulatedProvider() as sim:
        workers = []
        for name in ("victim", "survivor"):
            worker = WorkerProcess(redis_url, db, threads=1, env={"EVALJOBS_SIM_URL": sim.url},
                                   log=tmp_path / f"{name}.log")
            for setting in ("EVALJOBS_HEARTBEAT_TIMEOUT_MS", "EVALJOBS_MAINTENANCE_CHANCE"):
                worker.env.pop(setting, None)  # the defaults are what this test measures
            workers.append(worker)
        victim, survivor = workers
        victim.start()
        try:
            run_id = _slow_run(tmp_path, 3, db, redis_url, sim.url)
            assert wait_until(lambda: sim.stats()["requests"] >= 1, 60), (tmp_path / "victim.log").read_text()
            victim.kill()
            killed = time.time()
            dead, last_beat_ms = _holder(client)
            scout_until = _scout_until(client)
            with survivor:
                forgotten = "dramatiq:__evaljobs_heartbeats__"
                assert wait_until(lambda: client.zscore(forgotten, dead) is None, 90), (
                    tmp_path / "survivor.log").read_text()
                handed_back = time.time()
                assert wait_until(lambda: sim.stats()["requests"] >= 2, 90), (
                    tmp_path / "survivor.log").read_text()
                called = time.time()
                assert wait_until(lambda: len(_recorded(db, run_id)) == 1, 60)
        finally:
            victim.kill()
            client.close()
        results = _recorded(db, run_id)
        assert [r.status for r in results] == ["passed"], results
        assert sim.stats()["requests"] == 2
    log = (tmp_path / "survivor.log").read_text()
    # of 1 or 2 processes: the `run` that submitted (it beat as it enqueued) may be reaped in the same beat
    assert re.search(rf"handed back 1 unacked message\(s\) of [12] worker process\(es\) silent for more than "
                     rf"{timeout_ms} ms", log), log[-3000:]
    # The rule, not a race: the hand-back came after the dead process was silent for the timeout (seen
    # after it happened), and the provider call after the scout window the dead call had opened.
    assert handed_back * 1000 - last_beat_ms >= timeout_ms
    assert scout_until > 0 and called >= scout_until, scout_until
    print(f"RELIABILITY SIGKILLed worker, default heartbeat {timeout_ms} ms: last beat "
          f"{killed - last_beat_ms / 1000:.1f} s before the kill; handed back {handed_back - killed:.1f} s "
          f"after the kill ({handed_back - last_beat_ms / 1000:.1f} s after the last beat); scout window "
          f"closed {scout_until - killed:.1f} s after the kill; provider called {called - killed:.1f} s "
          "after it")


# -- 4. YAML alias bombs -------------------------------------------------------------------------

def _bomb(levels: int, indent: str = "  ") -> str:
    """``levels`` lines of ten aliases each: 10**levels strings once expanded, in a few hundred bytes."""
    lines = [f'{indent}a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


LIMITED = "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); " \
          "sys.argv = ['evaljobs'] + sys.argv[1:]; runpy.run_module('evaljobs', run_name='__main__')"


def _check_limited(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """``evaljobs ARGS`` under a 1 GB address-space limit; returns the process and its peak RSS in MB."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    env["PYTHONPATH"] = CHILD_PYTHONPATH
    done = subprocess.run([sys.executable, "-c", LIMITED, *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return done, max(peak, before) / 1024


@pytest.mark.parametrize("levels", [8, 10])
def test_a_catalog_alias_bomb_is_refused_in_one_line(levels, tmp_path):
    bomb = "name: bomb\nscenarios:\n  - key: x\n    prompt: hi\n    vars:\n" + _bomb(levels, "      ")
    (tmp_path / "bomb.yaml").write_text(bomb)
    assert len(bomb) < 1000
    done, peak_mb = _check_limited(tmp_path, "catalog", "check", "bomb.yaml")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: bomb.yaml:"), done.stderr
    assert "expands to more than 5,000,000 values" in lines[0] and "alias bomb" in lines[0]
    print(
        f"RELIABILITY YAML bomb 10^{levels} strings in {len(bomb)} bytes: refused, peak RSS {peak_mb:.0f} MB"
    )


def test_an_import_alias_bomb_is_refused_in_one_line(tmp_path):
    config_text = ("prompts: ['{{q}}']\nproviders: [openai:gpt-4o-mini]\ndefaultTest:\n  vars:\n"
                   + _bomb(9, "    ") + "tests:\n  - vars: {q: hi}\n")
    (tmp_path / "promptfooconfig.yaml").write_text(config_text)
    done, _ = _check_limited(tmp_path, "catalog", "check", "promptfooconfig.yaml", "--format", "promptfoo")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "promptfooconfig.yaml:" in lines[0] and "alias bomb" in lines[0], done.stderr


def test_aliases_a_real_catalog_uses_stay_well_inside_the_bounds():
    """10,000 scenarios sharing one tool list by alias: loaded, not mistaken for a bomb."""
    from evaljobs.catalog import loads_catalog

    tool = (
        "[{name: lookup, parameters: {type: object, properties: {id: {type: string}}}, returns: {ok: true}}]"
    )
    first = f"  - key: s0\n    prompt: hello\n    tools: &tools {tool}\n"
    rest = "".join(f"  - key: s{i}\n    prompt: hello {i}\n    tools: *tools\n" for i in range(1, 10_000))
    catalog = loads_catalog("name: big\nscenarios:\n" + first + rest, source="big.yaml")
    assert len(catalog.scenarios) == 10_000


# -- 5. a full disk under SQLite ------------------------------------------------------------------

@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MB tmpfs (needs CAP_SYS_ADMIN: root in a container that may mount); unmounted afterwards."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): the disk-full "
                    "test needs a small filesystem to fill")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_one_line_naming_the_database_and_the_database_stays_intact(small_tmpfs, tmp_path):
    big = "name: fill\nscenarios:\n" + "".join(
        f"  - key: s{i}\n    prompt: \"[sim: say {'x' * 2000} {i}]\"\n    expect: {{contains: [x]}}\n"
        for i in range(400))
    (tmp_path / "big.yaml").write_text(big)
    (tmp_path / "small.yaml").write_text(CATALOG)
    db = f"sqlite:///{small_tmpfs}/evaljobs.db"
    env = {"EVALJOBS_DATABASE_URL": db}
    first = evaljobs("run", "small.yaml", "-m", "sim/a", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr  # a database that works, with one run in it
    full = evaljobs("run", "big.yaml", "-m", "sim/a", env=env, cwd=tmp_path)  # its snapshot does not fit
    lines = full.stderr.strip().splitlines()
    assert full.returncode != 0 and "Traceback" not in full.stderr, full.stderr
    assert len(lines) == 1, full.stderr
    assert lines[0].startswith(f"error: database {db}: database or disk is full"), lines[0]
    import sqlite3

    connection = sqlite3.connect(f"{small_tmpfs}/evaljobs.db")
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        # the failed run left nothing
        assert connection.execute("SELECT count(*) FROM run").fetchone() == (1,)
    finally:
        connection.close()
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)], check=True)  # space freed
    again = evaljobs("run", "big.yaml", "-m", "sim/a", "--width", "4", env=env, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]


@pytest.mark.parametrize("strategy", ["fanout", "threads"])
def test_a_disk_that_fills_mid_run_ends_the_command_in_one_line_and_recover_finishes_the_run(
    strategy, small_tmpfs, tmp_path
):
    """The disk fills while pairs are being recorded (default ``run``: fanout on the in-process broker).

    The command ends with one line naming the database and the cause (no tracebacks, no retry storm),
    the database stays intact with the run ``running`` and some pairs missing; once space is freed,
    ``evaljobs recover RUN`` evaluates the missing pairs itself (the memory broker has no other
    worker) and waits for the report.
    """
    import sqlite3
    import time

    pairs = 300
    (tmp_path / "fill.yaml").write_text("name: fill\nscenarios:\n" + "".join(
        f"  - key: s{i}\n    prompt: \"[sim: say {'y' * 2000} {i}]\"\n    expect: {{contains: [y]}}\n"
        for i in range(pairs)))
    subprocess.run(["mount", "-o", "remount,size=2500k", str(small_tmpfs)], check=True)
    db = f"sqlite:///{small_tmpfs}/evaljobs.db"
    env = {"EVALJOBS_DATABASE_URL": db}
    started = time.monotonic()
    full = evaljobs("run", "fill.yaml", "-m", "sim/a", "--strategy", strategy, "--width", "8", env=env,
                    cwd=tmp_path, timeout=300)
    took = time.monotonic() - started
    output = full.stdout + full.stderr
    assert full.returncode == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    # Progress lines aside ("run …", "[ n/300] …"), the command says one thing: the error, last. Before
    # it, at most one log line per pair that was in flight when the disk filled (each refused once,
    # never retried): the 8 worker threads and what they had fetched, not a retry storm.
    said = [line for line in full.stderr.strip().splitlines() if not line.startswith(("[", "run "))]
    assert said[-1].startswith(f"error: database {db}: database or disk is full"), said[-1]
    assert "evaljobs recover RUN" in said[-1]
    refused = said[:-1]
    assert all(
        line.startswith("Refused message ") and "database or disk is full" in line for line in refused
    ), refused
    assert len(refused) <= 16, len(refused)
    connection = sqlite3.connect(f"{small_tmpfs}/evaljobs.db")
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        ((run_id, status),) = connection.execute("SELECT id, status FROM run").fetchall()
        (stored,) = connection.execute("SELECT count(*) FROM result").fetchone()
    finally:
        connection.close()
    assert status == "running" and 0 < stored < pairs, (status, stored)
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)], check=True)  # space freed
    recovered = evaljobs("recover", run_id, env=env, cwd=tmp_path, timeout=300)
    assert recovered.returncode == 0, (recovered.stdout + recovered.stderr)[-3000:]
    assert "Traceback" not in recovered.stdout + recovered.stderr
    connection = sqlite3.connect(f"{small_tmpfs}/evaljobs.db")
    try:
        assert connection.execute("SELECT status FROM run").fetchone() == ("complete",)
        assert connection.execute("SELECT count(*), count(DISTINCT scenario_key) FROM result").fetchone() == (
            pairs, pairs)
        assert connection.execute("SELECT report IS NOT NULL FROM run").fetchone() == (1,)
    finally:
        connection.close()
    print(
        f"RELIABILITY disk full mid-run ({strategy}): 2.5 MB tmpfs, {pairs} pairs: command ended after "
        f"{took:.1f} s with one line ({len(refused)} in-flight pairs refused once each), {stored} pairs "
        "stored, run running, integrity ok; after space was freed `recover` completed "
        f"it ({pairs} pairs, once each)"
    )
