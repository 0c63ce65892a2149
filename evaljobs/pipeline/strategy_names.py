"""The scheduling strategies' names, apart from the code that runs them (:mod:`evaljobs.pipeline.strategies`).

Why a module of its own: a submit checks the strategy and a session asks whether a run is queued, and
neither runs a pair. A Redis submit hands the pairs to the workers; importing the in-process strategies
would load the whole pair path (the provider client, the evaluation, the governor) only to read two tuples
(issue 42, item 3).
"""

STRATEGIES = ("sequential", "threads", "fanout", "per-model")
#: The strategies whose pairs go through the broker's queue (the others run inside the submitting call).
QUEUED = ("fanout", "per-model")
DEFAULT_STRATEGY = "fanout"

__all__ = ["DEFAULT_STRATEGY", "QUEUED", "STRATEGIES"]
