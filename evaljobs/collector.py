"""The cyclic garbage collector paused around work that only builds acyclic data.

Loading a catalog and building a run's report each allocate tens to hundreds of thousands of small
objects (dicts, lists, tuples of plain values) that no cycle ties together: reference counting
frees them, and the collector's passes meanwhile rescan them for nothing (about half a large
catalog's load time; 16-25 young passes and now and then a full pass over the whole process per
4,000-pair finalize). A garbage cycle made meanwhile by another thread is collected by the next
pass after.
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the collector for the block; restore it after (also when the block raises). A caller
    that had it disabled keeps it disabled."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


__all__ = ["gc_paused"]
