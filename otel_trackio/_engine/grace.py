"""The grace policy: how long a completed sample waits for spans and log events after its root.

Decided here only. An explicit ``sample_grace_seconds`` always wins; without it the default
depends on the path: 0 in process (one process's ``BatchSpanProcessor`` delivers a sample's
children before its root), :data:`LOG_GRACE_SECONDS` once GenAI log events feed the pipeline,
and in the OTLP receiver :data:`QUICK_GRACE_SECONDS` until the run shows spans trailing their
root, :data:`RECEIVER_GRACE_SECONDS` from then on.

The receiver's rule, measured: one process's SDK exporter delivers a sample's spans children
first (they end first, and its ``BatchSpanProcessor`` sends in order), so holding its samples 5 s
only delays them (``bench/bench_receiver.py`` 6b: 5.1 s from root to queryable, now well under
1 s). Spans trail their root when the sample spans processes (a model server continuing the
trace) or something reorders them (concurrent batches, a Collector). So a run's samples are held
:data:`QUICK_GRACE_SECONDS` until one of them shows it — spans of one sample from more than one
process (another resource, a remote parent inside the sample), a span joining a held sample, a
span arriving after its sample went out — and then, for every sample held at that moment and
after, the full grace (see :class:`~otel_trackio._core.assembly.SampleAssembler`). What it cannot
see coming: the very first sample of a run whose other-process spans trail its root by more than
the quick grace comes out in two rows (the trailing spans as a ``late`` continuation with the
sample's identity); ``--sample-grace-seconds`` holds every sample from the start.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_trackio.settings import TrackioSettings

RECEIVER_GRACE_SECONDS = 5.0
"""The OTLP receiver's default grace period: one default ``BatchSpanProcessor`` schedule delay
(``OTEL_BSP_SCHEDULE_DELAY``, 5 s), the longest a span of another process sharing the sample's
trace can trail its root when both use the SDK defaults. Concurrent batches of one client and
Collector batches (200 ms) trail by far less."""

QUICK_GRACE_SECONDS = 0.5
"""The OTLP receiver's grace period until its run shows spans trailing their root: covers a
Collector's batching (200 ms by default) and a client's batches arriving out of order, and keeps a
single-process client's samples queryable within a second of their root."""

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

    def quick_seconds(self, *, log_events: bool = False) -> float | None:
        """The grace period until the run shows spans trailing their root (None: no such phase,
        :meth:`seconds` from the start): the receiver's default only."""
        if self.explicit is not None or not self.receiver:
            return None
        return max(QUICK_GRACE_SECONDS, LOG_GRACE_SECONDS) if log_events else QUICK_GRACE_SECONDS


def grace_seconds(settings: TrackioSettings, *, receiver: bool, log_events: bool = False) -> float:
    """Shorthand for ``GracePolicy.of(settings, receiver=receiver).seconds(...)``."""
    return GracePolicy.of(settings, receiver=receiver).seconds(log_events=log_events)
