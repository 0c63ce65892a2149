"""What ``evaljobs view`` was started with, and where its templates and static files are.

Its own module so that the app (which imports the routes and the live pages when it is
built) and the routes and live pages (which need the configuration) do not import each
other.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from evaljobs.config import state_redis
from evaljobs.view.streams import StreamLimits

HERE = Path(__file__).resolve().parent
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class ViewConfig:
    """What ``evaljobs view`` was started with."""

    broker: str | None = None
    token: str | None = None
    host: str = "127.0.0.1"
    port: int = 8700
    #: Seconds between database reads of a live page when no Redis events wake it.
    poll_seconds: float = 1.0
    #: Bounds on live streams (how many, bytes queued per client, when a slow one is dropped).
    stream_limits: StreamLimits = field(default_factory=StreamLimits)
    #: ``--read-only``: every write (a label) is refused, and no page offers one.
    read_only: bool = False
    #: The secret a session must have logged in with (``?token=`` once) to write: ``token`` when one is
    #: set, else one the viewer made at start (a loopback viewer's reads need none, its writes do).
    write_token: str | None = None
    #: The name a label is given under when the reviewer gives none.
    reviewer: str = "viewer"
    #: Key of the per-session CSRF tokens (HMAC of the session cookie): new with every start.
    csrf_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    @property
    def writes(self) -> bool:
        """Whether this viewer takes writes at all (a session still needs the write token)."""
        return not self.read_only and bool(self.write_token)

    @property
    def redis_url(self) -> str | None:
        # the broker's Redis, or the state Redis beside RabbitMQ (EVALJOBS_REDIS_URL)
        return state_redis(self.broker)


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")
