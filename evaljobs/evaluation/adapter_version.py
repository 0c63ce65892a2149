"""The built-in adapter's version, apart from the adapter (:mod:`evaljobs.evaluation.adapters`).

Every run stores the version of the adapter that made its calls (``--reuse`` compares it). A submit
with the built-in adapter stores this without building one: building it loads the provider client, and
a Redis submit makes no call (issue 42, item 3). Change it when the built-in adapter's conversations
change in a way that makes earlier results not reusable.
"""

BUILT_IN_ADAPTER_VERSION = "conversation-1"

__all__ = ["BUILT_IN_ADAPTER_VERSION"]
