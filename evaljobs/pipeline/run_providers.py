"""The providers a process evaluates a run with: its own providers file, or the definition stored with
the run when it was submitted with one (so a worker started without ``EVALJOBS_PROVIDERS`` knows them).

Its own module so that both the pair runner's setup (:mod:`evaljobs.pipeline.runtime`) and the batch
lane (:mod:`evaljobs.pipeline.batching`, which ``runtime`` loads for batch runs) use one definition.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from evaljobs import config
from evaljobs.catalog.modelspec import ProvidersConfig, load_providers, providers_from_definition

_lock = threading.Lock()
_own: dict[str | None, ProvidersConfig] = {}
#: Every config built here is kept for the process's life, so callers may key caches by its id().
_stored: dict[str, ProvidersConfig] = {}


def providers(path: str | None = None) -> ProvidersConfig:
    """This process's providers: the file ``path`` (default: ``EVALJOBS_PROVIDERS``), read once."""
    path = path or config.settings().providers_path
    with _lock:
        if path not in _own:
            _own[path] = load_providers(path)
        return _own[path]


def stored_providers(stored: dict[str, Any] | None) -> ProvidersConfig:
    """The providers of a run whose options hold ``stored`` (``Run.options["providers"]``: the source's
    name and the definition, variable names only); this process's own when the run stored none."""
    if not stored:
        return providers()
    key = json.dumps(stored, sort_keys=True, separators=(",", ":"))
    with _lock:
        found = _stored.get(key)
    if found is None:
        found = providers_from_definition(stored.get("definition"),
                                          f"{stored.get('source')} (as stored with the run)")
        with _lock:
            found = _stored.setdefault(key, found)
    return found
