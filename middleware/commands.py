"""Redis commands on a connection the calling thread keeps: the per-message round trips, cheaper.

Why: redis-py spends ~130 µs of client CPU on every command it sends through its pool (it checks
the connection out and back in, checks it for stale data with a ``select``, runs its retry and
observability wrappers), for a round trip that costs the socket and the parser ~40 µs. A worker
thread makes a few such round trips per message (the crash counter's start, the ack); at zero
provider latency, where a message costs a few milliseconds of CPU, that overhead is a tenth of it.

So a worker thread takes one connection from the client's pool for its life and sends its
per-message commands on it, several in one round trip when it has several. Before each use it is
checked as the pool checks a connection it hands out (closed by the server: connected again). A command that
meets a connection error drops that connection (disconnected and handed back to the pool) and raises: the
caller decides as it did before (the next call connects again). Error replies come back as exception values,
one per command, so a pipelined command's error never hides the others' replies.

Generic: imports nothing from the application.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any

# redis is imported where it is used: the crash counter imports this module, and a process on the
# in-process broker never loads the Redis client (start-up time; tests/cli/test_import_budget.py).


class ThreadCommands:
    """Commands sent on this thread's own connection from ``client``'s pool."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        self._local = threading.local()

    def execute(self, *commands: tuple, timeout: float | None = None) -> list[Any]:
        """Send ``commands`` (each a tuple of arguments) in one round trip; their replies, in order.

        An error reply is returned as its exception; a connection error is raised (after the
        connection is dropped). ``timeout``: the longest wait (seconds) for each reply; past it the
        connection is dropped and ``redis.TimeoutError`` raised. Why: a blocking command (``BLMOVE``)
        waits on a socket that a lost route never closes; without a socket timeout it would wait for
        TCP to give up (minutes).
        """
        held = getattr(self._local, "held", None)
        # a fork copies this thread's locals, not its socket's owner
        if held is None or held.pid != os.getpid():
            held = self._local.held = _Held(self._pool)
        connection = held.connection
        import redis

        try:
            _ready(connection)
            connection.send_packed_command(
                [b"".join(pack(command) for command in commands)], check_health=False
            )
            replies: list[Any] = []
            for _ in commands:
                if timeout is not None and not connection.can_read(timeout=timeout):
                    raise redis.TimeoutError(f"no reply from Redis within {timeout:g} s")
                try:
                    replies.append(connection.read_response())
                except redis.ResponseError as error:
                    replies.append(error)
            return replies
        except BaseException:
            self._local.held = None
            held.drop()
            raise


class _Held:
    """A connection a thread keeps, handed back to its pool when the thread ends.

    Why: worker threads come and go (an elastic pool grows and shrinks its members); a thread's
    locals are dropped when it ends, and with them this object, whose finalizer gives the connection
    back — otherwise every ended thread would leave an open socket checked out of the pool for the
    life of the process. A fork's copy (another pid) is never handed back: the parent owns it.
    """

    __slots__ = ("pool", "connection", "pid")

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.pid = os.getpid()
        # set first: when Redis is down get_connection raises, and the finalizer of this half-made
        # object must find nothing to give back (it printed an AttributeError traceback per attempt)
        self.connection: Any = None  # a redis Connection once the pool gives one
        self.connection = pool.get_connection()

    def drop(self) -> None:
        """Disconnect and hand back now (after an error); the finalizer then does nothing."""
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.disconnect()
            self.pool.release(connection)

    def __del__(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None and self.pid == os.getpid():
            try:
                self.pool.release(connection)
            except Exception:  # interpreter shutdown, a pool already closed: nothing to give back to
                pass


def pack(command: tuple) -> bytes:
    """One command in RESP, as redis-py packs it for the argument types sent here (bytes, str, int,
    float), at a fraction of its CPU (its packer handles every type, memoryviews and large values)."""
    parts = [b"*%d\r\n" % len(command)]
    for arg in command:
        kind = type(arg)  # the exact types first: a crash counter start packs ~20 arguments a pair
        if kind is bytes:
            data = arg
        elif kind is str:
            data = arg.encode()
        elif kind is int or kind is float:
            data = repr(arg).encode()
        elif isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
            data = repr(arg).encode()
        else:
            import redis

            raise redis.DataError(f"invalid argument of type {type(arg).__name__}: bytes, str, int or float")
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _ready(connection: Any) -> None:
    """What the pool checks when it hands a connection out, done before each use of a kept one: a
    socket with data to read before a command was sent was closed by the server (a restart, an idle
    timeout) or left a reply unread; connect it again. Never a command sent twice."""
    import redis

    try:
        connection.connect()  # a no-op when connected; after a drop, connects again
        stale = connection.can_read()
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        stale = True
    if stale:
        connection.disconnect()
        connection.connect()


def is_noscript(reply: Any) -> bool:
    """Whether ``reply`` is Redis's NOSCRIPT error (an ``EVALSHA`` of a script it does not hold)."""
    import redis

    return isinstance(reply, redis.exceptions.NoScriptError)


_by_client: "weakref.WeakKeyDictionary[Any, ThreadCommands]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def thread_commands(client: Any) -> ThreadCommands:
    """The :class:`ThreadCommands` of ``client`` (one per client, shared by its users in the process)."""
    commands = _by_client.get(client)
    if commands is None:
        with _lock:
            commands = _by_client.get(client)
            if commands is None:
                commands = _by_client[client] = ThreadCommands(client)
    return commands


__all__ = ["ThreadCommands", "thread_commands", "is_noscript", "pack"]
