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
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from otel_trackio._core.assembly import SampleAssembler
from otel_trackio._core.convert import TraceDict, bare_trace, sample_to_trace
from otel_trackio._core.outcomes import StepTables, outcome_row
from otel_trackio._core.records import LogEventRecord, SpanRecord
from otel_trackio._core.samples import OpenSampleLookup, Sample, StepMemory, missing_spans
from otel_trackio._core.values import as_float
from otel_trackio._engine import steps as _steps
from otel_trackio._engine.grace import GracePolicy
from otel_trackio._engine.open_samples import OPEN_SAMPLES
from otel_trackio._engine.sink import TrackioSink, stored_span_ids
from otel_trackio._engine.stats import ExportStats
from otel_trackio._engine.warn import Warnings
from otel_trackio.settings import TrackioSettings

_logger = logging.getLogger("otel_trackio")


def _order_key(value: Any) -> tuple[int, float, str]:
    """Numbers (and strings of numbers) first, by value; then other values, by text; None last."""
    if value is None:
        return (2, 0.0, "")
    number = as_float(value)
    if number is not None:
        return (0, number, "")
    return (1, 0.0, str(value))


def sample_order(sample: Sample) -> tuple[tuple[int, float, str], tuple[int, float, str]]:
    """Sort key of a sample within its step: (``sample_index``, ``rollout_n``), any types."""
    return (_order_key(sample.identity.sample_index), _order_key(sample.identity.rollout_n))


@dataclass(slots=True)
class _Unwritten:
    """A sample handed to ``run.log`` whose write to storage has not succeeded yet."""

    sample: Sample
    trace: TraceDict


class TracePipeline:
    """Span records in, one Trackio Trace per sample out, written durably. Thread-safe.

    Args:
        settings: what to read and how (attribute names, limits, key, decoder).
        sink: the Trackio run to log into.
        grace: how long a completed sample waits for spans (and log events) arriving after its
            root (default: the in-process policy of ``settings``, see
            :class:`~otel_trackio._engine.grace.GracePolicy`).
        open_samples: where the identity of sample roots still open is looked up at a flush.
        steps: where the latest step is read and noted (default: the assembler's own).
        clock: monotonic seconds (the assembler's and the timer's).
    """

    def __init__(
        self,
        settings: TrackioSettings,
        sink: TrackioSink,
        *,
        grace: GracePolicy | None = None,
        open_samples: OpenSampleLookup | None = OPEN_SAMPLES,
        steps: StepMemory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.sink = sink
        self.grace = grace if grace is not None else GracePolicy.of(settings)
        self.assembler = SampleAssembler(
            settings,
            grace_seconds=self.grace.seconds(),
            quick_grace_seconds=self.grace.quick_seconds(),
            open_samples=open_samples,
            steps=steps,
            clock=clock,
        )
        self.stats = ExportStats()
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        # GenAI log events handed over while the lock was taken: the holder takes them before
        # it lets go (see add_events and _unlock).
        self._inbox: deque[LogEventRecord] = deque()
        # The expiry timer: runs while something is held or open, sleeps until it is due.
        self._timer: threading.Thread | None = None
        self._timer_due: float | None = None
        self._wake = threading.Event()
        # A spool drainer's check of replayed samples against Trackio's storage: the sample
        # to log (maybe only its spans not stored yet), or None when it is stored already.
        self.stored_filter: Callable[[Sample], Sample | None] | None = None
        self._warn = Warnings(every_seconds=10.0)
        # Samples handed to run.log since storage was last written, kept until it is; after a
        # failure Trackio reported, they are logged again (minus what its storage holds).
        self._unwritten: list[_Unwritten] = []
        self._log_again = False
        self._failing_since: float | None = None
        self.write_timeout_seconds = 30.0
        self.tables = StepTables(_order_key)  # each step's outcome rows, until it is over
        # The steps Traces were logged at (for the summary's "steps covered").
        self._steps_logged: set[int] = set()

    # -- entry points -------------------------------------------------------------------------

    def add(self, records: Iterable[SpanRecord], timeout_seconds: float | None = 30.0) -> bool:
        """Buffer span records and log, durably, every sample that is due. False on a failure
        (warned and counted); never raises. ``timeout_seconds``: how long to wait for the
        pipeline when another call holds it; None waits as long as it takes (a spool drainer:
        its data is safe in the spool meanwhile, and giving up would lose it)."""
        spans = list(records)

        def buffer() -> list[Sample]:
            self.stats.spans_received += len(spans)
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
        self._inbox.extend(events)
        blocking = len(self._inbox) > self.settings.max_buffered_spans
        return self._take(list, "log events", timeout_seconds, blocking=blocking)

    def expect_log_events(self) -> None:
        """A log exporter feeds this pipeline too: a completed sample now waits for log events
        of its spans (they travel through another processor and may come after the root) as
        long as the grace policy says (:data:`LOG_GRACE_SECONDS` unless set)."""
        self._lock.acquire()
        try:
            self.assembler.grace_seconds = self.grace.seconds(log_events=True)
            self.assembler.quick_grace_seconds = self.grace.quick_seconds(log_events=True)
        finally:
            self._unlock()

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
        elif timeout_seconds is None:
            self._lock.acquire()
        elif not self._lock.acquire(timeout=max(0.0, timeout_seconds)):
            self.stats.failed_exports += 1
            self._warn("busy", f"exporter busy for {timeout_seconds}s; {what} lost")
            return False
        try:
            if self._closed:
                return False
            samples = self._drain()
            samples.extend(buffer())
            samples.extend(self.assembler.expire())
            logged = self._log(samples)
            self._schedule()
            # Write them now (the caller's export thread): an export that returned SUCCESS
            # survives a crash, and a disk that is full or read-only shows up as a failure.
            return self._write(self._write_timeout(timeout_seconds)) and logged
        except Exception as exc:  # noqa: BLE001 - export() must never raise
            self.stats.failed_exports += 1
            self._warn("export", f"export failed: {exc!r}")
            return False
        finally:
            self._unlock()

    def _drain(self) -> list[Sample]:
        """Give the inbox's log events to the assembler (lock held); the samples now due."""
        events: list[LogEventRecord] = []
        while self._inbox:
            events.append(self._inbox.popleft())
        if not events:
            return []
        self.stats.log_events_received += len(events)
        return self.assembler.add_events(events)

    def _unlock(self) -> None:
        """Release the lock. Log events handed over while it was held (their ``add_events``
        found it taken) are taken first, so none waits for the next export."""
        while True:
            self._lock.release()
            if self._closed or not self._inbox or not self._lock.acquire(blocking=False):
                return
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
            self._wake.set()  # the timer sees the flag and ends
            if acquired and flush:
                self._flush_all(timeout_seconds, open_spans)
            elif acquired:
                self._log_tables(flush=True)
                self._write(timeout_seconds)
            else:
                self._warn(
                    "shutdown",
                    "shutdown timed out waiting for an export; "
                    f"{self.assembler.buffered_spans} open spans lost",
                )
            if acquired and self._unwritten and flush:
                # In process nothing keeps them past this point.
                self.stats.samples_lost += len(self._unwritten)
                self._warn(
                    "shutdown-lost",
                    f"shutdown: Trackio's storage still fails; {len(self._unwritten)} samples "
                    f"lost ({self.stats.samples_lost} samples lost in all)",
                )
            elif acquired and self._unwritten:
                self._warn(
                    "shutdown-kept",
                    f"shutdown: Trackio's storage still fails; {len(self._unwritten)} samples "
                    "not stored stay in the spool for the next start",
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
        return len(self._unwritten)

    @property
    def failing_since(self) -> float | None:
        """When (monotonic) writes to storage started failing; None while they succeed."""
        return self._failing_since

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

    def _write_timeout(self, timeout_seconds: float | None) -> float:
        if timeout_seconds is None:
            return self.write_timeout_seconds
        return min(timeout_seconds, self.write_timeout_seconds)

    # -- the expiry timer ---------------------------------------------------------------------

    def _schedule(self) -> None:
        """Make sure the timer wakes when the assembler next has something due (lock held)."""
        due = self.assembler.next_due()
        if due is None or self._closed:
            return
        if self._timer is None:
            self._timer_due = due
            self._timer = threading.Thread(
                target=self._run_timer, name="otel-trackio-expiry", daemon=True
            )
            self._timer.start()
        elif self._timer_due is None or due < self._timer_due:
            self._timer_due = due
            self._wake.set()

    def _run_timer(self) -> None:
        """Log samples whose grace period or TTL ended, when they end, even if no data comes."""
        while True:
            self._lock.acquire()
            try:
                due = None if self._closed else self.assembler.next_due()
                if due is None:
                    self._timer = self._timer_due = None
                    return
                self._timer_due = due
                self._wake.clear()
            finally:
                self._unlock()
            delay = due - self._clock()
            if delay > 0:
                self._wake.wait(delay)
                continue  # woken early (a nearer due time, or closing): look again
            self.expire()

    def expire(self, timeout_seconds: float = 30.0) -> bool:
        """Log, durably, the held samples whose grace period ended and the traces idle past the
        TTL. The timer calls it; so can anyone. False on a failure (warned); never raises."""
        if not self._lock.acquire(timeout=max(0.0, timeout_seconds)):
            return False
        try:
            if self._closed:
                return False
            samples = self._drain()  # events handed over before the grace period ended
            samples.extend(self.assembler.expire())
            logged = self._log(samples)
            return self._write(timeout_seconds) and logged
        except Exception as exc:  # noqa: BLE001 - a timer thread must not die of one sample
            self.stats.failed_exports += 1
            self._warn("expire", f"logging expired samples failed: {exc!r}")
            return False
        finally:
            self._unlock()

    # -- stages -------------------------------------------------------------------------------

    def _flush_all(self, timeout_seconds: float, open_spans: Iterable[SpanRecord] = ()) -> bool:
        try:
            logged = self._log(self._drain() + self.assembler.flush(open_spans))
        except Exception as exc:  # noqa: BLE001
            self._warn("flush", f"flushing open samples failed: {exc!r}")
            logged = False
        self._log_tables(flush=True)
        return self._write(timeout_seconds) and logged

    def _log(self, samples: list[Sample]) -> bool:
        """Convert and log samples: one ``run.log`` per step. False when a log call failed
        (those samples are counted lost)."""
        if not samples:
            return True
        by_step: dict[int, list[tuple[Sample, TraceDict]]] = {}
        evicted = 0
        if self.stored_filter is not None:
            fresh = [kept for kept in map(self.stored_filter, samples) if kept is not None]
            self.stats.already_stored += len(samples) - len(fresh)
            samples = fresh
        for sample in samples:
            by_step.setdefault(sample.identity.step, []).append((sample, self._convert(sample)))
            # Hand the GIL over between samples: a rollout thread waking from a model call
            # would otherwise wait up to the interpreter's 5 ms switch interval for it.
            time.sleep(0)
            if sample.identity.partial_reason == "capacity":
                evicted += 1
        if evicted:
            self.stats.evicted_samples += evicted
            self._warn(
                "capacity",
                f"span buffer full ({self.assembler.max_spans} spans): {evicted} open samples "
                f"logged early as partial ({self.stats.evicted_samples} so far)",
            )
        ok = True
        for step, converted in by_step.items():
            # In sample order: Trackio numbers a log call's Traces (the ``:N`` chip) as listed.
            converted.sort(key=lambda pair: sample_order(pair[0]))
            traces = [trace for _, trace in converted]
            self._unwritten.extend(_Unwritten(sample, trace) for sample, trace in converted)
            try:
                self.sink.log_traces(self.settings.key, traces, step)
            except Exception as exc:  # noqa: BLE001
                self.stats.failed_exports += 1
                self._log_again = True  # kept: logged again with the next write
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
            _steps.note_step(step)  # the metric exporters' fallback step
            self._note_outcomes(step, traces)
        self._log_tables(flush=False)
        return ok

    def _note_outcomes(self, step: int, traces: list[TraceDict]) -> None:
        """Keep the outcome rows of a step's logged Traces for its table."""
        if self.settings.outcome_table_key is not None:
            names = self.settings.outcome_attributes
            self.tables.add(step, [outcome_row(trace, names) for trace in traces])

    def _log_tables(self, *, flush: bool) -> None:
        """Log the outcome table of each step that is over (of every step, at a flush). A
        table that cannot be logged is warned about: the Traces it sums up are stored."""
        key = self.settings.outcome_table_key
        for step, rows in self.tables.take_all() if flush else self.tables.due():
            if key is None:
                continue
            try:
                self.sink.log_table(key, rows, step)
            except Exception as exc:  # noqa: BLE001
                self._warn("table", f"the outcome table of step {step} was not logged: {exc!r}")

    def _convert(self, sample: Sample) -> TraceDict:
        try:
            return sample_to_trace(sample, self.settings)
        except Exception as exc:  # noqa: BLE001 - a bad span must not cost the sample
            self.stats.conversion_errors += 1
            self._warn("convert", f"could not convert a sample fully, logged it bare: {exc!r}")
            return bare_trace(sample, repr(exc))

    def _write(self, timeout_seconds: float) -> bool:
        """Make what was logged durable in Trackio's storage (lock held). On success the
        samples count as logged. A failed or timed-out write keeps them for the next write
        (warned, repeatedly, with how many wait and for how long): after a failure Trackio
        reported (it dropped the batch), they are first looked up in its storage and logged
        again, minus the spans stored already."""
        if not self._unwritten:
            return True
        failures = ""
        try:
            ok, failures = self._flush_sink(timeout_seconds)
            if ok and self._log_again:
                ok = self._relog()
                if ok:
                    ok, failures = self._flush_sink(timeout_seconds)
        except Exception as exc:  # noqa: BLE001 - flushing must not crash the user's program
            ok, failures = False, repr(exc)
            self._log_again = True
        if ok:
            written = self._unwritten
            self._unwritten = []
            self._log_again = False
            self.stats.samples_logged += len(written)
            self.stats.partial_samples += sum(1 for u in written if u.sample.identity.partial)
            if self._failing_since is not None:
                _logger.warning(
                    "otel-trackio: Trackio's storage takes writes again after %.0f s; "
                    "%d samples kept meanwhile are stored",
                    time.monotonic() - self._failing_since,
                    len(written),
                )
                self._failing_since = None
            return True
        if self._failing_since is None:
            self._failing_since = time.monotonic()
        self.stats.failed_writes += 1
        self.stats.failed_exports += 1
        self._drop_past_bound()
        self._warn(
            "storage",
            f"Trackio could not write to its storage ({failures or 'timed out'}) for "
            f"{time.monotonic() - self._failing_since:.0f} s; {len(self._unwritten)} samples "
            "kept and retried (nothing acknowledged is given up; "
            f"{self.stats.samples_logged} stored so far)",
        )
        return False

    def _flush_sink(self, timeout_seconds: float) -> tuple[bool, str]:
        """(the sink's flush succeeded, what failed). A failure Trackio reported means it
        dropped what it was writing: log it again next time."""
        if self.sink.flush(max(0.0, timeout_seconds)):
            return True, ""
        failures = ", ".join(sorted(self.sink.last_failures))
        if failures:
            self._log_again = True
        return False, failures or "timed out"

    def _relog(self) -> bool:
        """Log again the kept samples Trackio dropped, minus the spans its storage holds
        (False when storage cannot be read now: tried again later)."""
        by_step: dict[int, list[_Unwritten]] = {}
        for kept in self._unwritten:
            by_step.setdefault(kept.sample.identity.step, []).append(kept)
        again: list[_Unwritten] = []
        stored_now: list[_Unwritten] = []
        for step, kept_at_step in by_step.items():
            stored = stored_span_ids(self.sink, self.settings.key, step)
            if stored is None:
                return False
            to_log: list[_Unwritten] = []
            for kept in kept_at_step:
                remaining = missing_spans(kept.sample, stored)
                if remaining is None:
                    stored_now.append(kept)
                elif remaining is kept.sample:
                    to_log.append(kept)
                else:
                    to_log.append(_Unwritten(remaining, self._convert(remaining)))
            if to_log:
                to_log.sort(key=lambda kept: sample_order(kept.sample))
                self.sink.log_traces(self.settings.key, [k.trace for k in to_log], step)
                self.stats.log_calls += 1
                self.stats.samples_retried += len(to_log)
            again.extend(to_log)
        self._unwritten = stored_now + again
        self._log_again = False
        return True

    def _drop_past_bound(self) -> None:
        """In process, where nothing else keeps them: past ``max_buffered_spans`` spans of kept
        samples, the oldest are given up (counted lost and warned)."""
        bound = self.settings.max_buffered_spans
        held = sum(len(kept.sample.spans) for kept in self._unwritten)
        dropped = 0
        while self._unwritten and held > bound:
            held -= len(self._unwritten.pop(0).sample.spans)
            dropped += 1
        if dropped:
            self.stats.samples_lost += dropped
            self._warn(
                "lost",
                f"Trackio's storage failing: {dropped} samples given up past the bound of "
                f"{bound} kept spans ({self.stats.samples_lost} lost so far)",
            )

    def buffered_items(self) -> list[object]:
        """Every span record and GenAI event record waiting here: spans buffered for a root
        or held in a grace period (with the events joined to them), events waiting for their
        span. What a spool drainer must not forget before it is logged."""
        self._lock.acquire()
        try:
            items: list[object] = []
            records = list(self.assembler.records())
            records.extend(span for kept in self._unwritten for span in kept.sample.spans)
            for record in records:
                items.append(record)
                items.extend(record.events)
            items.extend(event.event for event in self.assembler.waiting_events())
            items.extend(event.event for event in self._inbox)
            return items
        finally:
            self._unlock()
