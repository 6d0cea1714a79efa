"""The requests the receiver is taking: from the app's first look at one to its answer.

While one is, its data may not be in the spool yet. Every request begun before the oldest one
still being taken is in the spool; once the drain has handed the spool over, it is in the
pipelines, and a sample that completed before then is as whole as its client sent it: in the
quick phase of the receiver's grace (see :mod:`otel_trackio._core.assembly.grace`) it goes out
at once instead of waiting out a timer.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class RequestsInFlight:
    """When each request being taken began (``with in_flight.taking():`` around each one)."""

    def __init__(self) -> None:
        self._began: dict[object, float] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def taking(self) -> Iterator[None]:
        """Count one request as being taken while the block runs."""
        key = object()
        with self._lock:
            self._began[key] = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                del self._began[key]

    def oldest(self) -> float | None:
        """When (monotonic) the oldest request still being taken began; None: none is."""
        with self._lock:
            return min(self._began.values(), default=None)
