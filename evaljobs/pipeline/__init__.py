"""The pipeline: runs planned, enqueued, evaluated pair by pair, followed and recovered.

Submodules a caller needs only on some paths (a rerun, a recovery, reuse, events, RabbitMQ, a batch run's
cancel, the in-process strategies: a Redis submit runs no pair) load on first
attribute access (:mod:`evaljobs.lazy`): ``pipeline.rerun.create(...)`` with ``from evaljobs import
pipeline`` at the top keeps ``evaljobs run`` from loading them. The package's own modules reach theirs
through :mod:`evaljobs.pipeline.on_demand`.
"""
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.pipeline import batching as batching
    from evaljobs.pipeline import events as events
    from evaljobs.pipeline import rabbitmq as rabbitmq
    from evaljobs.pipeline import recovery as recovery
    from evaljobs.pipeline import rerun as rerun
    from evaljobs.pipeline import reuse as reuse
    from evaljobs.pipeline import strategies as strategies

__getattr__ = submodules(__name__, ("batching", "events", "rabbitmq", "recovery", "rerun", "reuse",
                                     "strategies"))
