"""The grace policy: how long a completed sample waits for spans and log events after its root.

Decided here only. An explicit ``sample_grace_seconds`` always wins; without it the default
depends on the path: 0 in process (one process's ``BatchSpanProcessor`` delivers a sample's
children before its root), :data:`LOG_GRACE_SECONDS` once GenAI log events feed the pipeline,
:data:`RECEIVER_GRACE_SECONDS` in the OTLP receiver.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_trackio.settings import TrackioSettings

RECEIVER_GRACE_SECONDS = 5.0
"""The OTLP receiver's default grace period: one default ``BatchSpanProcessor`` schedule delay
(``OTEL_BSP_SCHEDULE_DELAY``, 5 s), the longest a span of another process sharing the sample's
trace can trail its root when both use the SDK defaults. Concurrent batches of one client and
Collector batches (200 ms) trail by far less."""

LOG_GRACE_SECONDS = 2.0
"""The in-process grace period once a log exporter feeds the pipeline: a GenAI log event is
emitted before its span ends, but the ``BatchLogRecordProcessor`` exports it up to its schedule
delay (1 s by default) later, while the ``BatchSpanProcessor`` may export the span and its root
at once (a full batch, a flush)."""


@dataclass(frozen=True, slots=True)
class GracePolicy:
    """The grace period of one run's pipeline.

    Args:
        explicit: ``sample_grace_seconds`` when set (it always wins), else None.
        receiver: the OTLP receiver's path (spans of other processes may trail their root).
    """

    explicit: float | None = None
    receiver: bool = False

    @classmethod
    def of(cls, settings: TrackioSettings, *, receiver: bool = False) -> GracePolicy:
        """The policy of ``settings`` on the in-process/offload path or the receiver's."""
        return cls(settings.sample_grace_seconds, receiver)

    def seconds(self, *, log_events: bool = False) -> float:
        """The grace period; ``log_events``: GenAI log events feed the pipeline too."""
        if self.explicit is not None:
            return max(0.0, self.explicit)
        base = RECEIVER_GRACE_SECONDS if self.receiver else 0.0
        return max(base, LOG_GRACE_SECONDS) if log_events else base


def grace_seconds(settings: TrackioSettings, *, receiver: bool, log_events: bool = False) -> float:
    """Shorthand for ``GracePolicy.of(settings, receiver=receiver).seconds(...)``."""
    return GracePolicy.of(settings, receiver=receiver).seconds(log_events=log_events)
