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
import time
from pathlib import Path

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


class RedisServer:
    """``redis-server`` on 127.0.0.1:port with its data in a temp folder.

    ``restart()`` keeps the port and the data folder, so with ``appendonly=True``
    the data survives a restart (and a ``kill()`` up to the last fsync).
    """

    def __init__(self, *, appendonly: bool = False, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServerError("redis-server not found on PATH: install it (scripts/test does: "
                              "apt-get install -y redis-server)")
        self.binary = binary
        self.appendonly = appendonly
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
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if self.running:
            return
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
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

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

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

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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

    def __init__(self, *, port: int | None = None) -> None:
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
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{self.dir}'\nfsync = off\nsynchronous_commit = off\n"
                       "full_page_writes = off\nmax_connections = 200\n")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

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
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

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
