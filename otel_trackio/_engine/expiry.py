"""The expiry timer: logs samples whose grace period or TTL ends while no data comes.

A daemon thread runs while something is held or open and sleeps until it is due; a nearer due
time (or closing) wakes it early. It takes the pipeline's lock to read the due time and calls
the pipeline's ``expire`` when that time comes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class ExpiryTimer:
    """Calls ``expire`` when ``next_due`` (monotonic seconds; None: nothing due, or closed) comes.

    Args:
        acquire: takes the pipeline's lock; ``release`` lets it go.
        next_due: when something is next due (lock held); None ends the thread.
        expire: logs what is due (takes the lock itself).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        *,
        acquire: Callable[[], object],
        release: Callable[[], None],
        next_due: Callable[[], float | None],
        expire: Callable[[], object],
        clock: Callable[[], float],
    ) -> None:
        self._acquire = acquire
        self._release = release
        self._next_due = next_due
        self._expire = expire
        self._clock = clock
        self._thread: threading.Thread | None = None
        self._due: float | None = None
        self._wake = threading.Event()

    def schedule(self, due: float | None) -> None:
        """Make sure the timer wakes by ``due`` (lock held; None: nothing to do)."""
        if due is None:
            return
        if self._thread is None:
            self._due = due
            self._thread = threading.Thread(
                target=self._run, name="otel-trackio-expiry", daemon=True
            )
            self._thread.start()
        elif self._due is None or due < self._due:
            self._due = due
            self._wake.set()

    def wake(self) -> None:
        """Wake the thread now (closing: it sees nothing due and ends)."""
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._acquire()
            try:
                due = self._next_due()
                if due is None:
                    self._thread = self._due = None
                    return
                self._due = due
                self._wake.clear()
            finally:
                self._release()
            delay = due - self._clock()
            if delay > 0:
                self._wake.wait(delay)
                continue  # woken early (a nearer due time, or closing): look again
            self._expire()
