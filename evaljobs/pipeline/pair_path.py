"""The pair path, loaded on first use by the modules every broker binding declares (:mod:`evaljobs.lazy`).

Every process that binds a broker declares the actors (:mod:`evaljobs.pipeline.actors`) and the crash
counter (:mod:`evaljobs.pipeline.crash_counting`), a Redis submitter too; their bodies run pairs, record
results and finalize runs only in a worker. Imported at the top, the pair path (the provider client and
httpx, the evaluation, the governor's permits, the adapters) made a Redis submit load what it never runs
(issue 42, item 3). A module writes ``pair_path.pairs.attempt(...)`` with ``from evaljobs.pipeline
import pair_path`` at the top.

Why a second list beside :mod:`evaljobs.pipeline.on_demand` (the brokers' and batch runs' modules): the
pair path itself loads batching through ``on_demand``, so one list naming both would be an import
cycle. Nothing named here may import this module.
"""
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.pipeline import barrier as barrier
    from evaljobs.pipeline import pairs as pairs
    from evaljobs.pipeline import prefetch as prefetch
    from evaljobs.pipeline import runtime as runtime
    from evaljobs.pipeline import strategies as strategies

_load = submodules("evaljobs.pipeline", ("barrier", "pairs", "prefetch", "runtime", "strategies"))


def __getattr__(name: str) -> object:
    """The submodule, loaded once and then kept here: a worker reads ``pair_path.pairs`` several times a
    pair, and a plain attribute costs less than the loader's look-up each time."""
    module = _load(name)
    globals()[name] = module
    return module
