"""The latest rollout step known in this process.

The span exporter records every step it sees; ``set_step`` lets training code say it directly.
The metric exporter reads it to place data points that carry no ``step`` attribute.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_latest: int | None = None


def set_step(step: int) -> None:
    """Declare the current training step, for metrics recorded without a ``step`` attribute."""
    global _latest
    with _lock:
        _latest = int(step)


def note_step(step: int) -> None:
    """Record a step seen in telemetry; the latest step only moves forward."""
    global _latest
    with _lock:
        if _latest is None or step > _latest:
            _latest = step


def latest_step() -> int | None:
    """The latest step known in this process, or None when none was seen yet."""
    return _latest


def reset_steps() -> None:
    """Forget the known step (tests and long-lived processes starting a new run)."""
    global _latest
    with _lock:
        _latest = None
