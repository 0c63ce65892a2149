"""Catalog snapshots: a run always grades against the exact catalog it was started with.

Stored by digest (insert if absent) and parsed once per process.
"""
from __future__ import annotations

import json
from typing import Any

from evaljobs.catalog import Catalog, catalog_from_body
from evaljobs.catalog.digest import scenario_verdict_digest
from evaljobs.store.connections import _connection, _reconnecting
from evaljobs.store.errors import UnknownSnapshot
from evaljobs.store.schema import Snapshot, _dumps, _now

_snapshots: dict[str, Catalog] = {}
#: (catalog digest, scenario key, the run's judges) → what decides the verdict (a snapshot never changes).
_verdict_digests: dict[tuple[str, str, tuple[str | None, str | None]], str] = {}


@_reconnecting
def save_snapshot(catalog: Catalog) -> None:
    """Store the catalog body under its digest (insert if absent): a run always grades against
    the exact catalog it was started with, whatever happens to the YAML file afterwards."""
    with _connection():
        (Snapshot.insert(digest=catalog.digest, name=catalog.name, body=_dumps(catalog.body),
                         created_at=_now())
         .on_conflict(action="NOTHING", conflict_target=[Snapshot.digest]).as_rowcount().execute())
    _snapshots.setdefault(catalog.digest, catalog)


@_reconnecting
def load_snapshot(digest: str) -> Catalog:
    """The catalog snapshotted under ``digest``, parsed once per process and then cached."""
    cached = _snapshots.get(digest)
    if cached is not None:
        return cached
    with _connection():
        body = Snapshot.select(Snapshot.body).where(Snapshot.digest == digest).scalar()
    if body is None:
        raise UnknownSnapshot(f"unknown catalog snapshot {digest!r}: the run's catalog was never saved here")
    catalog = catalog_from_body(json.loads(body), source=f"<snapshot {digest[:12]}>")
    return _snapshots.setdefault(digest, catalog)


#: A run's judges as :func:`verdict_digest_in` takes them: its ``--judge-model`` and its providers file's.
Judges = tuple[str | None, str | None]


def run_judges(options: dict[str, Any] | None) -> Judges:
    """The judges a run's options name: its ``--judge-model`` and the stored providers file's ``judge_model``
    (a run submitted without a providers file stored none: the built-in presets name no judge)."""
    options = options or {}
    definition = (options.get("providers") or {}).get("definition") or {}
    default = definition.get("judge_model") if isinstance(definition, dict) else None
    return (options.get("judge_model") or None, default if isinstance(default, str) and default else None)


def verdict_digest_in(digest: str, key: str, judges: Judges = (None, None)) -> str | None:
    """What decides the verdict of scenario ``key`` of the catalog snapshotted under ``digest`` in a run with
    these judges (:func:`evaljobs.catalog.digest.scenario_verdict_digest`; None: no such scenario): what each
    result row is stamped with, and what a row stored before it was tells."""
    found = _verdict_digests.get((digest, key, judges))
    if found is None:
        catalog = load_snapshot(digest)
        if key not in catalog:
            return None
        if len(_verdict_digests) >= 100_000:
            _verdict_digests.clear()
        kept = catalog.scenario_digests
        found = scenario_verdict_digest(catalog.scenario(key), *judges,
                                        digest=kept.get(key) if kept else None)
        _verdict_digests[(digest, key, judges)] = found
    return found


def forget_snapshots() -> None:
    """Empty this process's snapshot cache: the next load reads the database again."""
    _snapshots.clear()
    _verdict_digests.clear()
