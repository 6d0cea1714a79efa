"""The grace rule: how long a completed sample waits for spans and log events after its root.

Decided here only, by one :class:`GracePolicy` per run: the assembler asks it how long to hold
a sample and tells it when the run shows data trailing a root; the pipeline tells it when GenAI
log events start feeding the run; the receiver's drain only drives settling.

An explicit ``sample_grace_seconds`` always wins; without it the default depends on the path: 0 in
process (one process's ``BatchSpanProcessor`` delivers a sample's children before its root),
:data:`LOG_GRACE_SECONDS` once GenAI log events feed the pipeline, and in the OTLP receiver a *quick
phase* until the run shows its data trailing a sample's root, :data:`RECEIVER_GRACE_SECONDS` from
then on.

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
hold their events yet. The receiver expects them from the first event, or from the first model call
whose messages are not on its span (:meth:`GracePolicy.awaits_log_events`). What it cannot see
coming: the first samples of a run whose spans from another process all come after the receiver
had the rest come out in two rows (the trailing part a ``late`` continuation with the sample's
identity); ``--sample-grace-seconds`` holds every sample from the start.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from otel_trackio._core.conventions import messages_may_follow_as_log_events
from otel_trackio._core.records import SpanRecord
from otel_trackio._settings import TrackioSettings

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


@dataclass(slots=True)
class GracePolicy:
    """The grace rule of one run, and the phase the run is in.

    Args:
        explicit: ``sample_grace_seconds`` when set (it always wins), else None.
        receiver: the OTLP receiver's path (spans of other processes may trail their root).
    """

    explicit: float | None = None
    receiver: bool = False
    log_events: bool = field(default=False, init=False)
    """GenAI log events feed the run, or may (they come through another processor, on its
    schedule): see :meth:`feed_log_events` and :meth:`awaits_log_events`."""
    trailing_seen: bool = field(default=False, init=False)
    """The run showed data trailing a sample's root: the quick phase is over."""

    @classmethod
    def of(cls, settings: TrackioSettings, *, receiver: bool = False) -> GracePolicy:
        """The policy of ``settings`` on the in-process/offload path or the receiver's."""
        return cls(settings.sample_grace_seconds, receiver)

    @property
    def seconds(self) -> float:
        """The full grace period of this run."""
        if self.explicit is not None:
            return max(0.0, self.explicit)
        base = RECEIVER_GRACE_SECONDS if self.receiver else 0.0
        return max(base, LOG_GRACE_SECONDS) if self.log_events else base

    @property
    def quick(self) -> bool:
        """Whether the run is in the quick phase (the receiver's default only, until the run
        shows its data trailing a sample's root)."""
        return self.explicit is None and self.receiver and not self.trailing_seen

    @property
    def hold_seconds(self) -> float:
        """How long a sample completing now is held: in the quick phase at most
        :data:`LOG_GRACE_SECONDS` once GenAI log events feed the run, else the grace period
        (which settling cuts short); afterwards the grace period."""
        if self.quick and self.log_events:
            return min(LOG_GRACE_SECONDS, self.seconds)
        return self.seconds

    @property
    def settles(self) -> bool:
        """Whether a sample in the quick phase goes out once the receiver has handed over every
        request begun before it completed (:meth:`TracePipeline.settle`) rather than after
        :attr:`hold_seconds`: the receiver's default, until GenAI log events feed the run (a
        receiver holding every span sent may not hold their events yet)."""
        return self.quick and not self.log_events

    def feed_log_events(self) -> None:
        """GenAI log events feed the run from now on."""
        self.log_events = True

    def awaits_log_events(self, spans: Iterable[SpanRecord]) -> bool:
        """Whether a sample completing in the receiver's quick phase shows that GenAI log
        events may feed the run before any has come: a model call without its messages on
        its span (:func:`~otel_trackio._core.conventions.messages_may_follow_as_log_events`).
        Its client's log exporter may send them after the spans (the SDK's log processor
        exports every second; a client that shuts its tracer provider down first sends every
        span before any event), so the run then waits for log events as if they fed it."""
        if not self.quick or self.log_events:
            return False
        return any(messages_may_follow_as_log_events(span) for span in spans)

    def saw_trailing(self) -> bool:
        """The run showed data trailing a sample's root; True when that ended the quick phase
        (the assembler then holds every held sample for the full :attr:`seconds`)."""
        if not self.quick:
            return False
        self.trailing_seen = True
        return True
