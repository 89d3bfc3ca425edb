"""The SDK, imported with the garbage collector paused and what it made frozen afterwards.

Importing ``anthropic`` makes some 200 000 objects that live as long as the process (modules, classes, the
SDK's pydantic models). The collector, run again and again on the way, walks them and finds nothing to free,
and every full collection after that walks them again. So the collector is paused during the import, and then
everything alive is frozen (``gc.freeze()``): later collections skip it. Frozen objects are still freed by
reference counting; only a reference cycle among objects that existed at this import stays until
``gc.unfreeze()``. The import takes about a third less CPU, and each full collection of a run walks far less.
A caller that had turned the collector off finds it off. The loop and ``agentlab.lab`` import the SDK from
here, so a program that imports ``agentlab.core.loop`` directly gets the same.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused_then_frozen() -> Iterator[None]:
    """The collector off for the block, then everything alive frozen; a collector that was off stays off."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


with collector_paused_then_frozen():
    import anthropic
    import anthropic.types

__all__ = ["anthropic", "collector_paused_then_frozen"]
