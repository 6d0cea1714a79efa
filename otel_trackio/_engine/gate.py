"""The pipeline's lock, with an inbox for GenAI log events handed over while it is taken.

Log events count as arrived at once: when another export holds the pipeline, ``add_events``
leaves them in the inbox and returns; whoever holds the lock takes the inbox before anything else
it does and again before it lets go (:meth:`Gate.release`), so a long span export never makes
them miss their sample's grace period.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable

from otel_trackio._core.records import LogEventRecord


class Gate:
    """A lock and the inbox of log events waiting for its holder."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inbox: deque[LogEventRecord] = deque()

    def acquire(self, timeout_seconds: float | None) -> bool:
        """Take the lock, waiting at most ``timeout_seconds`` (None: as long as it takes)."""
        if timeout_seconds is None:
            return self.lock.acquire()
        return self.lock.acquire(timeout=max(0.0, timeout_seconds))

    def hand_over(self, events: Iterable[LogEventRecord]) -> int:
        """Leave log events for the lock's holder; how many wait now."""
        self.inbox.extend(events)
        return len(self.inbox)

    def take_inbox(self) -> list[LogEventRecord]:
        """The log events handed over so far (lock held)."""
        events: list[LogEventRecord] = []
        while self.inbox:
            events.append(self.inbox.popleft())
        return events

    def release(self, *, closed: Callable[[], bool], take: Callable[[], None]) -> None:
        """Release the lock. Log events handed over while it was held are taken first
        (``take``, lock held), so none waits for the next holder."""
        while True:
            self.lock.release()
            if closed() or not self.inbox or not self.lock.acquire(blocking=False):
                return
            take()
