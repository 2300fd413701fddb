"""The cyclic garbage collector, paused where it would only waste time."""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    """`with gc_paused():` around code that allocates many small objects without reference
    cycles (the replay's events, a trace's rows and columns): the cyclic collector would only
    rescan them, and on a full-fidelity run that rescanning cost a third of the time."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
