"""One place for "warn once" (or once a while): otel-trackio never floods the user's log.

A telemetry bridge hits the same problem many times in a row (a full disk, a busy exporter): the
first occurrence is a warning saying what is lost, the repeats go to debug level.
"""

from __future__ import annotations

import errno
import logging
import shutil
import threading
import time
from pathlib import Path

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


NO_SPACE_SIGNS = ("No space left on device", "database or disk is full", f"[Errno {errno.ENOSPC}]")
"""How a full disk reads in an error: the OS's ENOSPC, SQLite's ``SQLITE_FULL``."""


def no_space(failure: BaseException | str) -> bool:
    """True when ``failure`` (an exception, or the text of one) says the disk is full."""
    if isinstance(failure, OSError) and failure.errno == errno.ENOSPC:
        return True
    text = failure if isinstance(failure, str) else f"{failure} {failure!r}"
    return any(sign in text for sign in NO_SPACE_SIGNS)


def no_space_on(folder: str | Path) -> str:
    """``no space left on <folder>``: a full disk, said one way everywhere."""
    return f"no space left on {folder}"


LOW_SPACE_BYTES = 16 * 1024 * 1024
"""Free space below which a failed write to a folder is taken for a full disk: SQLite needs room
for its journal beside the data, so its writes fail before the last byte is taken."""


def out_of_space(folder: str | Path) -> bool:
    """True when ``folder``'s disk has less than :data:`LOW_SPACE_BYTES` free (False when it
    cannot be read)."""
    try:
        return shutil.disk_usage(folder).free < LOW_SPACE_BYTES
    except OSError:
        return False
