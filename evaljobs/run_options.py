"""The per-run options, declared once: :data:`RUN_OPTIONS`.

Each option a run is submitted with (``evaljobs run``'s flags, ``Session.submit``'s
parameters) is one :class:`RunOption`: its name, type, default, environment variable,
flag, whether the run stores it, its bounds, and what Dramatiq, the retry policy, the
providers file and ``--reuse`` make of it. :class:`evaljobs.config.Settings` (the one
reader of the environment), ``RunSettings``, the stored limits, the CLI's flags and
Dramatiq's actor and message options are derived from this table; nothing else lists
the options (``tests/system/test_architecture.py`` checks it).
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

from evaljobs.errors import ConfigurationError

#: Seconds no pair, wait or backoff may reach: a week (``inf`` and 1e300 are refused, not run for ever).
MAX_SECONDS = 7 * 86400.0


def check_number(label: str, value: Any, low: float, high: float, *, low_open: bool = False,
                 integer: bool = False) -> None:
    """Raise :class:`ConfigurationError` (one line, naming ``label`` and the value) unless ``value`` is a
    finite number in ``[low, high]`` (``(low, high]`` with ``low_open``), and whole if ``integer``.

    The one range check for numbers from the environment, a flag or a run's options: ``nan`` passes
    every ``<`` comparison and ``inf`` every ``>=``, so a bare ``if value < 0`` lets both through.
    """
    kind = "a whole number" if integer else "a finite number"
    ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
          and (not integer or float(value).is_integer())
          and (value > low if low_open else value >= low) and value <= high)
    if not ok:
        bounds = f"{'above' if low_open else 'at least'} {low:g} and at most {high:g}"
        raise ConfigurationError(f"{label}={value!r} must be {kind} {bounds}")


class RunOption(NamedTuple):
    """A per-run setting, declared once: the run stores it (``RunSettings``, ``Run.options``) so every worker
    applies the submitter's value; ``evaljobs run``'s flag, ``Session.submit``'s option and, for a per-pair
    limit, :class:`Settings`' variable, the retry policy and Dramatiq's actor and message options are built
    from it. A limit is resolved as Dramatiq resolves an actor option
    (``message.options.get(name, actor.options.get(name, default))``): the run's stored value, else this
    process's setting, else the default (:func:`resolve`)."""

    name: str
    #: ``int``, ``float``, ``str``, ``bool``, ``tuple`` (provider names) or ``dict`` (the providers file).
    kind: type
    default: Any = None
    #: The environment variable that sets it for a process (None: a run's own, no process setting).
    env: str | None = None
    #: Bounds of a number (None: not a number, or checked where it is read).
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    #: ``evaljobs run``'s flag for it (None: no flag of its own); the flag wins over the environment.
    flag: str | None = None
    #: The flag's help text and metavar, and its own bounds when stricter than the variable's.
    help: str = ""
    flag_low: float | None = None
    flag_high: float | None = None
    metavar: str | None = None
    #: The flag is an on/off switch (``--batch``) though the run stores what it chose (the providers).
    switch: bool = False
    #: Stored with the run: a worker applies the value the run was submitted with, never its own. An option
    #: not stored (``--epochs``, ``--reuse``) says how the run is made: ``Session.submit`` applies it.
    stored: bool = True
    #: A per-pair limit: a field of the retry policy and of :class:`Settings`, checked against its bounds.
    limit: bool = False
    #: The Dramatiq actor option it sets (``max_retries``, ``min_backoff`` …) and the factor to its unit.
    actor_option: str | None = None
    actor_scale: int = 1
    #: The Dramatiq option each pair message carries for it (its run's value, in Dramatiq's unit:
    #: ``actor_scale``), ``backstop`` seconds past the value (time for the pair to record its own
    #: timeout first), per pair of the message.
    message_option: str | None = None
    backstop: float = 0.0
    #: A key of a providers-file entry that overrides it for that provider's pairs (it wins over the run's).
    providers_key: str | None = None
    #: A pair evaluated under another value is another answer: ``--reuse`` copies only pairs of runs with
    #: the same value (``evaljobs.pipeline.reuse.IDENTITY_OPTIONS``).
    identity: bool = False

    def check(self, value: Any, label: str | None = None) -> None:
        """Refuse ``value`` (one line, naming ``label``: default the flag, else the variable) when out of
        this option's bounds; a value of an option without bounds passes."""
        if self.low is not None and self.high is not None:
            check_number(label or self.flag or self.env or self.name, value, self.low, self.high,
                         low_open=self.low_open, integer=self.kind is int)

    def dramatiq_value(self, value: float, pairs: int = 1) -> int:
        """``value`` as Dramatiq's option wants it: in its unit, ``backstop`` past it, for ``pairs`` pairs."""
        return int((value + self.backstop) * self.actor_scale * pairs)


#: Every per-run option, in the order messages, ``RunSettings`` and ``evaljobs run --help`` list them.
RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("adapter", str, flag="--adapter", help="Host adapter module:callable or entry-point name.",
              identity=True),
    RunOption("judge_model", str, flag="--judge-model", identity=True,
              help="Model for llm_judge criteria (default: the catalog's)."),
    RunOption("judge_cap", int, low=0, high=1_000_000_000, flag="--judge-cap",
              help="Most judge calls for this run."),
    RunOption("allow_self_judge", bool, False, flag="--allow-self-judge", stored=False,
              help="Let a model under test judge answers (its own included); refused otherwise. "
                   "Reports say so."),
    RunOption("time_limit", float, 180.0, "EVALJOBS_TIME_LIMIT", 0, MAX_SECONDS, low_open=True,
              flag="--time-limit", help="Seconds per pair.", flag_low=0.1, limit=True,
              message_option="time_limit", actor_scale=1000, backstop=30.0),
    RunOption("cache", bool, False, flag="--cache",
              help="Answer repeated provider calls from the shared response cache "
                   "(TTL: EVALJOBS_CACHE_TTL, 7d)."),
    #: Pairs per scenario and model (None: the catalog's ``defaults: epochs:``); a column of the run.
    RunOption("epochs", int, flag="--epochs", flag_low=1, flag_high=1000, stored=False,
              help="Evaluate each scenario × model pair N times "
                   "(default: the catalog's defaults.epochs, else 1)."),
    RunOption("reuse", str, flag="--reuse", metavar="RUN", stored=False,
              help="Copy the pairs unchanged since RUN (an id or 'latest') instead of evaluating them."),
    #: ``--cache-across-epochs``: the response cache key leaves the epoch out (epochs share answers).
    RunOption("cache_across_epochs", bool, False, flag="--cache-across-epochs",
              help="With --cache: let every epoch reuse one cached answer "
                   "(default: each epoch is its own call)."),
    #: Fan-out pairs per message (stored when more than one); checked where Settings reads it. Unset (None):
    #: one, or several for a provider known to be fast (``evaljobs.pipeline.message_size``).
    RunOption("pairs_per_message", int, None, "EVALJOBS_PAIRS_PER_MESSAGE"),
    #: A batch run: the providers whose calls go through their batch APIs (``--batch``, ``batch:``).
    RunOption("batch", tuple, flag="--batch", switch=True,
              help="Send the calls through the providers' batch APIs "
                   "(half price; answers within their window)."),
    RunOption("batch_judge", tuple, flag="--batch-judge", switch=True,
              help="Send the LLM judge's calls through batch APIs too."),
    #: The providers file the run was submitted with (variable names only); None: the worker's own.
    RunOption("providers", dict),
    RunOption("max_retries", int, 3, "EVALJOBS_MAX_RETRIES", 0, 1000, limit=True, actor_option="max_retries",
              providers_key="max_retries"),
    RunOption("min_backoff", float, 0.5, "EVALJOBS_MIN_BACKOFF", 0, MAX_SECONDS, limit=True,
              actor_option="min_backoff", actor_scale=1000),
    RunOption("max_backoff", float, 10.0, "EVALJOBS_MAX_BACKOFF", 0, MAX_SECONDS, limit=True,
              actor_option="max_backoff", actor_scale=1000),
    RunOption("max_rate_limit_waits", int, 50, "EVALJOBS_MAX_RATE_LIMIT_WAITS", 0, 1_000_000, limit=True),
)
#: The per-pair limits: what a pair of a run may spend (the retry policy's fields).
RUN_LIMITS: tuple[RunOption, ...] = tuple(option for option in RUN_OPTIONS if option.limit)
_RUN = {option.name: option for option in RUN_OPTIONS}


def run_option(name: str) -> RunOption:
    """The per-run option called ``name``; ``KeyError`` when there is none."""
    return _RUN[name]


__all__ = ["MAX_SECONDS", "RUN_LIMITS", "RUN_OPTIONS", "RunOption", "check_number", "run_option"]
