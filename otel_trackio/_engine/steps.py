"""The latest rollout step known in this process: one place, read by traces and metrics alike.

The in-process span pipelines note every step they see and take a sample without a ``step`` (nor
an ancestor's) to the latest one; ``set_step`` lets training code say it directly, and reaches
both the traces' fallback and the metric exporter's. (The OTLP receiver and the offload writer
keep a latest step per run instead: their data comes from other processes.)
"""

from __future__ import annotations

import threading


class LatestStep:
    """A latest step, thread-safe: :meth:`note` only moves it forward, :meth:`set` sets it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: int | None = None

    def latest(self) -> int | None:
        """The latest step, or None when none was seen yet."""
        return self._latest

    def note(self, step: int) -> None:
        """Record a step seen in telemetry; the latest step only moves forward."""
        with self._lock:
            if self._latest is None or step > self._latest:
                self._latest = step

    def set(self, step: int | None) -> None:
        """Declare the current step (None: forget it)."""
        with self._lock:
            self._latest = None if step is None else int(step)


PROCESS_STEPS = LatestStep()
"""The process's latest step (what ``set_step`` sets and ``latest_step`` reads)."""


def set_step(step: int) -> None:
    """Declare the current training step, for spans and metrics recorded without a ``step``."""
    PROCESS_STEPS.set(int(step))


def note_step(step: int) -> None:
    """Record a step seen in telemetry; the latest step only moves forward."""
    PROCESS_STEPS.note(step)


def latest_step() -> int | None:
    """The latest step known in this process, or None when none was seen yet."""
    return PROCESS_STEPS.latest()


def reset_steps() -> None:
    """Forget the known step (tests and long-lived processes starting a new run)."""
    PROCESS_STEPS.set(None)
