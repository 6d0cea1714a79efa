"""The drain loop: spool entries → the span pipeline (and metric exporters), crash-safe.

Each cycle reads a run of entries, marks them *in flight* in the checkpoint, hands them over, then
checkpoints where it is and which entry is the oldest whose spans are still only in memory (spans
waiting for their sample's root, samples in their grace period). Segments older than that are
deleted: everything in them is durable in Trackio.

After a crash (the drainer killed), the next drainer replays from that oldest entry, so the spans
that were only in memory come back. Samples completed while replaying entries that the previous
drainer had handed over (up to its in-flight mark) may already be in Trackio: each is looked up
in Trackio's storage first and logged only when it is not there. So nothing is lost and nothing
is logged twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from otel_trackio._codec import spool as codec
from otel_trackio._codec.routes import Route
from otel_trackio._core.samples import Sample
from otel_trackio._engine.open_samples import OpenSampleRegistry
from otel_trackio._engine.pipeline import TracePipeline
from otel_trackio._engine.sink import stored_span_sets
from otel_trackio._engine.stats import ExportStats
from otel_trackio._engine.warn import Warnings
from otel_trackio._spool.segments import (
    Checkpoint,
    Entry,
    Lock,
    Position,
    Reader,
    delete_before,
    load_checkpoint,
    save_checkpoint,
)

_logger = logging.getLogger("otel_trackio")


class Destination(Protocol):
    """Where the entries of one route go: a span pipeline and, for the receiver, metrics."""

    @property
    def spans(self) -> TracePipeline:
        """The span pipeline of this route."""

    def export_metrics(self, request: bytes) -> None:
        """Log a serialised OTLP metrics request."""


class AlreadyStored:
    """During recovery: is this sample already in Trackio? (looked up per step, once)."""

    def __init__(self, pipeline: TracePipeline) -> None:
        self._pipeline = pipeline
        self._by_step: dict[int, set[frozenset[str]]] = {}

    def __call__(self, sample: Sample) -> bool:
        step = sample.identity.step
        stored = self._by_step.get(step)
        if stored is None:
            sink = self._pipeline.sink
            stored = stored_span_sets(sink, self._pipeline.settings.key, step)
            self._by_step[step] = stored
        return frozenset(f"{s.span_id:016x}" for s in sample.spans) in stored


@dataclass(slots=True)
class DrainStats:
    """What a drainer did."""

    entries: int = 0
    spans: int = 0
    flushes: int = 0
    torn_entries: int = 0
    replayed_entries: int = 0


class Drainer:
    """Drains one spool directory into destinations, one cycle at a time.

    Args:
        path: the spool directory.
        destination: the destination of a route (``(None, None)`` for an exporter's own).
        open_roots: where the open sample roots a flush request carries are registered (the
            pipelines look them up when they log samples early).
        cycle_bytes: payload bytes handed over per cycle at most.
    """

    def __init__(
        self,
        path: Path,
        destination: Callable[[Route], Destination | None],
        *,
        open_roots: OpenSampleRegistry | None = None,
        cycle_bytes: int = 1024 * 1024,
    ) -> None:
        self.path = Path(path)
        self._destination = destination
        self._open_roots = open_roots
        self._cycle_bytes = cycle_bytes
        self._lock = Lock(self.path / "drain.lock")
        if not self._lock.acquire():
            raise RuntimeError(f"another process is draining the spool {self.path}")
        self.reader = Reader(self.path)
        checkpoint = load_checkpoint(self.path)
        first = self.reader.first_position()
        if checkpoint is None:
            checkpoint = Checkpoint(oldest=first, processed=first)
        self.flushed = checkpoint.flushed
        self.position = max(checkpoint.oldest, first)
        # Entries before this were handed over by a previous drainer: their samples may be
        # in Trackio already.
        handed = max(checkpoint.processed, checkpoint.inflight or checkpoint.processed)
        self._recovering_until: Position | None = handed if handed > self.position else None
        self._metrics_logged_until = checkpoint.processed
        self._pipelines: list[TracePipeline] = []
        self._origin: dict[int, Position] = {}  # id(span record) -> the entry it came in
        self._saved_oldest: Position | None = None
        self._last_checkpoint = 0.0
        self.stats = DrainStats()
        self.producer_closed = False
        self._warn = Warnings()

    # -- cycles --------------------------------------------------------------------------------

    def cycle(self, *, finished: bool = False, stop: threading.Event | None = None) -> int:
        """Hand over the next run of entries; returns how many. ``finished``: the producer is
        gone (an incomplete last entry is torn, not still being written). ``stop``: checked
        between entries, so stopping waits for one entry at most."""
        torn_before = self.reader.torn_entries + self.stats.torn_entries
        entries = self.reader.read(self.position, self._cycle_bytes, finished=finished)
        if not entries and finished and self.reader.torn_tail is not None:
            self.stats.torn_entries += 1
            self.reader.torn_tail = None
        torn = self.reader.torn_entries + self.stats.torn_entries - torn_before
        if torn:
            self._warn(
                "torn",
                f"{torn} spool entries in {self.path} were cut short by a process killed while "
                "writing them: their data is lost (counted in torn_entries)",
            )
        if not entries:
            return 0
        self._save(inflight=entries[-1].end)
        handled = 0
        for entry in entries:
            self._handle(entry)
            handled += 1
            self.position = entry.end
            if self._recovering_until is not None and self.position >= self._recovering_until:
                self._end_recovery()
            if stop is not None and stop.is_set():
                break
        self.stats.entries += handled
        self._save()
        return handled

    def _handle(self, entry: Entry) -> None:
        recovering = self._recovering_until is not None
        if recovering:
            self.stats.replayed_entries += 1
        if entry.kind == codec.SPANS:
            route, records = codec.decode_spans(entry.payload)
            target = self._destination(route)
            if target is None:
                return
            self._track(target.spans)
            for record in records:
                self._origin[id(record)] = entry.start
            self.stats.spans += len(records)
            target.spans.add(records, timeout_seconds=None)  # never give spooled data up
        elif entry.kind == codec.EVENTS:
            route, events = codec.decode_events(entry.payload)
            target = self._destination(route)
            if target is None:
                return
            self._track(target.spans)
            for event in events:
                self._origin[id(event.event)] = entry.start
            target.spans.add_events(events, timeout_seconds=None)
        elif entry.kind == codec.EXPECT_LOGS:
            target = self._destination((None, None))
            if target is not None:
                target.spans.expect_log_events()
        elif entry.kind == codec.METRICS:
            route, request = codec.decode_metrics(entry.payload)
            target = self._destination(route)
            # Metrics are logged as they come: skip those a previous drainer surely logged
            # (an in-flight one may be logged twice rather than lost).
            if target is not None and entry.start >= self._metrics_logged_until:
                target.export_metrics(request)
        elif entry.kind == codec.FLUSH:
            number, roots = codec.decode_flush(entry.payload)
            if number <= self.flushed:
                return  # served before a restart
            if self._open_roots is not None:
                self._open_roots.update(roots)
            for pipeline in self._pipelines:
                pipeline.flush()
            self.flushed = number
            self.stats.flushes += 1
        elif entry.kind == codec.CLOSE:
            self.producer_closed = True

    def _track(self, pipeline: TracePipeline) -> None:
        if pipeline not in self._pipelines:
            self._pipelines.append(pipeline)
            if self._recovering_until is not None:
                pipeline.already_stored = AlreadyStored(pipeline)

    def _end_recovery(self) -> None:
        """Past the entries a previous drainer handed over: no more lookups in Trackio."""
        self._recovering_until = None
        for pipeline in self._pipelines:
            pipeline.already_stored = None

    # -- checkpoints ---------------------------------------------------------------------------

    def oldest_open(self) -> Position:
        """The oldest entry holding a span that is only in memory (else where we are)."""
        open_ids: dict[int, Position] = {}
        for pipeline in self._pipelines:
            for item in pipeline.buffered_items():
                origin = self._origin.get(id(item))
                if origin is not None:
                    open_ids[id(item)] = origin
        self._origin = open_ids
        return min(open_ids.values(), default=self.position)

    def _save(self, inflight: Position | None = None) -> None:
        oldest = min(self.oldest_open(), self.position)
        stats = {
            # Every counter of the pipelines, by name (the producer reads them back whole).
            **ExportStats.total(p.stats for p in self._pipelines).as_dict(),
            "entries": self.stats.entries,
            "spans": self.stats.spans,
            "torn_entries": self.stats.torn_entries + self.reader.torn_entries,
            "waiting_spans": sum(p.assembler.buffered_spans for p in self._pipelines),
        }
        save_checkpoint(
            self.path,
            Checkpoint(
                oldest=oldest,
                processed=self.position,
                inflight=inflight,
                flushed=self.flushed,
                stats=stats,
            ),
        )
        self._last_checkpoint = time.monotonic()
        if inflight is None and oldest != self._saved_oldest:
            delete_before(self.path, oldest.seq)
            self._saved_oldest = oldest

    def checkpoint_if_due(self, every_seconds: float = 0.5) -> None:
        """Checkpoint while idle too: samples logged by the pipelines' timers free segments."""
        if time.monotonic() - self._last_checkpoint >= every_seconds:
            self._save()

    # -- running -------------------------------------------------------------------------------

    def run(
        self,
        stop: threading.Event,
        *,
        producer_gone: Callable[[], bool] = lambda: False,
        idle_seconds: float = 0.02,
    ) -> None:
        """Drain until ``stop`` is set, or the producer closed or is gone and nothing is left."""
        while not stop.is_set():
            gone = producer_gone()
            if self.cycle(finished=gone, stop=stop):
                continue
            if self.producer_closed or gone:
                return
            self.checkpoint_if_due()
            stop.wait(idle_seconds)

    def backlog(self) -> tuple[int, float | None]:
        """(bytes not handed over yet, seconds the oldest of them has waited)."""
        waiting, appended = self.reader.backlog(self.position)
        behind = None if appended is None else max(0.0, (time.time_ns() - appended) / 1e9)
        return waiting, behind

    def close(self) -> None:
        """Checkpoint and let the spool go (the pipelines are the caller's to close)."""
        try:
            self._save()
        except OSError as exc:
            _logger.warning("otel-trackio: could not checkpoint the spool %s: %r", self.path, exc)
        self._lock.release()
