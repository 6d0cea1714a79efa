"""Preemption: a SIGTERM stores what was recorded before the process goes.

Slurm and Kubernetes stop a job with SIGTERM, then SIGKILL after a grace period (30 s by
default). Python's default for SIGTERM ends the process at once, without its exit hooks, so spans
still in the processor's queue and samples still open would be lost. :func:`store_on_sigterm`
installs a handler that shuts the telemetry down within a bounded time (what is open is logged as
partial), then hands the signal on: to the handler that was there before, else to the default,
which ends the process as it would have been ended. Never swallowed.

Only the main thread can install a signal handler; elsewhere nothing is installed (the exit
hooks still run on a normal exit).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from otel_trackio._engine.report import say

PREEMPTION_SECONDS = 20.0
"""How long a SIGTERM waits for what was recorded to be stored, at most: well inside the 30 s
Slurm and Kubernetes leave before SIGKILL."""

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class SigtermStore:
    """The installed handler: ``shutdown(seconds)`` once, then the previous handler."""

    def __init__(self, shutdown: Callable[[float], None], seconds: float) -> None:
        self._shutdown = shutdown
        self._seconds = seconds
        self._previous: Handler = None
        self._installed = False

    def install(self) -> bool:
        """Put this handler in place of SIGTERM's (main thread only); False when it cannot."""
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            self._previous = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)
        except (ValueError, OSError):  # not the main interpreter, or no such signal
            return False
        self._installed = True
        return True

    def uninstall(self) -> None:
        """Put the previous handler back, when this one is still the one installed."""
        if not self._installed:
            return
        self._installed = False
        with contextlib.suppress(ValueError, OSError, TypeError):
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._previous or signal.SIG_DFL)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous
        self.uninstall()
        say(
            f"otel-trackio: SIGTERM: storing what was recorded before stopping "
            f"(at most {self._seconds:.0f} s)"
        )
        # On a thread of its own: the main thread may be stopped inside a span's code.
        storing = threading.Thread(
            target=self._shutdown, args=(self._seconds,), name="otel-trackio-sigterm", daemon=True
        )
        storing.start()
        storing.join(self._seconds + 5.0)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)  # the default: the process ends as it would


def store_on_sigterm(shutdown: Callable[[float], None], seconds: float) -> SigtermStore | None:
    """Install a SIGTERM handler that calls ``shutdown(seconds)``, then the previous handler
    (see the module's docstring); None when it cannot be installed here."""
    handler = SigtermStore(shutdown, seconds)
    return handler if handler.install() else None
