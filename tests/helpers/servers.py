"""Real Redis and PostgreSQL servers for the test session: throwaway, on loopback, on free ports.

The tests exercise the real parts (no fakes): these helpers start them in temp
folders and clean up after. A missing binary is an error, never a skip: a test
run that silently skips its broker or database tests proves nothing.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

STARTUP_SECONDS = 30.0


def send_json(handler, status: int, payload: object) -> None:
    """Answer a ``BaseHTTPRequestHandler`` request with ``payload`` as JSON (the tests' own providers)."""
    import json

    body = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler],
            server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer) -> Iterator[ThreadingHTTPServer]:
    """An HTTP server of the test's own (``handler`` answers) on a free loopback port, serving from a thread
    until the block ends (``http://127.0.0.1:{server.server_address[1]}``)."""
    server = server_class(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def url_of(server: ThreadingHTTPServer, path: str = "/v1") -> str:
    """The base URL of a :func:`serving` server (an OpenAI-style ``/v1`` unless told)."""
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class _ProcessServer:
    """What the servers run as a child process share: ``running``, ``restart`` and ``with``."""

    process: subprocess.Popen | None = None

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RedisServer(_ProcessServer):
    """``redis-server`` on 127.0.0.1:port with its data in a temp folder.

    ``restart()`` keeps the port and the data folder, so with ``appendonly=True``
    the data survives a restart (and a ``kill()`` up to the last fsync).
    """

    def __init__(self, *, appendonly: bool = False, port: int | None = None, host: str = "127.0.0.1") -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServerError("redis-server not found on PATH: install it (scripts/test does: "
                              "apt-get install -y redis-server)")
        self.binary = binary
        self.appendonly = appendonly
        self.host = host  # also listened on (a loopback address another network namespace routes to)
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="evaljobs-redis-"))
        self.log = self.dir / "redis.log"
        self.process: subprocess.Popen | None = None
        try:
            self.start()
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> None:
        if self.running:
            return
        listen = sorted({"127.0.0.1", self.host})
        args = [self.binary, "--port", str(self.port), "--bind", *listen, "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--dir", str(self.dir),
                "--logfile", str(self.log), "--daemonize", "no", "--protected-mode", "no"]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"redis-server exited with {self.process.returncode} on port {self.port}:\n"
                                  f"{_tail(self.log)}")
            if self.ping():
                return
            time.sleep(0.02)
        self.kill()
        raise ServerError(f"redis-server did not answer PING on port {self.port} within {STARTUP_SECONDS}s")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM): Redis flushes its append-only file first."""
        if self.running:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed."""
        if self.running:
            self.process.kill()
            self.process.wait(timeout=15)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _pg_binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if candidates:
        return candidates[-1]
    raise ServerError(f"PostgreSQL's {name} not found on PATH or under /usr/lib/postgresql/*/bin: install "
                      "postgresql (scripts/test does)")


class PostgresServer:
    """A throwaway PostgreSQL cluster (trust auth, durability off for speed) on 127.0.0.1:port.

    PostgreSQL refuses to run as root, so when we are root the cluster folder is
    owned by ``postgres`` and the server binaries run through ``runuser``.
    """

    def __init__(self, *, port: int | None = None, host: str = "127.0.0.1") -> None:
        self.host = host  # also listened on (a loopback address another network namespace routes to)
        self.initdb = _pg_binary("initdb")
        self.pg_ctl = _pg_binary("pg_ctl")
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="evaljobs-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self._as_postgres = os.geteuid() == 0
        try:
            self._init_cluster()
            self.start()
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def _init_cluster(self) -> None:
        if self._as_postgres:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise ServerError("running as root needs a 'postgres' system user to own the test "
                                  "cluster: useradd --system postgres") from None
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self._run([self.initdb, "-D", str(self.data), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
                   "--locale=C", "--no-sync"], "initdb")
        listen = ",".join(sorted({"127.0.0.1", self.host}))
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nport = {self.port}\nlisten_addresses = '{listen}'\n"
                       f"unix_socket_directories = '{self.dir}'\nfsync = off\nsynchronous_commit = off\n"
                       "full_page_writes = off\nmax_connections = 200\n")
        with open(self.data / "pg_hba.conf", "a") as hba:  # a worker in a network namespace: 127.x.y.2
            hba.write("\nhost all all 127.0.0.0/8 trust\n")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def _run(self, args: list[str], what: str) -> None:
        if self._as_postgres:
            args = ["runuser", "-u", "postgres", "--", *args]
        done = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise ServerError(f"{what} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}\n"
                              f"{_tail(self.log)}")

    def start(self) -> None:
        self._run([self.pg_ctl, "-D", str(self.data), "-l", str(self.log), "-w",
                   "-t", str(int(STARTUP_SECONDS)), "start"], "pg_ctl start")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run([self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop"], "pg_ctl stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _admin(self, sql: str) -> None:
        import psycopg2

        conn = psycopg2.connect(self.url, connect_timeout=10)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()

    def create_database(self, name: str) -> str:
        """Create database ``name`` and return its URL."""
        self._admin(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@{self.host}:{self.port}/{name}"

    def drop_database(self, name: str) -> None:
        """Drop ``name``, disconnecting whoever still uses it (a pool the test left open)."""
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rabbitmq_binary() -> str:
    for candidate in (shutil.which("rabbitmq-server"), "/usr/lib/rabbitmq/bin/rabbitmq-server"):
        if candidate and os.path.exists(candidate):
            # Debian's /usr/sbin wrapper switches to the rabbitmq user and its /var/lib folder: the
            # script it wraps runs as whoever starts it, with the folders the environment names.
            lib = "/usr/lib/rabbitmq/bin/rabbitmq-server"
            return lib if os.path.exists(lib) else candidate
    raise ServerError("rabbitmq-server not found: install it (scripts/test does: apt-get install -y "
                      "rabbitmq-server)")


class RabbitmqServer(_ProcessServer):
    """``rabbitmq-server`` on 127.0.0.1:port, its node, data, logs and Erlang cookie in a temp folder.

    Its own node name, distribution port and epmd port (``ERL_EPMD_PORT``), so it clashes with no
    RabbitMQ or Erlang node on the machine; no config or plugins file of the system's is read.
    ``restart()`` keeps the port and the data (durable queues and persistent messages survive it).
    Start-up takes seconds: one server per test session. ``host``: also listened on (a loopback address
    another network namespace routes to), as :class:`PostgresServer`'s.
    """

    #: Boots tried before giving up: a node whose Erlang distribution cannot start (``nodistribution``:
    #: its epmd or distribution port taken between :func:`free_port` and the bind; seen once under
    #: ``scripts/test --stress``, six workers starting nodes at once) exits at boot, and fresh ports boot
    #: it. Only the first start retries; a restart keeps the port the test already holds.
    BOOTS = 3

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        self.binary = _rabbitmq_binary()
        self.host = host
        self.dir = Path(tempfile.mkdtemp(prefix="evaljobs-rabbitmq-"))
        self.log = self.dir / "stdout.log"
        self.process: subprocess.Popen | None = None
        try:
            for boot in range(1, self.BOOTS + 1):
                self._configure()
                try:
                    self.start()
                    break
                except ServerError as exc:
                    if boot == self.BOOTS or not str(exc).startswith("rabbitmq-server exited"):
                        raise  # the last boot, or a node that never answered (killed): not a boot race
        except BaseException:
            self.close()
            raise

    def _configure(self) -> None:
        """Fresh ports, and the node's config and environment for them."""
        host = self.host
        self.port, self.dist_port, self.epmd_port = free_port(), free_port(), free_port()
        self.node = f"evaljobs{self.port}@localhost"
        # "default" replaces RabbitMQ's own 5672; a second listener on the link's address, if any
        listeners = f"listeners.tcp.default = 127.0.0.1:{self.port}\n" + (
            f"listeners.tcp.link = {host}:{self.port}\n" if host != "127.0.0.1" else "")
        (self.dir / "rabbitmq.conf").write_text("loopback_users = none\n" + listeners)
        (self.dir / "enabled_plugins").write_text("[].\n")
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.dir), "LANG": "C.UTF-8",
            "RABBITMQ_NODENAME": self.node, "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port), "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"), "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.dir / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(self.dir / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(self.dir / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(self.dir / "rabbitmq.pid"),
            "RABBITMQ_LOGS": str(self.dir / "log" / "rabbit.log"),
            # few schedulers: the test machine has two cores and a suite to run beside it
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "+S 2:2 +sbwt none",
        }

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    def start(self) -> None:
        if self.running:
            return
        out = open(self.log, "ab")
        self.process = subprocess.Popen([self.binary], env=self.env, cwd=self.dir, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        deadline = time.monotonic() + STARTUP_SECONDS * 2
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                logs = f"{_tail(self.log)}\n{_tail(self.dir / 'log' / 'rabbit.log')}"
                raise ServerError(f"rabbitmq-server exited with {self.process.returncode} on port "
                                  f"{self.port}:\n{logs}")
            if self.ping():
                return
            time.sleep(0.1)
        self.kill()
        raise ServerError(f"rabbitmq-server did not accept AMQP on port {self.port} within "
                          f"{STARTUP_SECONDS * 2}s:\n{_tail(self.log)}")

    def ping(self) -> bool:
        """An AMQP connection opens (the port alone listens before the node boots its apps)."""
        import pika
        import pika.exceptions

        try:
            parameters = pika.URLParameters(self.url)
            parameters.socket_timeout = parameters.blocked_connection_timeout = 2
            parameters.connection_attempts = 1
            pika.BlockingConnection(parameters).close()
            return True
        except (pika.exceptions.AMQPError, OSError):
            return False

    def delete_queues(self, *names: str) -> None:
        """Delete ``names`` and their ``.DQ``/``.XQ`` queues (a test's leftovers), if they exist."""
        self._each_queue(names, "queue_delete")

    def ready(self, name: str) -> int:
        """Ready messages of ``name`` and its ``.DQ`` queue (passive declares)."""
        import pika

        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            channel = connection.channel()
            return sum(channel.queue_declare(queue=queue, passive=True).method.message_count
                       for queue in (name, f"{name}.DQ"))
        finally:
            connection.close()

    def purge_queues(self, *names: str) -> None:
        """Drop every ready message of ``names`` and their ``.DQ``/``.XQ`` queues (messages lost)."""
        self._each_queue(names, "queue_purge")

    def _each_queue(self, names, method: str) -> None:
        import pika
        import pika.exceptions

        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            for name in names:
                for queue in (name, f"{name}.DQ", f"{name}.XQ"):
                    channel = connection.channel()
                    try:
                        getattr(channel, method)(queue)
                    except pika.exceptions.ChannelClosedByBroker:  # 404: a queue never declared
                        continue
                    channel.close()
        finally:
            connection.close()

    def stop(self) -> None:
        """SIGTERM: RabbitMQ shuts down its node (durable data on disk)."""
        if self.running:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.running:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=15)

    def close(self) -> None:
        self.stop()
        # epmd (Erlang's port mapper, started by the node on its own port) outlives the node: stop it
        epmd = shutil.which("epmd") or next(iter(glob.glob("/usr/lib/erlang/erts-*/bin/epmd")), None)
        if epmd:
            subprocess.run([epmd, "-port", str(self.epmd_port), "-kill"], env=self.env, capture_output=True,
                           timeout=15, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
