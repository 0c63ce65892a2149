"""The simulated provider's modules its own modules load on first use (:mod:`evaljobs.lazy`): the batch
desk, which a run that sends no batch request never needs.

``batches`` is the batch APIs' desk (OpenAI Batch, Anthropic Message Batches, multipart uploads read with
:mod:`email`): the server makes its :class:`~evaljobs.simulated.batches.BatchDesk` on the first batch
request (or the first look at ``SimulatedProvider.batches``). A simulated module writes
``on_demand.batches.BatchDesk(...)`` with ``from evaljobs.simulated import on_demand`` at the top. Why not
the package face (``from evaljobs import simulated``) as other packages do: the face names the modules that
use these, so a module of the package importing its own face would be an import cycle.
"""
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time it loads on first use (below)
    from evaljobs.simulated import batches as batches

__getattr__ = submodules("evaljobs.simulated", ("batches",))
