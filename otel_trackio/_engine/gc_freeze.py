"""The ``gc_freeze`` setting: the setup's objects frozen out of the garbage collector's walk.

Each full collection walks every tracked object, on whichever thread allocates — a rollout's event
loop included. Freezing what is alive once the setup is done (imports, providers, the exporter)
leaves the collector only what the rollout creates afterwards, so its pauses on the rollout's
threads are short (``docs/performance.md``, figure 13). ``configure()`` and an exporter built by
hand each hold the freeze; the last to let go thaws it, and only when nothing else (the application)
had frozen objects first.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable

__all__ = ["freeze_setup", "no_hold"]

_lock = threading.Lock()
_holders = 0
_thaw_at_last = False


def freeze_setup() -> Callable[[], None]:
    """``gc.collect(); gc.freeze()`` and hold it; returns the idempotent release of this hold
    (the last release unfreezes, unless someone else's ``gc.freeze()`` came first)."""
    global _holders, _thaw_at_last
    with _lock:
        if _holders == 0:
            _thaw_at_last = gc.get_freeze_count() == 0
        gc.collect()
        gc.freeze()
        _holders += 1
    released = False

    def release() -> None:
        global _holders
        nonlocal released
        with _lock:
            if released:
                return
            released = True
            _holders -= 1
            if _holders == 0 and _thaw_at_last:
                gc.unfreeze()

    return release


def no_hold() -> None:
    """The release of a hold never taken (``gc_freeze`` off, or held elsewhere)."""
