"""One place for "warn once" (or once a while): otel-trackio never floods the user's log.

A telemetry bridge hits the same problem many times in a row (a full disk, a busy exporter): the
first occurrence is a warning saying what is lost, the repeats go to debug level.
"""

from __future__ import annotations

import logging
import threading
import time

_logger = logging.getLogger("otel_trackio")


class Warnings:
    """Warns about each kind of problem once; with ``every_seconds``, again after that long."""

    def __init__(self, every_seconds: float | None = None) -> None:
        self._every = every_seconds
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, kind: str, message: str) -> None:
        """Log ``message`` as a warning, unless ``kind`` was warned about (recently): debug."""
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            repeat = last is not None and (self._every is None or now - last < self._every)
            if not repeat:
                self._last[kind] = now
        if repeat:
            _logger.debug("otel-trackio: %s", message)
        else:
            _logger.warning("otel-trackio: %s", message)

    def reset(self) -> None:
        """Forget what was warned about (tests)."""
        with self._lock:
            self._last.clear()
