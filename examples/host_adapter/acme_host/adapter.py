"""An evaluation adapter whose replays depend on the host's publishing domain.

It runs evaljobs' default chat conversation with the domain added to the system
prompt, and records the domain in ``Replay.meta`` (evaljobs stores that in each
result's ``details["meta"]``). With no domain on the thread it raises instead of
evaluating under a wrong one — the failure that context propagation prevents.

Use it as ``--adapter acme`` (entry point) or
``--adapter acme_host.adapter:DomainAdapter``.
"""
from __future__ import annotations

from dataclasses import replace

from evaljobs.evaluation.adapters import ConversationAdapter
from evaljobs.catalog import Scenario
from evaljobs.catalog.modelspec import ModelSpec
from evaljobs.evaluation.replay import Replay

from .context import NAME
from .domain import require_domain


def domain_prompt(domain: str) -> str:
    """The system-prompt line for ``domain``.

    A real model reads the first sentence. The ``[sim: …]`` directive makes
    evaljobs' simulated provider answer ``published for DOMAIN`` on the first
    turn, so a test can see which domain a pair really ran under.
    """
    return f"Publishing domain: {domain}. [sim: say published for {domain}]"


class DomainAdapter(ConversationAdapter):
    """The default conversation, run for the current publishing domain."""

    version = "acme-domain-1"

    def __call__(self, scenario: Scenario, model: ModelSpec, *, deadline: float | None = None) -> Replay:
        domain = require_domain(f"scenario '{scenario.key}' × {model.spec}")
        system = domain_prompt(domain)
        if scenario.system:
            system = f"{system}\n\n{scenario.system}"
        replay = super().__call__(replace(scenario, system=system), model, deadline=deadline)
        replay.meta[NAME] = domain
        return replay
