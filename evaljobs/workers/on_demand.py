"""The workers' modules their own modules load on first use (:mod:`evaljobs.lazy`): an optional extra's
or the Redis client's, which a worker or a run that does not ask never loads.

``status`` loads the Redis client (a follower on Redis, a metrics scrape), ``metrics`` the ``metrics``
extra (prometheus_client), ``tracing`` the ``otel`` extra (OpenTelemetry). A workers module writes
``on_demand.status.read_queues(...)`` with ``from evaljobs.workers import on_demand`` at the top. Why
not the package face (``from evaljobs import workers``) as other packages do: the face names the modules
that use these, so a module of the package importing its own face would be an import cycle.
"""
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.workers import metrics as metrics
    from evaljobs.workers import status as status
    from evaljobs.workers import tracing as tracing

__getattr__ = submodules("evaljobs.workers", ("metrics", "status", "tracing"))
