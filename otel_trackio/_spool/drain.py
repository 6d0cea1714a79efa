"""The drain loop: spool entries → the span pipeline (and metric exporters), crash-safe.

The invariant: an entry is checkpointed past and deleted only when every sample it contributed
to is durably in Trackio's storage, or is still held in memory *and* the checkpoint keeps that
entry for a replay.

Each cycle reads a run of entries, marks them *in flight* in the checkpoint, hands them over, then
checkpoints where it is and which entry is the oldest whose spans are still only in memory (spans
waiting for their sample's root, samples in their grace period, samples whose write to storage
failed). Segments older than that are deleted: everything in them is durable in Trackio.

A failed or timed-out write stops the cycle: the drainer backs off (0.5 s doubling to 30 s) and
retries the write, warning how far behind it is, and reports itself :attr:`Drainer.stalled` (the
receiver answers 503 meanwhile). A checkpoint that cannot be written (disk full, read-only) is
the same: retried, counted, warned, never a dead thread.

After a crash (the drainer killed), the next drainer replays from that oldest entry, so the spans
that were only in memory come back. Every sample holding a span of an entry the previous drainer
had handed over (up to its in-flight mark; every entry present when the checkpoint is missing or
unreadable) is checked against Trackio's storage by span id when it is released, whenever that
is: only its spans not stored yet are logged (as a continuation when some were). So is every
sample whose step had Traces in storage when the drainer began: a client that sends a request
again after the receiver was killed before answering it finds its first copy stored. So nothing
is lost and nothing is logged twice. The checkpoint's counters go on across drainers, the samples
a killed drainer stored after its last checkpoint included (:mod:`.replay`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from otel_trackio._codec import spool as codec
from otel_trackio._codec.packing import UnreadablePayload
from otel_trackio._codec.routes import NO_ROUTE, Route
from otel_trackio._engine.metrics import MetricPath
from otel_trackio._engine.open_samples import OpenSampleRegistry
from otel_trackio._engine.pipeline import TracePipeline
from otel_trackio._engine.stats import ExportStats, step_ranges, steps_in
from otel_trackio._engine.warn import Warnings
from otel_trackio._settings import FSYNC_POLICIES
from otel_trackio._spool.decoded import DecodedEntries
from otel_trackio._spool.metric_memory import MetricMemory
from otel_trackio._spool.replay import REPLAYABLE_KEY, ReplayCheck, ReplayCounts
from otel_trackio._spool.segments import (
    Checkpoint,
    Entry,
    Lock,
    Position,
    Reader,
    SpoolInUse,
    delete_before,
    end_of_spool,
    load_checkpoint,
    save_checkpoint,
    sync_segments,
)
from otel_trackio._trackio.store import TraceStore

BACKOFF_SECONDS = (0.5, 30.0)
"""The drainer's wait before retrying a failed write or checkpoint: from the first, doubling,
up to the second."""

_logger = logging.getLogger("otel_trackio")


def _no_earlier_runs(pipeline: TracePipeline) -> Sequence[str]:
    return ()


def leave_to_the_spool(pipelines: Iterable[TracePipeline], store: TraceStore) -> None:
    """A drainer stopping past its deadline (the receiver's ``--drain-seconds``): what is not
    stored stays in the spool for the next drainer, so nothing more is written or waited for
    (another process may hold Trackio's storage lock). A write the store has in flight is cut
    short: SQLite rolls it back or has it, and the next drainer, which starts only after this
    one is gone, looks its samples up. Not for a drainer that another takes over from while it
    ends (the offload writer replaced at shutdown): that one must know what its writes stored."""
    for pipeline in pipelines:
        pipeline.stop_writing()
    store.close(timeout_seconds=0.0)


class Destination(Protocol):
    """Where the entries of one route go: a span pipeline and, for the receiver, metrics."""

    @property
    def spans(self) -> TracePipeline:
        """The span pipeline of this route."""

    @property
    def metrics(self) -> MetricPath | None:
        """The metric path of this route (None: its metrics are ignored)."""

    def export_metrics(self, request: bytes) -> None:
        """Log a serialised OTLP metrics request."""


@dataclass(slots=True)
class DrainStats:
    """What a drainer did."""

    entries: int = 0
    spans: int = 0
    flushes: int = 0
    torn_entries: int = 0
    unreadable_entries: int = 0
    replayed_entries: int = 0
    failed_checkpoints: int = 0
    stalls: int = 0


class Drainer:
    """Drains one spool directory into destinations, one cycle at a time.

    Args:
        path: the spool directory.
        destination: the destination of a route (``(None, None)`` for an exporter's own).
        open_roots: where the open sample roots a flush request carries are registered (the
            pipelines look them up when they log samples early), and the producer's reports
            of its spans open long (a trace logged at the TTL shows them).
        cycle_bytes: payload bytes handed over per cycle at most.
        fsync: the spool's fsync policy (see :data:`~otel_trackio._settings.FSYNC_POLICIES`):
            anything but ``never`` forces the segments a checkpoint covers, then the
            checkpoint, to the disk.
        receiving: when (monotonic) the oldest request the producer is still taking began,
            None when it takes none (the OTLP receiver): every request begun before that is in
            the spool. With it, the drainer notes that moment and where the spool ends, and
            once it has handed the spool over that far it *settles* the pipelines (see
            :meth:`TracePipeline.settle`): every request begun before it is in them.
        between_cycles: called on the drain thread after each cycle (the receiver closes its
            idle routes there: no entry is being handed to them meanwhile).
        earlier_runs: the runs a pipeline's data went to at earlier starts of this spool under
            other names, looked up with its own for data sent again (see
            :class:`~.replay.ReplayCheck`).
        sole_producer: the spool's producer is the only sender of its samples (the offload
            writer's rollout process): no other process stores them, so storage is read only
            for replayed entries, not once for each step as it is for a receiver's data,
            which a client may send again to another receiver of the run.
        decoded: the span entries the spool's producer in this process keeps decoded (the
            receiver): their records are taken from there rather than decoded again.
    """

    def __init__(
        self,
        path: Path,
        destination: Callable[[Route], Destination | None],
        *,
        open_roots: OpenSampleRegistry | None = None,
        cycle_bytes: int = 1024 * 1024,
        fsync: str = "cycle",
        receiving: Callable[[], float | None] | None = None,
        between_cycles: Callable[[], object] | None = None,
        earlier_runs: Callable[[TracePipeline], Sequence[str]] | None = None,
        sole_producer: bool = False,
        decoded: DecodedEntries | None = None,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy {fsync!r}: expected one of {FSYNC_POLICIES}")
        self._fsync = fsync != "never"
        self.path = Path(path)
        self._destination = destination
        self._open_roots = open_roots
        self._cycle_bytes = cycle_bytes
        self._receiving = receiving
        self._between_cycles = between_cycles
        self._earlier_runs = earlier_runs or _no_earlier_runs
        self._sole_producer = sole_producer
        self._decoded = decoded
        # Notes (moment, position): every request begun before the moment is in the spool
        # before the position (see receiving), oldest first.
        self._received: deque[tuple[float, Position]] = deque()
        self._lock = Lock(self.path / "drain.lock")
        if not self._lock.acquire():
            raise SpoolInUse(f"another process is draining the spool {self.path}")
        self.reader = Reader(self.path)
        checkpoint = load_checkpoint(self.path)
        first = self.reader.first_position()
        if checkpoint is None:
            # None yet, or unreadable (emptied or torn by a power loss): any entry present may
            # have been handed over already, so all of them are checked against storage.
            checkpoint = Checkpoint(oldest=first, processed=end_of_spool(self.path))
        self.flushed = checkpoint.flushed
        # What earlier drainers of this spool did (a writer or receiver restarted): the
        # checkpoint's counters go on from there, so the run's summary counts every sample.
        self._carried = checkpoint.stats
        self._carried_steps = steps_in(checkpoint.stats.get("step_ranges") or ())
        self.position = max(checkpoint.oldest, first)
        # Entries before this were handed over by a previous drainer: their samples may be
        # in Trackio already.
        handed = max(checkpoint.processed, checkpoint.inflight or checkpoint.processed)
        self._recovering_until: Position | None = handed if handed > self.position else None
        self._metrics_logged_until = checkpoint.processed
        self._metric_memory = MetricMemory(self.path, fsync=self._fsync)
        self._pipelines: list[TracePipeline] = []
        self._origin: dict[int, Position] = {}  # id(span record) -> the entry it came in
        # What takes each kind of entry (see _hand_over).
        self._takers: dict[int, Callable[[Entry], bool]] = {
            codec.SPANS: self._take_spans,
            codec.EVENTS: self._take_events,
            codec.EXPECT_LOGS: self._take_expect_logs,
            codec.METRICS: self._take_metrics,
            codec.FLUSH: self._take_flush,
            codec.STEP: self._take_step,
            codec.OPEN_SPANS: self._take_open_spans,
            codec.CLOSE: self._take_close,
        }
        self._saved_oldest: Position | None = None
        self._saved: Checkpoint | None = None  # the last checkpoint written
        self._last_checkpoint = 0.0
        self._replayed: set[int] = set()  # span ids of entries a previous drainer handed over
        self.stats = DrainStats()
        # The producer closed the spool: seen here, or by an earlier drainer (a writer replaced
        # at shutdown after its predecessor had handed the close over).
        self.producer_closed = checkpoint.closed
        self._warn = Warnings(every_seconds=10.0)
        # Why the drain cannot move on now (a write or checkpoint failing), and since when.
        self.stalled: str | None = None
        self._unserved_flush = 0  # a flush request whose write failed: served once retried
        self._stalled_since = 0.0
        self._backoff = BACKOFF_SECONDS[0]

    # -- cycles --------------------------------------------------------------------------------

    def cycle(self, *, finished: bool = False, stop: threading.Event | None = None) -> int:
        """Hand over the next run of entries; returns how many. ``finished``: the producer is
        gone (an incomplete last entry is torn, not still being written). ``stop``: checked
        between entries, so stopping waits for one entry at most. Stops early when a write to
        storage fails (see :attr:`stalled`). Raises OSError when the checkpoint cannot be
        written (nothing is handed over then)."""
        torn_before = self.reader.torn_entries
        entries = self.reader.read(self.position, self._cycle_bytes, finished=finished)
        torn = self.reader.torn_entries - torn_before
        skipped = False
        if not entries and finished and self.reader.torn_tail is not None:
            # The producer died mid-append: skip the torn end once, and remember that.
            torn += 1
            self.position = self.reader.torn_end or self.position
            self.reader.torn_tail = self.reader.torn_end = None
            skipped = True
        elif not entries and self.reader.reached > self.position:
            self.position = self.reader.reached  # past a finished segment's torn end
            skipped = True
        if torn:
            self.stats.torn_entries += torn
            self._warn(
                "torn",
                f"{torn} spool entries in {self.path} were cut short by a process killed while "
                f"writing them: their data is lost ({self.stats.torn_entries} so far)",
            )
        if not entries:
            if skipped:
                self._save()
            return 0
        self._save(inflight=entries[-1].end)
        handled = 0
        for entry in entries:
            ok = self._handle(entry)
            handled += 1
            self.position = entry.end
            if self._recovering_until is not None and self.position >= self._recovering_until:
                self._recovering_until = None
            if not ok:
                self._stall(self._storage_failure())
                break
            if stop is not None and stop.is_set():
                break
        else:
            self.position = max(self.position, self.reader.reached)
        self.stats.entries += handled
        self._save()
        return handled

    def _handle(self, entry: Entry) -> bool:
        """Hand one entry over; False when a write to storage failed (the data is kept in
        memory and its entry by the checkpoint; :meth:`retry` tries again). An entry that
        cannot be read is skipped, counted and warned about: retrying it would stop the drain
        for good."""
        try:
            return self._hand_over(entry)
        except UnreadablePayload as exc:
            self.stats.unreadable_entries += 1
            self._warn(
                "unreadable",
                f"a spool entry in {self.path} was skipped: {exc} (written by another version, "
                f"or not by otel-trackio; {self.stats.unreadable_entries} so far)",
            )
            return True

    def _hand_over(self, entry: Entry) -> bool:
        """Hand one entry to what takes its kind (an unknown kind is skipped)."""
        if self._recovering_until is not None:
            self.stats.replayed_entries += 1
        take = self._takers.get(entry.kind)
        return True if take is None else take(entry)

    def _pipeline_of(self, route: Route) -> TracePipeline | None:
        """The span pipeline of a route's run, its samples' origins tracked (None: no run)."""
        target = self._destination(route)
        if target is None:
            return None
        self._track(target.spans)
        return target.spans

    def _take_spans(self, entry: Entry) -> bool:
        kept = self._decoded.take(entry.payload) if self._decoded is not None else None
        route, records = kept if kept is not None else codec.decode_spans(entry.payload)
        pipeline = self._pipeline_of(route)
        if pipeline is None:
            return True
        recovering = self._recovering_until is not None
        for record in records:
            self._origin[id(record)] = entry.start
            if recovering:
                self._replayed.add(record.span_id)
        self.stats.spans += len(records)
        return pipeline.add(records, timeout_seconds=None)  # never give spooled data up

    def _take_events(self, entry: Entry) -> bool:
        route, events = codec.decode_events(entry.payload)
        pipeline = self._pipeline_of(route)
        if pipeline is None:
            return True
        for event in events:
            self._origin[id(event.event)] = entry.start
        return pipeline.add_events(events, timeout_seconds=None)

    def _take_expect_logs(self, entry: Entry) -> bool:
        target = self._destination(NO_ROUTE)
        if target is not None:
            target.spans.expect_log_events()
        return True

    def _take_metrics(self, entry: Entry) -> bool:
        route, request = codec.decode_metrics(entry.payload)
        target = self._destination(route)
        # Metrics are logged as they come: skip those a previous drainer surely logged; what it
        # remembered tells the in-flight ones, and requests sent again, apart.
        if target is not None and entry.start >= self._metrics_logged_until:
            self._export_metrics(target, route, request)
        return True

    def _take_flush(self, entry: Entry) -> bool:
        flush = codec.decode_flush(entry.payload)
        number = flush.number
        if number <= self.flushed:
            return True  # served before a restart
        if self._open_roots is not None:
            self._open_roots.update(flush.open_roots)
        self._pipeline_of(NO_ROUTE)  # its open spans may be all a sample has (none ended yet)
        ok = True
        for pipeline in self._pipelines:  # the producer's open spans join their samples
            ok = pipeline.flush(open_spans=flush.open_spans) and ok
        self.stats.flushes += 1
        if not ok:  # served once what it asked for is stored (see retry)
            self._unserved_flush = number
            return False
        self.flushed = number
        return True

    def _take_step(self, entry: Entry) -> bool:
        target = self._destination(NO_ROUTE)
        if target is not None:
            target.spans.declare_step(codec.decode_step(entry.payload))
        return True

    def _take_open_spans(self, entry: Entry) -> bool:
        if self._open_roots is not None:
            self._open_roots.report_open_spans(codec.decode_open_spans(entry.payload))
        return True

    def _take_close(self, entry: Entry) -> bool:
        self.producer_closed = True
        return True

    # -- stalls: a write or a checkpoint failing --------------------------------------------

    def _storage_failure(self) -> str:
        """Why storing stalls: the first failing pipeline's reason (a full disk named)."""
        failing = [p.write_failure for p in self._pipelines if p.unwritten_samples]
        return failing[0] if failing else "Trackio's storage is not taking writes"

    def _stall(self, why: str) -> None:
        if self.stalled is None:
            self._stalled_since = time.monotonic()
            self._backoff = BACKOFF_SECONDS[0]
            self.stats.stalls += 1
        self.stalled = why

    def _unstall(self) -> None:
        if self.stalled is not None:
            _logger.warning(
                "otel-trackio: the spool %s drains again after %.0f s",
                self.path,
                time.monotonic() - self._stalled_since,
            )
        self.stalled = None

    def retry(self) -> bool:
        """Try the failed writes and the checkpoint again; True when the drain can go on."""
        for pipeline in self._pipelines:
            if pipeline.unwritten_samples and not pipeline.retry_writes():
                self._stall(self._storage_failure())
                return False
        if self._unserved_flush:
            self.flushed = max(self.flushed, self._unserved_flush)
            self._unserved_flush = 0
        self._save()  # raises OSError while the checkpoint cannot be written
        self._unstall()
        return True

    def _report_stall(self) -> None:
        waiting, behind = self.backlog()
        kept = sum(p.unwritten_samples for p in self._pipelines)
        self._warn(
            "stalled",
            f"the spool {self.path} is not draining for "
            f"{time.monotonic() - self._stalled_since:.0f} s ({self.stalled}): {kept} samples "
            f"kept in memory, {waiting} bytes ({behind or 0:.0f} s) waiting in the spool; "
            f"retrying in {self._backoff:.1f} s",
        )

    def _export_metrics(self, target: Destination, route: Route, request: bytes) -> None:
        """Log one metrics entry with what the run's exporter logged before (in an earlier
        drainer too), then keep what it remembers now beside the spool."""
        exporter = target.metrics
        if exporter is None:
            return
        run_key = f"{route[0]}/{route[1]}"
        self._metric_memory.recall(exporter, run_key)
        target.export_metrics(request)
        self._metric_memory.save(exporter, run_key)

    def forget(self, pipeline: TracePipeline) -> None:
        """Stop tracking a pipeline that was closed with nothing waiting in it (its route
        closed); entries for its route later reach the pipeline that replaces it."""
        if pipeline in self._pipelines:
            self._pipelines.remove(pipeline)

    def _track(self, pipeline: TracePipeline) -> None:
        if pipeline not in self._pipelines:
            self._pipelines.append(pipeline)
            pipeline.stored_filter = ReplayCheck(
                pipeline,
                self._replayed,
                lambda record: self._origin.get(id(record)),
                earlier_runs=lambda: self._earlier_runs(pipeline),
                sole_producer=self._sole_producer,
            )

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
        carried = self._carried
        own = [self._counts(pipeline, oldest) for pipeline in self._pipelines]
        totals = ExportStats.total([ExportStats.from_dict(carried), *(s for s, _ in own)])
        steps = self._carried_steps.union(*(p.logged_steps for p in self._pipelines))
        # Replayed samples found stored beyond those the carried counters count were stored by
        # the drainer before this one after its last checkpoint (see replay.py).
        found = sum(c.found_stored for _, c in own)
        uncounted = max(0, found - int(carried.get(REPLAYABLE_KEY) or 0))
        if uncounted:
            totals.samples_logged += uncounted
            totals.already_stored = max(0, totals.already_stored - uncounted)
            steps = steps.union(*(c.found_steps for _, c in own))
        totals.steps_from(steps)
        stats = {
            # Every counter of the pipelines, by name (the producer reads them back whole),
            # with those of earlier drainers of this spool.
            **totals.as_dict(),
            REPLAYABLE_KEY: sum(c.replayable for _, c in own),
            "step_ranges": step_ranges(steps),
            "entries": int(carried.get("entries") or 0) + self.stats.entries,
            "spans": int(carried.get("spans") or 0) + self.stats.spans,
            "torn_entries": int(carried.get("torn_entries") or 0) + self.stats.torn_entries,
            "unreadable_entries": int(carried.get("unreadable_entries") or 0)
            + self.stats.unreadable_entries,
            "waiting_spans": sum(p.assembler.buffered_spans for p in self._pipelines),
        }
        checkpoint = Checkpoint(
            oldest=oldest,
            processed=self.position,
            inflight=inflight,
            flushed=self.flushed,
            stats=stats,
            closed=self.producer_closed,
        )
        self._last_checkpoint = time.monotonic()
        if checkpoint == self._saved:
            return  # idle: nothing to write (nor to force to disk)
        if self._fsync:
            # The segments a checkpoint covers reach the disk before it does: after a power
            # loss it never points past entries the disk lost.
            sync_segments(self.path, oldest, max(self.position, inflight or self.position))
        save_checkpoint(self.path, checkpoint, fsync=self._fsync)
        self._saved = checkpoint
        if inflight is None and oldest != self._saved_oldest:
            delete_before(self.path, oldest.seq)
            self._saved_oldest = oldest

    @staticmethod
    def _counts(pipeline: TracePipeline, oldest: Position) -> tuple[ExportStats, ReplayCounts]:
        """A pipeline's counters and what its replay check saw, read together."""
        check = pipeline.stored_filter

        def read() -> tuple[ExportStats, ReplayCounts]:
            counts = check.counts(oldest) if isinstance(check, ReplayCheck) else ReplayCounts(0, 0)
            return dataclasses.replace(pipeline.stats), counts

        return pipeline.read_locked(read)

    def checkpoint_if_due(self, every_seconds: float = 0.5) -> None:
        """Checkpoint while idle too: samples logged by the pipelines' timers free segments.
        A pipeline whose timer's write failed stalls the drain until it is retried."""
        if any(p.unwritten_samples and p.failing_since for p in self._pipelines):
            self._stall(self._storage_failure())
            return
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
        """Drain until ``stop`` is set, or the producer closed or is gone and nothing is left.
        Nothing escapes: a failed write or checkpoint is retried with a growing wait (and
        warned about, with how far behind the drain is), never a dead thread."""
        while not stop.is_set():
            try:
                if self.stalled is not None and not self.retry():
                    self._wait_out_stall(stop)
                    continue
                gone = producer_gone()
                self._note_received()
                handed = self.cycle(finished=gone, stop=stop)
                if self.stalled is not None or not self._settle():
                    continue  # a write failed: stalled, retried
                if self._between_cycles is not None:
                    self._between_cycles()
                if handed:
                    continue
                if not self._settle_writes():
                    continue  # a write failed: stalled, retried
                if self.producer_closed or gone:
                    return
                self.checkpoint_if_due()
            except Exception as exc:  # the drain thread must never die
                if isinstance(exc, OSError):
                    self.stats.failed_checkpoints += 1
                    self._stall(f"the checkpoint cannot be written: {exc!r}")
                else:
                    self._stall(f"{exc!r}")
                    _logger.debug("otel-trackio: drain error", exc_info=True)
                self._wait_out_stall(stop)
                continue
            stop.wait(idle_seconds)
        try:
            self._settle_writes()  # stopped: what was handed over is stored before it returns
        except OSError as exc:
            self.stats.failed_checkpoints += 1
            self._stall(f"the checkpoint cannot be written: {exc!r}")

    def _note_received(self) -> None:
        """Note what the producer has received (see ``receiving``), while a pipeline holds
        samples that settling would release (a sample needs a note taken after it completed)."""
        if self._receiving is None or not any(p.settling for p in self._pipelines):
            return
        oldest = self._receiving()
        received = time.monotonic() if oldest is None else oldest
        end = end_of_spool(self.path)  # read after: what was received by then is before it
        if self._received and self._received[-1][1] == end:
            self._received.pop()  # nothing appended since: the later moment says more
        self._received.append((received, end))

    def _settle(self) -> bool:
        """Settle the pipelines with the latest moment whose requests are all handed over;
        False, stalled, when a write failed."""
        received = None
        while self._received and self._received[0][1] <= self.position:
            received = self._received.popleft()[0]
        if received is None:
            return True
        ok = True
        for pipeline in self._pipelines:
            ok = pipeline.settle(received) and ok
        if not ok:
            self._stall(self._storage_failure())
        return ok

    def _settle_writes(self) -> bool:
        """Nothing more to hand over: wait for the pipelines' writes behind and checkpoint past
        what they stored; False, stalled, when one failed."""
        behind = [p for p in self._pipelines if p.writing_behind]
        if not behind:
            return True
        ok = all([p.settle_writes() for p in behind])
        if not ok:
            self._stall(self._storage_failure())
            return False
        self._save()
        return True

    def _wait_out_stall(self, stop: threading.Event) -> None:
        self._report_stall()
        stop.wait(self._backoff)
        self._backoff = min(BACKOFF_SECONDS[1], self._backoff * 2)

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
