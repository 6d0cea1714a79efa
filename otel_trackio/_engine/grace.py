"""The grace policy: how long a completed sample waits for spans and log events after its root.

Decided here only. An explicit ``sample_grace_seconds`` always wins; without it the default
depends on the path: 0 in process (one process's ``BatchSpanProcessor`` delivers a sample's
children before its root), :data:`LOG_GRACE_SECONDS` once GenAI log events feed the pipeline,
and in the OTLP receiver a *quick phase* until the run shows its data trailing a sample's root,
:data:`RECEIVER_GRACE_SECONDS` from then on.

The receiver's rule. One process's SDK exporter delivers a sample's spans children
first (they end first, and its ``BatchSpanProcessor`` sends in order), so in the quick phase a
completed sample goes out as soon as every request the receiver had begun taking before the sample
completed has been handed over to its pipeline
(:meth:`~otel_trackio._engine.pipeline.TracePipeline.settle`; the drain notes when the oldest
request still being taken began and where the spool ends, and settles once it has handed the
spool over that far), at the latest after the grace period (requests that never end): a sample
is in storage well within a second of its root (``docs/performance.md``, figures 6b/6c). Waiting
for those requests rather than for a timer keeps one client's concurrent batches whole: the OTel JS
SDK's ``forceFlush`` sends all its batches at once, and a short fixed wait split some samples of
nearly every burst.

Spans trail their root when the sample spans processes (a model server continuing the trace),
or one client's batches go concurrently or are retried, or a Collector reorders them. So a run is
quick until one of its samples shows it — spans of one sample from more than one process (another
resource, a remote parent inside the sample), a span joining a held sample, a span or a GenAI log
event arriving after its sample went out — and then, for every sample held at that moment and
after, the full grace (see :class:`~otel_trackio._core.assembly.SampleAssembler`).
Once GenAI log events feed a run, its samples wait for them (:data:`LOG_GRACE_SECONDS`): they
come through another processor on its own schedule, so a receiver holding every span sent may not
hold their events yet. What it cannot see coming: the first samples of a run whose spans from
another process, or whose log events, all come after the receiver had the rest come out in two
rows (the trailing part a ``late`` continuation with the sample's identity);
``--sample-grace-seconds`` holds every sample from the start.
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

    def quick_seconds(self, *, log_events: bool = False) -> float | None:
        """The longest a completed sample waits until the run shows its data trailing a
        sample's root (None: no such phase, :meth:`seconds` from the start; the receiver's
        default only): :data:`LOG_GRACE_SECONDS` once GenAI log events feed the run, else the
        grace period, which settling (:meth:`settles`) cuts short."""
        if self.explicit is not None or not self.receiver:
            return None
        return LOG_GRACE_SECONDS if log_events else RECEIVER_GRACE_SECONDS

    def settles(self, *, log_events: bool = False) -> bool:
        """Whether a sample in the quick phase goes out once the receiver has handed over every
        request begun before it completed (:meth:`TracePipeline.settle`) rather than after
        :meth:`quick_seconds`: the receiver's default, until GenAI log events feed the run
        (they come through another processor on its own schedule, so a receiver holding every
        span sent may not hold their events yet)."""
        return self.quick_seconds() is not None and not log_events
