"""Every provider call goes through here: the governor's permit around the client call.

Why one place: the model under test and the LLM judge must both count against
their deployment's shared budget, and the lane (interactive/bulk) and the
permit wait policy must be the same for every caller.
"""
from __future__ import annotations

from typing import Any

from evaljobs.pipeline import runtime
from evaljobs.evaluation.adapters import client_for
from evaljobs.catalog.modelspec import ModelSpec, ProvidersConfig
from evaljobs.providers.client import Completion

#: How long the first call of a conversation may wait for a permit before the
#: pair is handed back to the queue (nothing is lost yet). Later turns wait
#: longer: giving up mid-conversation would throw away the turns already paid for.
FIRST_CALL_WAIT = 2.0
LATER_CALL_WAIT = 120.0


def complete(providers: ProvidersConfig, spec: ModelSpec, messages: list[dict[str, Any]], *,
             first: bool = True, **kwargs: Any) -> Completion:
    """``client.complete`` under a governor permit for ``spec``'s budget (when the governor is on)."""
    client = client_for(providers, spec.provider)
    governor = runtime.governor()
    if governor is None:
        return client.complete(spec.model, messages, **kwargs)
    budget = runtime.budget_for(providers, spec)
    max_wait = runtime.permit_wait() if first else LATER_CALL_WAIT
    with governor.acquire(budget, runtime.lane(), max_wait=max_wait) as permit:
        completion = client.complete(spec.model, messages, **kwargs)
        permit.release(tokens=completion.input_tokens + completion.output_tokens,
                       latency=completion.latency_ms / 1000.0, headers=completion.headers)
    return completion
