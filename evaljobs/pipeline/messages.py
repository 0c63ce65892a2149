"""What a pair message carries, apart from the code that evaluates it (:mod:`evaljobs.pipeline.pairs`).

Why a module of its own: the actors are declared on a broker by every process that binds one, a
submitter too, and their declaration names :class:`InvalidMessage` (never retried); a Redis submit sends
``start_run`` and runs no pair, so it must not import the pair path to declare them (issue 42, item 3).
"""
from __future__ import annotations


class InvalidMessage(Exception):
    """A message that can never succeed (unknown run, scenario or model): dead-lettered, never retried."""


def pair_args(run_id: str, scenario_key: str, model: str, epoch: int = 0) -> tuple:
    """The positional arguments of an ``evaluate_scenario`` message; the epoch only when it is not 0,
    so a single-epoch run's messages are what they were before epochs existed (and still understood)."""
    return (run_id, scenario_key, model, epoch) if epoch else (run_id, scenario_key, model)


__all__ = ["InvalidMessage", "pair_args"]
