"""The providers a process evaluates a run with: its own providers file, or the definition stored with
the run when it was submitted with one (so a worker started without ``EVALJOBS_PROVIDERS`` knows them).

Its own module so that both the pair runner's setup (:mod:`evaljobs.pipeline.runtime`) and the batch
lane (:mod:`evaljobs.pipeline.batching`, which ``runtime`` loads for batch runs) use one definition.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from evaljobs import config
from evaljobs.catalog.allowance import Allowance
from evaljobs.catalog.modelspec import ProvidersConfig, load_providers, providers_from_definition

logger = logging.getLogger(__name__)
_lock = threading.Lock()
_own: dict[str | None, ProvidersConfig] = {}
#: Every config built here is kept for the process's life, so callers may key caches by its id().
_stored: dict[tuple[str, Allowance], ProvidersConfig] = {}


def providers(path: str | None = None) -> ProvidersConfig:
    """This process's providers: the file ``path`` (default: ``EVALJOBS_PROVIDERS``), read once."""
    path = path or config.settings().providers_path
    with _lock:
        if path not in _own:
            _own[path] = load_providers(path)
        return _own[path]


def stored_providers(stored: dict[str, Any] | None) -> ProvidersConfig:
    """The providers of a run whose options hold ``stored`` (``Run.options["providers"]``: the source's
    name and the definition, variable names only); this process's own when the run stored none.

    The definition was written by whoever submitted the run, not by this process's operator: an entry
    that would read a variable, or send one to a base URL, that this process's own providers and its
    allow-lists (``EVALJOBS_ALLOWED_ENV``, ``EVALJOBS_ALLOWED_BASE_URLS``) do not name is refused
    (:mod:`evaljobs.catalog.allowance`): its pairs error in one line, before any request. The submitter's
    own in-process run uses the same file as its own providers, so everything in it is allowed there.
    """
    if not stored:
        return providers()
    allowance = _allowance()
    key = (json.dumps(stored, sort_keys=True, separators=(",", ":")), allowance)
    with _lock:
        found = _stored.get(key)
    if found is None:
        found = providers_from_definition(stored.get("definition"),
                                          f"{stored.get('source')} (as stored with the run)", allowance)
        with _lock:
            fresh = key not in _stored
            found = _stored.setdefault(key, found)
        for reason in found.refused.values() if fresh else ():  # the operator sees it once, not per pair
            logger.warning("a run's stored providers are not all honoured here: %s", reason)
    return found


_allowances: dict[tuple[int, tuple[str, ...], tuple[str, ...]], Allowance] = {}


def _allowance() -> Allowance:
    """What this process allows a run's stored definition (built once per own providers and settings:
    every pair asks)."""
    own, settings = providers(), config.settings()
    key = (id(own), settings.allowed_base_urls, settings.allowed_env)
    found = _allowances.get(key)
    if found is None:
        found = _allowances[key] = own.allowance(settings.allowed_base_urls, settings.allowed_env)
    return found
