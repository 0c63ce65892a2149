"""Workers: Dramatiq processes and elastic pools, their status and their follow-up of runs.

Submodules load on first attribute access (:mod:`evaljobs.lazy`): ``workers.status.collect(...)``
with ``from evaljobs import workers`` at the top keeps ``evaljobs run`` from loading them (nor the Redis
client, nor the ``metrics`` extra). The package's own modules reach theirs through
:mod:`evaljobs.workers.on_demand`.
"""
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.workers import follow as follow
    from evaljobs.workers import launch as launch
    from evaljobs.workers import logs as logs
    from evaljobs.workers import metrics as metrics
    from evaljobs.workers import serve as serve
    from evaljobs.workers import status as status

__getattr__ = submodules(__name__, ("follow", "launch", "logs", "metrics", "serve", "status"))
