"""The span pipeline every path shares: records → samples → Trace dicts → Trackio, durably.

``TracePipeline.add(records)`` buffers span records in a :class:`SampleAssembler`, converts every
sample that is due (:func:`sample_to_trace`), logs them with one ``run.log({key: [...]},
step=s)`` per step, and writes them to Trackio's storage before it returns. A sample counts as
logged once that write succeeded; until then it is kept (see :meth:`TracePipeline.buffered_items`)
and a failed or timed-out write is retried — the samples Trackio dropped are logged again, minus
the spans its storage already holds;
``TracePipeline.add_events(events)`` does the same for GenAI log events, which join their spans.
A timer thread does the same for samples whose grace period or TTL ends while no data comes. The
in-process :class:`~otel_trackio.TrackioSpanExporter` (with
:class:`~otel_trackio.TrackioLogExporter` beside it) and the OTLP receiver both feed one.

Its parts, one job each: :mod:`.gate` (the lock and the log events' inbox), :mod:`.expiry` (the
timer), :mod:`.batches` (conversion, one batch per step in sample order), :mod:`.writes` (what
is kept until storage holds it, the relog after a failed write, the bound), :mod:`.outcome_tables`
(each step's outcome table) and :mod:`.grace` (how long a sample waits).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from otel_trackio._core.assembly import SampleAssembler
from otel_trackio._core.assembly.grace import GracePolicy
from otel_trackio._core.records import LogEventRecord, SpanRecord
from otel_trackio._core.samples import OpenSampleLookup, OpenSpanSource, Sample, StepMemory
from otel_trackio._core.values import parse_step
from otel_trackio._engine.batches import (
    WRITE_BEHIND_PART_SPANS,
    Converter,
    by_step,
    in_parts,
    step_durations,
)
from otel_trackio._engine.expiry import ExpiryTimer
from otel_trackio._engine.gate import Gate
from otel_trackio._engine.outcome_tables import OutcomeTables
from otel_trackio._engine.stats import ExportStats
from otel_trackio._engine.steps import LatestStep
from otel_trackio._engine.warn import Warnings
from otel_trackio._engine.writes import WriteLedger
from otel_trackio._settings import TrackioSettings
from otel_trackio._trackio.sink import TrackioSink

T = TypeVar("T")

#: While writes are behind, how often the timer asks the store what it stored (seconds).
SETTLE_BEHIND_SECONDS = 0.05


class StoredCheck(Protocol):
    """A spool drainer's check of released samples against Trackio's storage (see
    :class:`~otel_trackio._spool.replay.ReplayCheck`); called with the pipeline held."""

    def __call__(self, sample: Sample) -> Sample | None:
        """The sample to log (maybe only its spans not stored yet), or None when it is stored
        already."""

    def accounted(self, samples: Iterable[Sample]) -> None:
        """These samples are now in storage and counted as logged."""


class TracePipeline:
    """Span records in, one Trackio Trace per sample out, written durably. Thread-safe.

    Args:
        settings: what to read and how (attribute names, limits, key, decoder).
        sink: the Trackio run to log into.
        grace: how long a completed sample waits for spans (and log events) arriving after its
            root (default: the in-process policy of ``settings``, see
            :class:`~otel_trackio._core.assembly.grace.GracePolicy`, this run's own).
        open_samples: where the identity of sample roots still open is looked up at a flush.
        open_spans: where the spans still open of a trace logged at the TTL are read.
        steps: where the latest step is read and noted (default: the assembler's own).
        clock: monotonic seconds (the assembler's and the timer's).
        beside_rollout: the rollout runs in this process (in process): conversion hands the GIL
            over once a millisecond (a writer process or the receiver has no rollout to wait).
        write_behind: what :meth:`add` logs is handed to the sink's store process, and ``add``
            returns before it is stored (a spool drainer's spool keeps it until then, and
            :meth:`buffered_items` names it; in process the ledger keeps it, and the store
            finishes what it took if this process dies); the next write, :meth:`settle_writes`,
            a flush or the timer settles it. Otherwise everything is stored before the call
            returns.
    """

    def __init__(
        self,
        settings: TrackioSettings,
        sink: TrackioSink,
        *,
        grace: GracePolicy | None = None,
        open_samples: OpenSampleLookup | None = None,
        open_spans: OpenSpanSource | None = None,
        steps: StepMemory | None = None,
        clock: Callable[[], float] = time.monotonic,
        beside_rollout: bool = True,
        write_behind: bool = False,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._settle_due: float | None = None  # when the timer next asks the store (behind)
        self._write_behind = write_behind
        self._beside_rollout = beside_rollout  # the rollout runs in this process (in process)
        self.sink = sink
        self.grace = grace if grace is not None else GracePolicy.of(settings)
        self.assembler = SampleAssembler(
            settings,
            grace=self.grace,
            open_samples=open_samples,
            open_spans=open_spans,
            steps=steps,
            clock=clock,
        )
        self.stats = ExportStats()
        self._closed = False
        self._gate = Gate()
        self._lock = self._gate.lock
        self._timer = ExpiryTimer(
            acquire=self._lock.acquire,
            release=self._unlock,
            next_due=self._next_due,
            expire=self.expire,
            clock=clock,
        )
        # A spool drainer's check of replayed samples against Trackio's storage (see
        # StoredCheck).
        self.stored_filter: StoredCheck | None = None
        self._warn = Warnings(every_seconds=10.0)
        self._convert = Converter(settings, self.stats, self._warn)
        self._writes = WriteLedger(
            settings, sink, self.stats, self._warn, self._convert, written=self._written
        )
        self.write_timeout_seconds = 30.0
        self._outcomes = OutcomeTables(settings, sink, self._warn)
        self.tables = self._outcomes.tables  # each step's outcome rows, until it is over
        # The steps Traces were logged at (for the summary's "steps covered").
        self._steps_logged: set[int] = set()
        # The latest step on spans that arrived, their samples logged or still held (grace).
        self._arrived = LatestStep()

    def _written(self, samples: list[Sample]) -> None:
        if self.stored_filter is not None:
            self.stored_filter.accounted(samples)

    def read_locked(self, read: Callable[[], T]) -> T:
        """``read()`` with the pipeline held: what it reads is consistent with the counters."""
        self._lock.acquire()
        try:
            return read()
        finally:
            self._unlock()

    @property
    def logged_steps(self) -> frozenset[int]:
        """The steps Traces were logged at by this pipeline."""
        return frozenset(self._steps_logged)

    def _note_arrived(self, spans: list[SpanRecord]) -> None:
        attribute = self.settings.step_attribute
        steps = [
            step
            for span in spans
            if (value := span.attributes.get(attribute)) is not None
            and (step := parse_step(value)) is not None
        ]
        if steps:
            self._arrived.note(max(steps))

    def latest_step(self) -> int | None:
        """The run's latest step, for a metric point without one: the latest step its samples
        were logged at or the producer declared, or a later one on spans that arrived and wait
        (a sample held for its GenAI log events) — so metrics recorded after a step's spans
        land at that step whether or not its samples were logged yet."""
        known = self.assembler.steps.latest()
        arrived = self._arrived.latest()
        if known is None or (arrived is not None and arrived > known):
            return arrived
        return known

    def declare_step(self, step: int | None) -> None:
        """The producer's ``set_step``: samples without a step of their own take it."""
        self.assembler.steps.set(step)

    # -- entry points -------------------------------------------------------------------------

    def add(self, records: Iterable[SpanRecord], timeout_seconds: float | None = 30.0) -> bool:
        """Buffer span records and log, durably, every sample that is due. False on a failure
        (warned and counted); never raises. ``timeout_seconds``: how long to wait for the
        pipeline when another call holds it; None waits as long as it takes (a spool drainer:
        its data is safe in the spool meanwhile, and giving up would lose it)."""
        spans = list(records)

        def buffer() -> list[Sample]:
            self.stats.spans_received += len(spans)
            self._note_arrived(spans)
            return self.assembler.add(spans)

        return self._take(buffer, f"{len(spans)} spans", timeout_seconds)

    def add_events(
        self, events: Iterable[LogEventRecord], timeout_seconds: float | None = 30.0
    ) -> bool:
        """Hand GenAI log events to the samples of their spans (see
        :meth:`SampleAssembler.add_events`) and log, durably, every sample that is due.

        The events count as arrived at once: when another export holds the pipeline, they go
        to an inbox that the pipeline empties before anything else it does (and before it lets
        go), so a long span export never makes them miss their sample's grace period. Past
        ``max_buffered_spans`` events in that inbox, the call waits for the pipeline instead.
        False on a failure (warned); never raises.
        """
        if self._closed:
            return False
        blocking = self._gate.hand_over(events) > self.settings.max_buffered_spans
        return self._take(list, "log events", timeout_seconds, blocking=blocking)

    def expect_log_events(self) -> None:
        """A log exporter feeds this pipeline too: a completed sample now waits for log events
        of its spans (they travel through another processor and may come after the root) as
        long as the grace policy says (:data:`LOG_GRACE_SECONDS` unless set). The first log
        events to arrive do the same (the OTLP receiver learns it from its traffic)."""
        self._lock.acquire()
        try:
            self._expect_log_events()
        finally:
            self._unlock()

    def _expect_log_events(self) -> None:
        """:meth:`expect_log_events`, lock held."""
        self.assembler.expect_log_events()

    def _take(
        self,
        buffer: Callable[[], list[Sample]],
        what: str,
        timeout_seconds: float | None,
        *,
        blocking: bool = True,
    ) -> bool:
        """``add``/``add_events``: take the inbox's events, ``buffer`` the data, then log and
        write what is due. Not ``blocking``: when the lock is taken, its holder does it."""
        if self._closed:
            return False
        if not blocking:
            if not self._lock.acquire(blocking=False):
                return True
        elif not self._gate.acquire(timeout_seconds):
            self.stats.failed_exports += 1
            self._warn("busy", f"exporter busy for {timeout_seconds}s; {what} lost")
            return False
        try:
            if self._closed:
                return False
            samples = self._drain()
            samples.extend(buffer())
            samples.extend(self.assembler.expire())
            timeout = self._write_timeout(timeout_seconds)
            if self._write_behind:
                return self._log_behind(samples, timeout)
            logged = self._log(samples)
            self._schedule()
            # Write them now (the caller's export thread): an export that returned SUCCESS
            # survives a crash, and a disk that is full or read-only shows up as a failure.
            return self._write(timeout) and logged
        except Exception as exc:  # noqa: BLE001 - export() must never raise
            self.stats.failed_exports += 1
            self._warn("export", f"export failed: {exc!r}")
            return False
        finally:
            self._unlock()

    def _log_behind(self, samples: list[Sample], timeout_seconds: float) -> bool:
        """Log ``samples`` and hand them to the store process part by part (lock held): each
        part is converted while the store writes the one before it."""
        ok = True
        for part in in_parts(samples, WRITE_BEHIND_PART_SPANS):
            logged = self._log(part)
            ok = self._writes.write_behind(timeout_seconds) and logged and ok
        self._schedule()
        return ok

    def _drain(self) -> list[Sample]:
        """Give the inbox's log events to the assembler (lock held); the samples now due."""
        events: list[LogEventRecord] = self._gate.take_inbox()
        if not events:
            return []
        if not self.log_events:
            self._expect_log_events()
        self.stats.log_events_received += len(events)
        return self.assembler.add_events(events)

    def _unlock(self) -> None:
        """Release the lock. Log events handed over while it was held (their ``add_events``
        found it taken) are taken first, so none waits for the next export."""
        self._gate.release(closed=lambda: self._closed, take=self._take_inbox)

    def _take_inbox(self) -> None:
        """Log and write what the inbox's log events make due (lock held, at a release)."""
        try:
            logged = self._log(self._drain())
            self._schedule()
            if not (self._write(self.write_timeout_seconds) and logged):
                self.stats.failed_exports += 1
        except Exception as exc:  # noqa: BLE001 - never fail the caller that let go
            self.stats.failed_exports += 1
            self._warn("export", f"taking log events failed: {exc!r}")

    def flush(self, timeout_seconds: float = 30.0, open_spans: Iterable[SpanRecord] = ()) -> bool:
        """Log every open sample now (held ones whole, the rest as partial), durably;
        ``open_spans`` (spans not ended, read as unfinished records) join their samples."""
        if self._closed:
            return False
        if not self._lock.acquire(timeout=max(0.0, timeout_seconds)):
            return False
        try:
            return self._flush_all(timeout_seconds, open_spans)
        finally:
            self._unlock()

    def stop_writing(self) -> None:
        """Write nothing more to Trackio's storage, from now on: a spool's drainer asked to stop
        leaves what is not stored to the spool (see
        :func:`~otel_trackio._spool.drain.leave_to_the_spool`) instead of waiting out a storage
        lock another process holds. Without the lock, so a thread waiting on storage with it
        held gives up at its next write."""
        self._writes.stop()

    def close(
        self,
        timeout_seconds: float = 30.0,
        *,
        flush: bool = True,
        open_spans: Iterable[SpanRecord] = (),
    ) -> None:
        """Flush (unless ``flush=False``: a spool keeps what is open; ``open_spans`` as for
        :meth:`flush`), then release the run (finished when this package started it).
        Idempotent; waits at most ``timeout_seconds`` for work in progress."""
        acquired = self._lock.acquire(timeout=max(0.0, timeout_seconds))
        try:
            if self._closed:
                return
            self._closed = True
            self._timer.wake()  # the timer sees the flag and ends
            if acquired and flush:
                self._flush_all(timeout_seconds, open_spans)
            elif acquired:
                self._outcomes.log(flush=True)
                self._write(timeout_seconds)
            else:
                self._warn(
                    "shutdown",
                    "shutdown timed out waiting for an export; "
                    f"{self.assembler.buffered_spans} open spans lost",
                )
            if acquired and self._writes and flush:
                # In process nothing keeps them past this point.
                self.stats.samples_lost += len(self._writes)
                self._warn(
                    "shutdown-lost",
                    f"shutdown: {self.write_failure}; {len(self._writes)} samples "
                    f"lost ({self.stats.samples_lost} samples lost in all)",
                )
            elif acquired and self._writes:
                why = "stopped writing" if self._writes.stopped else self.write_failure
                self._warn(
                    "shutdown-kept",
                    f"shutdown: {why}: {len(self._writes)} samples waiting in the spool; the next "
                    "start for the run (or `otel-trackio drain`) stores them",
                )
        finally:
            if acquired:
                self._lock.release()  # closed: nothing more is taken
        self.sink.release()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    @property
    def unwritten_samples(self) -> int:
        """Samples logged but not yet written to storage (a failed or timed-out write)."""
        return len(self._writes)

    @property
    def failing_since(self) -> float | None:
        """When (monotonic) writes to storage started failing; None while they succeed."""
        return self._writes.failing_since

    def retry_writes(self, timeout_seconds: float | None = None) -> bool:
        """Try again to write what a failed or timed-out write left (True: nothing is left).
        Never raises."""
        wait = self.write_timeout_seconds if timeout_seconds is None else timeout_seconds
        if not self._lock.acquire(timeout=max(0.0, wait)):
            return False
        try:
            return self._write(wait)
        except Exception as exc:  # noqa: BLE001 - a retry must not kill its caller
            self._warn("storage", f"retrying the write failed: {exc!r}")
            return False
        finally:
            self._unlock()

    @property
    def write_failure(self) -> str:
        """Why Trackio's storage does not take writes, in plain words (``no space left on
        <folder>``, else what failed)."""
        return f"Trackio's storage still fails ({self._writes.failure_text or 'timed out'})"

    @property
    def writing_behind(self) -> bool:
        """True while a write behind holds samples not yet known to be stored."""
        return self._writes.writing_behind

    def settle_writes(self) -> bool:
        """Wait for the write behind, if any (True: nothing is left unwritten). Never raises."""
        return not self._writes.writing_behind or self.retry_writes()

    def _write_timeout(self, timeout_seconds: float | None) -> float:
        if timeout_seconds is None:
            return self.write_timeout_seconds
        return min(timeout_seconds, self.write_timeout_seconds)

    # -- the expiry timer ---------------------------------------------------------------------

    def _schedule(self) -> None:
        """Make sure the timer wakes when the assembler next has something due (lock held)."""
        if not self._closed:
            self._timer.schedule(self._next_due())

    def _next_due(self) -> float | None:
        """When the timer has something to do (lock held): a sample's grace period or TTL
        ending, or, while writes are behind, asking the store what it stored since (every
        :data:`SETTLE_BEHIND_SECONDS`), so that stats and failures do not wait for the next
        call. None once closed."""
        if self._closed:
            return None
        due = self.assembler.next_due()
        if not self._writes.writing_behind:
            self._settle_due = None
        elif self._settle_due is None:
            self._settle_due = self._clock() + SETTLE_BEHIND_SECONDS
        if self._settle_due is not None:
            due = self._settle_due if due is None else min(due, self._settle_due)
        return due

    def expire(self, timeout_seconds: float = 30.0) -> bool:
        """Log, durably, the held samples whose grace period ended and the traces idle past the
        TTL (writing behind: handed to the store, and what it stored since counted). The timer
        calls it; so can anyone. False on a failure (warned); never raises."""
        if not self._lock.acquire(timeout=max(0.0, timeout_seconds)):
            return False
        try:
            if self._closed:
                return False
            self._settle_due = None
            samples = self._drain()  # events handed over before the grace period ended
            samples.extend(self.assembler.expire())
            if self._write_behind:  # and what the store stored since is counted, unwaited
                return self._log_behind(samples, timeout_seconds)
            logged = self._log(samples)
            return self._write(timeout_seconds) and logged
        except Exception as exc:  # noqa: BLE001 - a timer thread must not die of one sample
            self.stats.failed_exports += 1
            self._warn("expire", f"logging expired samples failed: {exc!r}")
            return False
        finally:
            self._unlock()

    @property
    def log_events(self) -> bool:
        """GenAI log events feed this pipeline (see :meth:`expect_log_events`)."""
        return self.grace.log_events

    @property
    def settling(self) -> bool:
        """True when :meth:`settle` may release something: samples held in the quick phase of
        the receiver's grace. A few plain reads (the caller is the one adding spans)."""
        return not self._closed and self.assembler.settles

    def settle(self, received: float) -> bool:
        """The OTLP receiver's word: every request begun before ``received`` (monotonic, this
        pipeline's clock) has reached this pipeline. Log, durably, the samples of the quick
        phase that completed before then: they hold all their client sent with them (see
        :class:`GracePolicy`). False on a failure (warned); never raises."""
        if not self.settling:
            return True
        return self._take(lambda: self.assembler.settle(received), "settled samples", None)

    # -- stages -------------------------------------------------------------------------------

    def _flush_all(self, timeout_seconds: float, open_spans: Iterable[SpanRecord] = ()) -> bool:
        try:
            logged = self._log(self._drain() + self.assembler.flush(open_spans))
        except Exception as exc:  # noqa: BLE001
            self._warn("flush", f"flushing open samples failed: {exc!r}")
            logged = False
        self._outcomes.log(flush=True)
        return self._write(timeout_seconds) and logged

    def _without_unusable_steps(self, samples: list[Sample]) -> list[Sample]:
        """Leave out (counted, warned) the samples whose own step value is no step: storing one
        at a step it did not carry would put its reward next to the wrong curve."""
        kept: list[Sample] = []
        unusable: list[Any] = []
        for sample in samples:
            value = sample.identity.unusable_step
            if value is None:
                kept.append(sample)
            else:
                unusable.append(value)
                self.stats.unusable_step_spans += len(sample.spans)
        self.stats.unusable_steps += len(unusable)
        shown = repr(unusable[0])
        self._warn(
            "unusable step",
            f"{len(unusable)} samples not stored: their {self.settings.step_attribute!r} is no "
            f"step (e.g. {shown[:80]}); a step is an integer (or a string of one) within signed "
            f"64-bit ({self.stats.unusable_steps} so far)",
        )
        return kept

    def _log(self, samples: list[Sample]) -> bool:
        """Convert and log samples: one ``run.log`` per step. False when a log call failed
        (those samples are counted lost)."""
        if not samples:
            return True
        if any(sample.identity.unusable_step is not None for sample in samples):
            samples = self._without_unusable_steps(samples)
        if self.stored_filter is not None:
            fresh = [kept for kept in map(self.stored_filter, samples) if kept is not None]
            self.stats.already_stored += len(samples) - len(fresh)
            samples = fresh
        durations_key = self.settings.step_durations_key
        if durations_key is not None and any(s.identity.step_spans for s in samples):
            self._log_step_durations(durations_key, [s for s in samples if s.identity.step_spans])
            samples = [s for s in samples if not s.identity.step_spans]
        batches = by_step(samples, self._convert, beside_rollout=self._beside_rollout)
        evicted = sum(1 for sample in samples if sample.identity.partial_reason == "capacity")
        if evicted:
            self.stats.evicted_samples += evicted
            self._warn(
                "capacity",
                f"span buffer full ({self.assembler.max_spans} spans): {evicted} open samples "
                f"logged early as partial ({self.stats.evicted_samples} so far)",
            )
        ok = True
        for step, converted in batches.items():
            # In sample order: Trackio numbers a log call's Traces (the ``:N`` chip) as listed.
            traces = [trace for _, trace in converted]
            self._writes.keep(converted)
            try:
                self.sink.log_traces(self.settings.key, traces, step)
            except Exception as exc:  # noqa: BLE001
                self.stats.failed_exports += 1
                self._writes.log_failed()  # kept: logged again with the next write
                self._warn(
                    "log",
                    f"trackio log at step {step} failed: {exc!r}; {len(traces)} samples kept "
                    "to be logged again",
                )
                ok = False
                continue
            self.stats.log_calls += 1
            self.stats.logged_at(step, step not in self._steps_logged)
            self._steps_logged.add(step)
            self.assembler.steps.note(step)  # the run's metrics' fallback step
            self._outcomes.note(step, traces)
        self._outcomes.log(flush=False)
        return ok

    def _log_step_durations(self, key: str, samples: list[Sample]) -> None:
        """The spans of steps around their samples as scalars: ``<key>/<span name>``, their
        durations in seconds (spans of one name summed), one log entry per step, written with
        the Traces."""
        for step, values in step_durations(samples, key).items():
            try:
                self.sink.log(values, step)
            except Exception as exc:  # noqa: BLE001
                self._warn("durations", f"trackio log of step {step}'s durations failed: {exc!r}")
                continue
            self.stats.step_durations_logged += len(values)

    def _write(self, timeout_seconds: float) -> bool:
        """Make what was logged durable in Trackio's storage (lock held; see
        :meth:`WriteLedger.write`)."""
        return self._writes.write(timeout_seconds)

    def buffered_items(self) -> list[object]:
        """Every span record and GenAI event record waiting here: spans buffered for a root
        or held in a grace period (with the events joined to them), events waiting for their
        span. What a spool drainer must not forget before it is logged."""

        def collect() -> list[object]:
            items: list[object] = []
            records = list(self.assembler.records())
            records.extend(self._writes.spans())
            for record in records:
                items.append(record)
                items.extend(record.events)
            items.extend(event.event for event in self.assembler.waiting_events())
            items.extend(event.event for event in self._gate.inbox)
            return items

        return self.read_locked(collect)
