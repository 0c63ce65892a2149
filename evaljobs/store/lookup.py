"""Run ids as people type them: ``latest``, a whole id, or a unique prefix of one.

Why: every command that takes a run id used to need the whole ``r_…`` id copied
from an earlier output. ``latest`` (the newest run) and a prefix (``r_a36``, or
just ``a36``) make the README's commands work verbatim and save the copying.
A prefix is looked up as a range on the primary key (``id >= p AND id < p…``), an
index seek on SQLite and PostgreSQL alike, never a scan.
"""
from __future__ import annotations

from evaljobs.errors import UsageError
from evaljobs.store.connections import _connection
from evaljobs.store.errors import UnknownRun
from evaljobs.store.runs import get_run, list_runs
from evaljobs.store.schema import Run

LATEST = "latest"
RUN_ID_PREFIX = "r_"
_MIN_PREFIX = 3      # characters after "r_": fewer would match half the runs
_SHOWN = 5


def resolve_run_id(text: str) -> str:
    """The run id ``text`` names: ``latest``, an id, or a unique prefix (with or without ``r_``).

    Raises :class:`UnknownRun` when nothing matches and :class:`UsageError` when a
    prefix matches several runs (both one line, naming what to do).
    """
    text = (text or "").strip()
    if text == LATEST:
        newest = list_runs(limit=1)
        if not newest:
            raise UnknownRun("there are no runs yet, so no 'latest' run: start one with `evaljobs run` "
                             "or `evaljobs demo`")
        return newest[0].id
    try:
        return get_run(text).id
    except UnknownRun:
        pass
    prefix = text if text.startswith(RUN_ID_PREFIX) else RUN_ID_PREFIX + text
    if len(prefix) - len(RUN_ID_PREFIX) < _MIN_PREFIX:
        raise UnknownRun(
            f"unknown run {text!r}: give 'latest', a run id, or at least {_MIN_PREFIX} characters "
            f"of one (list runs with `evaljobs runs`)"
        )
    with _connection():
        ids = [row.id for row in Run.select(Run.id)
               .where((Run.id >= prefix) & (Run.id < prefix + "\U0010ffff"))
               .order_by(Run.id).limit(_SHOWN + 1)]
    if not ids:
        raise UnknownRun(f"unknown run {text!r}: list runs with `evaljobs runs`")
    if len(ids) > 1:
        more = "+" if len(ids) > _SHOWN else ""
        raise UsageError(f"run id prefix {text!r} matches {min(len(ids), _SHOWN)}{more} runs "
                         f"({', '.join(ids[:_SHOWN])}): give more characters")
    return ids[0]


__all__ = ["LATEST", "resolve_run_id"]
