"""Where a log exporter of this process sends GenAI log events: the latest span exporter's
intake for the same project and run (its pipeline, or with offload its spool)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Protocol

from otel_trackio._core.records import LogEventRecord


class EventIntake(Protocol):
    """Where GenAI log events go: a span pipeline in process, or an offloading span exporter's
    spool (its writer process joins them to their samples)."""

    @property
    def closed(self) -> bool:
        """True once it takes no more events."""

    def add_events(self, events: Iterable[LogEventRecord], timeout_seconds: float = 30.0) -> bool:
        """Hand over log events; False when they could not be taken."""

    def expect_log_events(self) -> None:
        """A log exporter feeds it: samples wait for their log events (a grace period)."""


_registry: dict[tuple[str | None, str | None], weakref.ref[EventIntake]] = {}
_registry_lock = threading.Lock()


def register_intake(intake: EventIntake, project: str | None, name: str | None) -> None:
    """Make ``intake`` the one :func:`find_intake` gives for ``project``/``name``."""
    with _registry_lock:
        _registry[(project, name)] = weakref.ref(intake)


def find_intake(project: str | None, name: str | None) -> EventIntake | None:
    """Where the latest span exporter of ``project``/``name`` in this process takes log events."""
    with _registry_lock:
        ref = _registry.get((project, name))
    intake = ref() if ref is not None else None
    return intake if intake is not None and not intake.closed else None
