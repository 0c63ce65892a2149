"""Workers: Dramatiq processes and elastic pools, their status and their follow-up of runs.

Submodules load on first attribute access (:mod:`evaljobs.lazy`): ``workers.status.collect(...)`` with
``from evaljobs import workers`` at the top keeps ``evaljobs run`` from loading them.
"""
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.workers import follow as follow
    from evaljobs.workers import serve as serve
    from evaljobs.workers import status as status

__getattr__ = submodules(__name__, ("follow", "serve", "status"))
