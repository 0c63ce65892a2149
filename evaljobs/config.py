"""One configuration: every setting evaljobs reads from the environment, read in one place.

Why one place: a worker evaluates thousands of pairs, and a setting read from
``os.environ`` deep in the hot path is both slow and invisible (which variables
matter? which flag wins?). :class:`Settings` is built once — from the
environment, then command-line flags and files on top (:meth:`Settings.replace`)
— and passed down. No other module reads or writes ``os.environ``
(``tests/system/test_architecture.py`` checks it); the two exceptions are here too:
:func:`secret` reads a named API-key or header variable at call time (so a
rotated key is picked up without a restart and never lands in ``Settings``),
and :func:`child_environment` builds the environment of a worker process.

Process-wide: :func:`settings` returns this process's settings (built on first
use); :func:`configure` replaces them (the CLI after parsing flags, a worker at
boot, a test). Code that takes a ``Settings`` argument should prefer it.

The per-run options ``Settings`` is partly derived from are declared in :mod:`evaljobs.run_options`
(re-exported here, where callers found them); this module reads their variables.
"""
from __future__ import annotations

import dataclasses
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from evaljobs.errors import ConfigurationError
from evaljobs.redact import password_of, redact, register_secret
from evaljobs.run_options import MAX_SECONDS as MAX_SECONDS
from evaljobs.run_options import RUN_LIMITS, RUN_OPTIONS, RunOption, check_number, run_option

#: URL schemes that name a Redis server (broker, governor, events).
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
#: URL schemes that name a RabbitMQ server (the broker only: its shared state lives in a Redis).
AMQP_SCHEMES = ("amqp://", "amqps://")
#: Broker URLs shared by several machines (``memory`` is one process's own).
SHARED_BROKER_SCHEMES = REDIS_SCHEMES + AMQP_SCHEMES
DEFAULT_QUEUE = "agents"
_FALSE = ("off", "0", "false", "no")
_TRUE = ("on", "1", "true", "yes")
LOG_FORMATS = ("text", "json")
#: Shortest context signing key accepted (bytes): an HMAC-SHA256 key shorter than its output
#: is guessable sooner than the signature, and an empty one means "signing off" to no one.
MIN_CONTEXT_KEY_BYTES = 32
#: Crashed workers a pair may cost by default (evaljobs_middleware.crashes.DEFAULT_MAX_CRASHES).
DEFAULT_MAX_CRASHES = 3


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "")
    if text.strip() == "":
        return default
    try:
        return float(text)
    except ValueError:
        raise ConfigurationError(f"{name}={text!r} is not a number") from None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "")
    if text.strip() == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ConfigurationError(f"{name}={text!r} is not a whole number") from None


def _port(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name, "")
    return None if text.strip() == "" else _int(env, name, 0)


def resolve(name: str, stored: Mapping[str, Any], own: Settings) -> Any:
    """A run option's value for a pair: the one stored with its run, else this process's."""
    value = stored.get(name)
    return getattr(own, name) if value is None else value


#: Settings fields that are numbers: (label, lowest, highest, lowest excluded, whole number).
_NUMBERS: dict[str, tuple[str, float, float, bool, bool]] = {
    "db_reconnect_seconds": ("EVALJOBS_DB_RECONNECT_SECONDS", 0, MAX_SECONDS, False, False),
    "permit_wait": ("EVALJOBS_PERMIT_WAIT", 0, MAX_SECONDS, False, False),
    **{o.name: (str(o.env), float(o.low or 0), float(o.high or 0), o.low_open, o.kind is int)
       for o in RUN_LIMITS},
    "heartbeat_timeout_ms": ("EVALJOBS_HEARTBEAT_TIMEOUT_MS", 1, MAX_SECONDS * 1000, False, True),
    "maintenance_chance": ("EVALJOBS_MAINTENANCE_CHANCE", 0, 1_000_000, False, True),
    "recover_every": ("EVALJOBS_RECOVER_EVERY", 0, MAX_SECONDS, False, False),
    "sim_latency": ("EVALJOBS_SIM_LATENCY", 0, 3600, False, False),
    "sim_jitter": ("EVALJOBS_SIM_JITTER", 0, 3600, False, False),
}


def _text(env: Mapping[str, str], name: str) -> str | None:
    return env.get(name) or None


_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _words(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A list setting: the variable's values, separated by commas or white space."""
    return tuple(word for word in re.split(r"[,\s]+", env.get(name, "")) if word)


@dataclass(frozen=True)
class Settings:
    """Every setting, with its environment variable and default (see the environment list in docs/cli.md)."""

    database_url: str | None = None          # EVALJOBS_DATABASE_URL (None: .evaljobs/evaljobs.db)
    db_reconnect_seconds: float = 60.0       # EVALJOBS_DB_RECONNECT_SECONDS
    broker_url: str | None = None            # EVALJOBS_BROKER_URL (None: the in-process broker)
    queue: str = DEFAULT_QUEUE               # EVALJOBS_QUEUE
    providers_path: str | None = None        # EVALJOBS_PROVIDERS
    # EVALJOBS_CONTEXT_KEY (None: unsigned); a secret
    context_key: str | None = field(default=None, repr=False)
    governor: bool = True                    # EVALJOBS_GOVERNOR (off/0/false/no)
    governor_url: str | None = None          # EVALJOBS_GOVERNOR_URL (None: the state Redis)
    # The Redis that holds what is shared beyond a queue (the governor's budgets, run events for
    # `watch` and the viewer, worker status) when the broker is RabbitMQ; a Redis broker is its own.
    redis_url: str | None = None             # EVALJOBS_REDIS_URL
    lane: str | None = None                  # EVALJOBS_LANE (interactive | bulk)
    permit_wait: float = 2.0                 # EVALJOBS_PERMIT_WAIT
    cache_ttl: str | None = None             # EVALJOBS_CACHE_TTL (a duration: 3600, 12h, 7d)
    # The per-run options (``RUN_OPTIONS``: variable, default, bounds), typed here.
    max_retries: int = run_option("max_retries").default
    min_backoff: float = run_option("min_backoff").default
    max_backoff: float = run_option("max_backoff").default
    max_rate_limit_waits: int = run_option("max_rate_limit_waits").default
    time_limit: float = run_option("time_limit").default  # seconds per pair
    # Crashed worker processes a pair may cost before it is recorded errored without running: the
    # variable's text, read as a number by crash_limit() where the crash counter is built.
    max_crashes: str | None = None           # EVALJOBS_MAX_CRASHES
    # How long a worker process may be silent on Redis before its unacked pairs go to others (Dramatiq's
    # 60 s made a SIGKILLed worker's pairs wait 66-72 s). A live process beats every fifth of it (2 s)
    # from its consumers' loops, and each beat hands back the pairs of processes silent for longer
    # (pipeline/heartbeats.py, no KEYS): 12 s at most after the last beat. Dramatiq's own maintenance
    # (KEYS on a dead worker's ack sets, on a chance per million commands) is off unless the chance is
    # set. See RELIABILITY.md.
    heartbeat_timeout_ms: int = 10000        # EVALJOBS_HEARTBEAT_TIMEOUT_MS
    maintenance_chance: int = 0              # EVALJOBS_MAINTENANCE_CHANCE (per million broker commands)
    recover_every: float = 0.0               # EVALJOBS_RECOVER_EVERY (0: no periodic recovery)
    sim_url: str | None = None               # EVALJOBS_SIM_URL (None: start one in-process)
    sim_latency: float = 0.05                # EVALJOBS_SIM_LATENCY
    sim_jitter: float = 0.02                 # EVALJOBS_SIM_JITTER
    middleware: str | None = None  # EVALJOBS_MIDDLEWARE (host middleware: module:Class,module:Class)
    # Fan-out pairs per message (1: one message per pair); each pair is still its own row and count.
    # None (unset): one, or several for a provider known to be fast (evaljobs.pipeline.message_size).
    pairs_per_message: int | None = run_option("pairs_per_message").default  # EVALJOBS_PAIRS_PER_MESSAGE
    # Keep each provider call's raw request and response with its result (redacted; the viewer's
    # transcript shows them). Off by default: they repeat the conversation on every turn.
    store_transcripts: bool = False          # EVALJOBS_STORE_TRANSCRIPTS (on/1/true/yes; run --trace-content)
    # Operating the fleet (docs/operations.md): Prometheus metrics, health probes, traces, logs.
    metrics_port: int | None = None          # EVALJOBS_METRICS_PORT (None: no metrics)
    metrics_host: str = "127.0.0.1"          # EVALJOBS_METRICS_HOST (also the health probes' address)
    metrics_dir: str | None = None           # PROMETHEUS_MULTIPROC_DIR (prometheus_client's own variable)
    health_port: int | None = None           # EVALJOBS_HEALTH_PORT (None: no /livez, /readyz)
    health_dir: str | None = None            # EVALJOBS_HEALTH_DIR (the worker processes' status files)
    health_processes: int = 1                # EVALJOBS_HEALTH_PROCESSES (processes /readyz waits for)
    log_format: str = "text"                 # EVALJOBS_LOG_FORMAT (text | json)
    verbose: bool = False                    # EVALJOBS_VERBOSE (1: debug logs; evaljobs worker --verbose)
    trace_content: bool = False              # EVALJOBS_TRACE_CONTENT (1: prompts and answers on spans)
    # OpenTelemetry's own variables: an endpoint set turns tracing on (the SDK reads the rest).
    otlp_endpoint: str | None = None         # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else ..._ENDPOINT
    # Batch runs (--batch): requests a provider batch holds at most, how long the first request
    # waits for more before a smaller batch goes, how often an open batch is looked at, and how
    # long a run's batch may stay open before it is cancelled and its requests errored batch_expired,
    # and how long a batch may ignore a cancel before it is abandoned (its requests errored with why).
    batch_size: int = 1000                   # EVALJOBS_BATCH_SIZE
    batch_wait: float = 5.0                  # EVALJOBS_BATCH_WAIT (seconds)
    batch_poll: float = 30.0                 # EVALJOBS_BATCH_POLL (seconds)
    batch_deadline: float = 24 * 3600.0      # EVALJOBS_BATCH_DEADLINE (seconds; the completion window)
    batch_cancel_grace: float = 900.0        # EVALJOBS_BATCH_CANCEL_GRACE (seconds; at most the deadline)
    # What a run submitted by someone else may make this worker do (docs/security.md, "A worker's
    # secrets stay its own"): base URLs it sends keys to and variables it reads beyond those its own
    # providers file and the presets name, and whether a catalog's code (python/javascript) runs here.
    allowed_base_urls: tuple[str, ...] = ()  # EVALJOBS_ALLOWED_BASE_URLS (worker --allow-endpoint URL)
    allowed_env: tuple[str, ...] = ()        # EVALJOBS_ALLOWED_ENV (worker --allow-env NAME)
    allow_code: bool = False                 # EVALJOBS_ALLOW_CODE (--allow-code)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Fail closed: a key that is set is meant to sign. Only an unset key (None) means
        # "unsigned"; an empty or short one refuses to build settings, so no worker starts and
        # nothing is submitted under a key that protects nothing.
        key = self.context_key
        if key is not None and len(key.encode("utf-8")) < MIN_CONTEXT_KEY_BYTES:
            what = "set but empty" if not key.strip() else f"{len(key.encode('utf-8'))} bytes"
            raise ConfigurationError(
                f"EVALJOBS_CONTEXT_KEY is {what}; a context signing key needs at least "
                f"{MIN_CONTEXT_KEY_BYTES} bytes (e.g. `python -c 'import secrets; "
                "print(secrets.token_hex(32))'`), or unset the variable to run unsigned"
            )
        if self.log_format not in LOG_FORMATS:
            raise ConfigurationError(f"EVALJOBS_LOG_FORMAT={self.log_format!r} is not a log format: use "
                                     + " or ".join(LOG_FORMATS))
        ports = (("EVALJOBS_METRICS_PORT", self.metrics_port), ("EVALJOBS_HEALTH_PORT", self.health_port))
        for name, port in ports:
            if port is not None and not 0 < port < 65536:
                raise ConfigurationError(f"{name}={port!r} is not a TCP port (1-65535)")
        for name, (label, low, high, low_open, integer) in _NUMBERS.items():
            check_number(label, getattr(self, name), low, high, low_open=low_open, integer=integer)
        register_secret(key)
        for url in (self.database_url, self.broker_url, self.governor_url, self.redis_url):
            password = password_of(url) if url else None
            if url and password and password not in url.replace(f":{password}@", "@", 1):
                register_secret(password)  # not one that is also the URL's user, host or database name
        self._check_state_store()
        if self.pairs_per_message is not None and (not isinstance(self.pairs_per_message, int)
                                                   or self.pairs_per_message < 1):
            raise ConfigurationError(
                f"EVALJOBS_PAIRS_PER_MESSAGE={self.pairs_per_message!r} must be 1 or more "
                "(pairs a fan-out message carries; 1: one message per pair)"
            )
        if not isinstance(self.batch_size, int) or not 1 <= self.batch_size <= 50_000:
            raise ConfigurationError(f"EVALJOBS_BATCH_SIZE={self.batch_size!r} must be 1 to 50000 "
                                     "(requests in one provider batch)")
        for url in self.allowed_base_urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.password:
                raise ConfigurationError(f"EVALJOBS_ALLOWED_BASE_URLS: {url!r} is not an http(s) URL "
                                         "like https://llm.internal:8443/v1 (no password in it)")
        for name in self.allowed_env:
            if not _VARIABLE.fullmatch(name):
                raise ConfigurationError(f"EVALJOBS_ALLOWED_ENV: {name!r} is not an environment variable "
                                         "name like ACME_API_KEY")
        for name in ("batch_wait", "batch_poll", "batch_deadline", "batch_cancel_grace"):
            value = getattr(self, name)
            if not value >= (0 if name == "batch_wait" else 0.01):
                raise ConfigurationError(
                    f"EVALJOBS_{name.upper()}={value!r} must be a positive number of seconds"
                )

    def _check_state_store(self) -> None:
        """Fail closed: a RabbitMQ broker carries messages only; budgets and events need a Redis."""
        if self.redis_url is not None and not self.redis_url.startswith(REDIS_SCHEMES):
            raise ConfigurationError(f"EVALJOBS_REDIS_URL={redact(self.redis_url)!r} is not a Redis URL: "
                                     "use redis://host:port/db")
        if self.amqp_broker and self.redis_url is None:
            raise ConfigurationError(
                f"EVALJOBS_BROKER_URL={redact(self.broker_url or '')!r} is RabbitMQ, which carries only "
                "the messages: set EVALJOBS_REDIS_URL=redis://host:port/db for the governor's budgets and "
                "the run events (docs/operations.md, RabbitMQ)")

    def crash_limit(self) -> int:
        """Crashed workers a pair may cost before it is recorded errored (``EVALJOBS_MAX_CRASHES``, default 3,
        the generic crash counter's own default)."""
        text = self.max_crashes
        if text is None or not str(text).strip():
            return DEFAULT_MAX_CRASHES
        try:
            value = int(text)
        except ValueError:
            raise ConfigurationError(
                f"EVALJOBS_MAX_CRASHES={text!r} is not a whole number: set it to 1 or more"
            ) from None
        if value < 1:
            raise ConfigurationError(f"EVALJOBS_MAX_CRASHES={value} must be 1 or more")
        return value

    @property
    def signing(self) -> str:
        """``"signed"`` or ``"unsigned"``: the mode a worker logs once at start."""
        return "unsigned" if self.context_key is None else "signed"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``env`` (default: this process's environment); unset means default."""
        env = os.environ if env is None else env
        d = cls()
        governor = (env.get("EVALJOBS_GOVERNOR") or "on").strip().lower() not in _FALSE
        run: dict[str, Any] = {o.name: (_int if o.kind is int else _float)(env, o.env, o.default)
                               for o in RUN_OPTIONS if o.env is not None}
        return cls(
            database_url=_text(env, "EVALJOBS_DATABASE_URL"),
            db_reconnect_seconds=_float(env, "EVALJOBS_DB_RECONNECT_SECONDS", d.db_reconnect_seconds),
            broker_url=_text(env, "EVALJOBS_BROKER_URL"),
            queue=env.get("EVALJOBS_QUEUE") or d.queue,
            providers_path=_text(env, "EVALJOBS_PROVIDERS"),
            context_key=env.get("EVALJOBS_CONTEXT_KEY"),  # set-but-empty is refused, not "unset"
            governor=governor,
            governor_url=_text(env, "EVALJOBS_GOVERNOR_URL"),
            redis_url=_text(env, "EVALJOBS_REDIS_URL"),
            lane=_text(env, "EVALJOBS_LANE"),
            permit_wait=_float(env, "EVALJOBS_PERMIT_WAIT", d.permit_wait),
            cache_ttl=_text(env, "EVALJOBS_CACHE_TTL"),
            **run,
            max_crashes=_text(env, "EVALJOBS_MAX_CRASHES"),
            heartbeat_timeout_ms=_int(env, "EVALJOBS_HEARTBEAT_TIMEOUT_MS", d.heartbeat_timeout_ms),
            maintenance_chance=_int(env, "EVALJOBS_MAINTENANCE_CHANCE", d.maintenance_chance),
            recover_every=_float(env, "EVALJOBS_RECOVER_EVERY", d.recover_every),
            sim_url=_text(env, "EVALJOBS_SIM_URL"),
            sim_latency=_float(env, "EVALJOBS_SIM_LATENCY", d.sim_latency),
            sim_jitter=_float(env, "EVALJOBS_SIM_JITTER", d.sim_jitter),
            middleware=_text(env, "EVALJOBS_MIDDLEWARE"),
            store_transcripts=(env.get("EVALJOBS_STORE_TRANSCRIPTS") or "off").strip().lower() not in _FALSE,
            metrics_port=_port(env, "EVALJOBS_METRICS_PORT"),
            metrics_host=env.get("EVALJOBS_METRICS_HOST") or d.metrics_host,
            metrics_dir=_text(env, "PROMETHEUS_MULTIPROC_DIR"),
            health_port=_port(env, "EVALJOBS_HEALTH_PORT"),
            health_dir=_text(env, "EVALJOBS_HEALTH_DIR"),
            health_processes=_int(env, "EVALJOBS_HEALTH_PROCESSES", d.health_processes),
            log_format=(env.get("EVALJOBS_LOG_FORMAT") or d.log_format).strip().lower(),
            trace_content=(env.get("EVALJOBS_TRACE_CONTENT") or "").strip().lower() in _TRUE,
            verbose=(env.get("EVALJOBS_VERBOSE") or "").strip().lower() in _TRUE,
            otlp_endpoint=(_text(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                           or _text(env, "OTEL_EXPORTER_OTLP_ENDPOINT")),
            batch_size=_int(env, "EVALJOBS_BATCH_SIZE", d.batch_size),
            batch_wait=_float(env, "EVALJOBS_BATCH_WAIT", d.batch_wait),
            batch_poll=_float(env, "EVALJOBS_BATCH_POLL", d.batch_poll),
            batch_deadline=_float(env, "EVALJOBS_BATCH_DEADLINE", d.batch_deadline),
            batch_cancel_grace=_float(env, "EVALJOBS_BATCH_CANCEL_GRACE", d.batch_cancel_grace),
            allowed_base_urls=_words(env, "EVALJOBS_ALLOWED_BASE_URLS"),
            allowed_env=_words(env, "EVALJOBS_ALLOWED_ENV"),
            allow_code=(env.get("EVALJOBS_ALLOW_CODE") or "").strip().lower() in _TRUE,
        )

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied; ``None`` values are ignored (an option not given)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def redis_broker(self) -> bool:
        return bool(self.broker_url and self.broker_url.startswith(REDIS_SCHEMES))

    @property
    def amqp_broker(self) -> bool:
        return bool(self.broker_url and self.broker_url.startswith(AMQP_SCHEMES))

    @property
    def state_redis(self) -> str | None:
        """The Redis for shared state beyond a queue: a Redis broker's own, else ``EVALJOBS_REDIS_URL``."""
        return state_redis(self.broker_url, self)

    def environment(self) -> dict[str, str]:
        """These settings as ``EVALJOBS_*`` variables (for a worker process started by this one)."""
        out: dict[str, str] = {}
        names = {"database_url": "EVALJOBS_DATABASE_URL", "broker_url": "EVALJOBS_BROKER_URL",
                 "queue": "EVALJOBS_QUEUE", "providers_path": "EVALJOBS_PROVIDERS",
                 "governor_url": "EVALJOBS_GOVERNOR_URL", "redis_url": "EVALJOBS_REDIS_URL",
                 "lane": "EVALJOBS_LANE",
                 "sim_url": "EVALJOBS_SIM_URL", "cache_ttl": "EVALJOBS_CACHE_TTL",
                 "middleware": "EVALJOBS_MIDDLEWARE"}
        for attr, name in names.items():
            value = getattr(self, attr)
            if value is not None:
                out[name] = str(value)
        out["EVALJOBS_GOVERNOR"] = "on" if self.governor else "off"
        if self.store_transcripts:
            out["EVALJOBS_STORE_TRANSCRIPTS"] = "on"
        out.update(self.allowances())
        return out

    def allowances(self) -> dict[str, str]:
        """What the operator allowed (endpoints, variables, code) as variables: a worker process this
        one starts (``evaljobs worker --allow-code`` execs Dramatiq's processes) allows the same."""
        out = {}
        if self.allowed_base_urls:
            out["EVALJOBS_ALLOWED_BASE_URLS"] = " ".join(self.allowed_base_urls)
        if self.allowed_env:
            out["EVALJOBS_ALLOWED_ENV"] = " ".join(self.allowed_env)
        if self.allow_code:
            out["EVALJOBS_ALLOW_CODE"] = "1"
        return out


def state_redis(broker: str | None, given: Settings | None = None) -> str | None:
    """The Redis that holds the state shared beyond a queue for ``broker``: the broker itself when it
    is Redis, ``EVALJOBS_REDIS_URL`` beside a RabbitMQ broker (or any other), None for none."""
    if broker and broker.startswith(REDIS_SCHEMES):
        return broker
    if broker and broker.startswith(AMQP_SCHEMES):
        return (given or settings()).redis_url
    return None


_lock = threading.Lock()
_current: Settings | None = None
#: The environment's reading that ``_current`` was built from: what :func:`honour_environment` compares with.
_basis: Settings | None = None


def settings() -> Settings:
    """This process's settings (from the environment on first use, or what :func:`configure` set)."""
    global _current, _basis
    current = _current
    if current is None:
        with _lock:
            if _current is None:
                _current = _basis = Settings.from_env()
            current = _current
    return current


def configure(new: Settings | None = None, **changes: Any) -> Settings:
    """Replace this process's settings: ``new`` (default: re-read the environment) with ``changes``."""
    global _current, _basis
    with _lock:
        _basis = Settings.from_env()
        _current = (new or _basis).replace(**changes)
        return _current


def honour_environment() -> Settings:
    """This process's settings, with every ``EVALJOBS_*`` variable changed since they were read taken in.

    Settings are read once, but a host may change its environment between two sessions: a value
    the environment changed replaces the current one (a value set by :func:`configure` that the
    environment did not change stays), so a changed environment is honoured, never silently
    ignored; a changed value that is unusable is refused, in one line, as at start-up.
    """
    global _current, _basis
    fresh = Settings.from_env()
    with _lock:
        if _current is None:  # nothing read yet: read it now
            _current = _basis = fresh
            return _current
        if _basis is None:  # given settings outright (restore): the environment is compared from now on
            _basis = fresh
            return _current
        changed = {f.name: getattr(fresh, f.name) for f in dataclasses.fields(Settings)
                   if getattr(fresh, f.name) != getattr(_basis, f.name)}
        _basis = fresh
        if changed:
            _current = dataclasses.replace(_current, **changed)
        return _current


def configured() -> Settings | None:
    """The settings this process was given (:func:`configure`, or a first :func:`settings`), or None.

    None means nothing fixed them yet: code that still reads the environment keeps doing so.
    """
    return _current


def restore(previous: Settings | None) -> None:
    """Put back what :func:`configured` returned before a :func:`configure` (None: unconfigured again).

    For a scope that configures the process for a while (a session, a pool, a
    benchmark) and must leave it as it found it.
    """
    global _current
    with _lock:
        _current = previous


def secret(name: str) -> str | None:
    """The value of the environment variable ``name`` (an API key, a header), read at call time.

    Secrets are never kept in :class:`Settings`: a provider entry names the
    variable, and the value is read here on every use, so a rotated key is
    picked up and nothing that stores or prints settings can leak it.
    """
    value = os.environ.get(name)
    register_secret(value)  # scrubbed from every error, result, report and log line from now on
    return value


def child_environment(extra: Mapping[str, str] | None = None, base: Settings | None = None) -> dict[str, str]:
    """The environment for a worker process: this one's, with ``base`` settings and ``extra`` on top."""
    env = dict(os.environ)
    if base is not None:
        env.update(base.environment())
    elif _current is not None:  # what a flag allowed (--allow-code, --allow-endpoint) reaches the children
        env.update(_current.allowances())
    env.update(extra or {})
    return env


#: The variables a catalog's code (a python or javascript assertion, a transform) inherits: enough to
#: find programs and read text, nothing that can hold a secret (docs/security.md).
CODE_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "SYSTEMROOT")


def code_environment(home: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a process that runs a catalog's code: :data:`CODE_ENVIRONMENT` from
    this one's, ``HOME`` and ``TMPDIR`` set to ``home`` (a folder of its own), and ``extra``.

    An allow-list, not a deny-list: a key under any name (``OPENAI_API_KEY``, ``EVALJOBS_CONTEXT_KEY``,
    a database URL with a password, ``AWS_SECRET_ACCESS_KEY``) never reaches the code.
    """
    env = {name: os.environ[name] for name in CODE_ENVIRONMENT if name in os.environ}
    env.update(HOME=home, TMPDIR=home, TMP=home, TEMP=home)
    env.update(extra or {})
    return env


__all__ = [
    "DEFAULT_QUEUE",
    "MAX_SECONDS",
    "MIN_CONTEXT_KEY_BYTES",
    "AMQP_SCHEMES",
    "REDIS_SCHEMES",
    "RUN_LIMITS",
    "RUN_OPTIONS",
    "RunOption",
    "SHARED_BROKER_SCHEMES",
    "Settings",
    "child_environment",
    "code_environment",
    "configure",
    "check_number",
    "configured",
    "resolve",
    "restore",
    "run_option",
    "secret",
    "settings",
    "state_redis",
]
