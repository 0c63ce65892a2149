"""The pipeline's modules its own modules load on first use (:mod:`evaljobs.lazy`): a broker's or a batch
run's, which the memory broker's runs never need.

``rabbitmq`` loads pika (an ``amqp://`` broker), ``dramatiq_internals`` the Redis client (a ``redis://``
broker), ``batching`` the provider batch APIs (``--batch``). A pipeline module writes
``on_demand.rabbitmq.ping(url)`` with ``from evaljobs.pipeline import on_demand`` at the top. Why not the
package face (``from evaljobs import pipeline``) as other packages do: the face names the modules that
use these, so a module of the package importing its own face would be an import cycle.
"""
from evaljobs.lazy import submodules

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and editors see; at run time each loads on first use (below)
    from evaljobs.pipeline import batching as batching
    from evaljobs.pipeline import dramatiq_internals as dramatiq_internals
    from evaljobs.pipeline import rabbitmq as rabbitmq

__getattr__ = submodules("evaljobs.pipeline", ("batching", "dramatiq_internals", "rabbitmq"))
